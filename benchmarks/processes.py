"""What a session's background processes cost: a start, a read of output, one idle on the host.

Usage: ``python -m benchmarks.processes [--runs 3] [--calls 30] [--warmup 3] [--workers 2]
[--sessions 3] [--per-session 8] [--idle 10]``. On a private Redis, real worker processes
(multiprocessing "spawn", stopped by their PIDs) serve one host with a sessions root; bash's
settings are the defaults (the sandbox where bubblewrap works, the default limits). Each run:

1. ``start``: ``--calls`` rounds in one session of a ``calculator`` call (the trivial round
   trip), a ``process_list`` (a trivial call that reads the session's table), a ``bash`` of
   ``true`` and a ``process_start`` of ``sleep 3600`` with ``wait=0``, in alternating order;
   the started process is killed after its round, untimed. Per call: the time of
   ``Executor.run`` of that one call. Overheads: the median of the paired differences
   against the round's ``calculator`` and ``bash true``. In the same rounds, not calls: a
   bare Python and a Python that imports the keeper's module, as a keeper starts, each
   leaving by ``os._exit`` (the part of a start that is a Python interpreter coming up).
2. ``output``: ``--calls`` rounds of a ``calculator`` call and a ``process_output`` page
   (2,500 bytes from offset 0) of a running process that has written 10 kB.
3. ``idle``: ``--per-session`` ``sleep 3600`` processes in each of ``--sessions`` fresh
   sessions; then, from /proc, VmRSS (and PSS, which shares a library's pages among those
   that map it) of each keeper, of the sandbox's processes it runs and of each session's
   network holder, the CPU time (/proc/PID/schedstat) the keepers use over ``--idle`` s with
   nothing asked of them, and Redis's ``used_memory`` delta over the starts / processes (all
   they leave: the records, the calls' results and events) beside ``MEMORY USAGE`` of the
   sessions' process hashes / processes (the records alone). The sessions are deleted after.

Over ``--runs`` runs: min / median / max of each run's median (1, 2) or figure (3).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from rq import Worker

from benchmarks.entry import at_least, run_bench
from benchmarks.sides import BenchError, Pool
from benchmarks.workers import serve_builtin_tools
from executor import Executor, SessionError, Sessions, Settings, ToolStatus
from executor.wire import Keys
from workers._embedded_redis import RedisServer
from workers.processes import _place as place
from workers.processes._daemon import KEEPER_OF, daemon_env
from workers.tools._sandbox import probe

TRIVIAL = "calculator"
LISTING = "process_list"
BASH = "bash true"
START = "process_start"
PY_BARE = "(no call) a bare python"
PY_KEEPER = "(no call) python importing the keeper"
# Each leaves by os._exit, as a keeper is timed until it says ready, not until an exit that
# tears its modules down.
_PYTHONS = {
    PY_BARE: [sys.executable, "-c", "import os; os._exit(0)"],
    PY_KEEPER: [sys.executable, "-c", "import os, workers.tools._keeper; os._exit(0)"],
}
OUTPUT = "process_output"
_ARGUMENTS: dict[str, tuple[str, dict[str, Any]]] = {
    TRIVIAL: ("calculator", {"expression": "6*7"}),
    LISTING: ("process_list", {}),
    BASH: ("bash", {"command": "true"}),
    START: ("process_start", {"command": "sleep 3600", "wait": 0}),
}
# The running process a read pages through: 10 kB of output, then it sleeps.
_WRITER = "head -c 10000 /dev/zero | tr '\\0' x; echo; exec sleep 3600"
_WRITTEN = 10000
# "output bytes 0-2500 of 10002:" (the terminal ends the line with \r\n).
_PAGE_LINE = re.compile(r"^output bytes (\d+)-(\d+) of (\d+):$", re.MULTILINE)
_PAGE = 2500
_PATIENCE_S = 120.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def spread(values: Sequence[float], form: str = ".2f") -> str:
    """``min / median / max`` of ``values`` in ``form``."""
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"{low:{form}} / {middle:{form}} / {high:{form}}"


def paired(mine: Sequence[float], theirs: Sequence[float]) -> float:
    """The median of the round-by-round differences ``mine - theirs``."""
    return statistics.median(a - b for a, b in zip(mine, theirs, strict=True))


def order(names: Sequence[str], round_index: int) -> list[str]:
    """This round's order: as given, reversed every other round (load hits all alike)."""
    return list(names) if round_index % 2 == 0 else list(names)[::-1]


# -- /proc -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it now: name, parent, memory in kB, CPU in clock ticks."""

    pid: int
    name: str
    ppid: int
    rss_kb: int
    pss_kb: int
    cpu_ns: int


def read_proc(pid: int) -> Proc | None:
    """``pid`` as /proc shows it, or None if it is gone."""
    base = Path(f"/proc/{pid}")
    try:
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    # After the name: state ppid ... utime (14th field of the line) stime (15th).
    ppid, utime, stime = int(fields[1]), int(fields[11]), int(fields[12])
    rss = _status_kb(status, "VmRSS:")
    return Proc(pid, name, ppid, rss, _pss_kb(base, rss), _cpu_ns(base, utime + stime))


def _cpu_ns(base: Path, ticks: int) -> int:
    """The CPU time the scheduler counted (nanoseconds); without schedstat, utime + stime
    (in clock ticks, 10 ms, too coarse for an idle keeper)."""
    try:
        return int((base / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return ticks * 1_000_000_000 // _CLK_TCK


def _status_kb(status: str, key: str) -> int:
    for line in status.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0  # a kernel thread or a zombie has no memory lines


def _pss_kb(base: Path, rss_kb: int) -> int:
    try:
        rollup = (base / "smaps_rollup").read_text()
    except OSError:
        return rss_kb  # older kernels: PSS unknown, count the whole RSS
    return _status_kb(rollup, "Pss:")


def descendants(root: int) -> list[int]:
    """Every process under ``root`` (not ``root`` itself), from the parents /proc names."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = read_proc(int(entry.name))
            if found is not None:
                children.setdefault(found.ppid, []).append(found.pid)
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(out)


# -- the bench -------------------------------------------------------------------------------


@dataclass
class ProcessBench:
    """The private Redis, the host's workers and the sessions of the moment."""

    server: RedisServer
    folder: Path
    args: argparse.Namespace
    pool: Pool = field(default_factory=Pool)
    serial: Iterator[int] = field(default_factory=itertools.count)
    made: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.url = self.server.url
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.host = "bench-processes"
        self.root = self.folder / "sessions"
        workspace = self.folder / "workspace"
        self.root.mkdir()
        workspace.mkdir()
        self.settings = Settings(
            redis_url=self.url, workspace=workspace, sessions_root=self.root, host=self.host
        )
        self.sessions = Sessions(settings=Settings(redis_url=self.url))
        self.keys = Keys(self.settings.redis.key_prefix)

    def start_workers(self) -> None:
        names = [f"{self.host}-w{index}" for index in range(self.args.workers)]
        for name in names:
            self.pool.start(serve_builtin_tools, self.url, self.settings, name)
        keys = [Worker.redis_worker_namespace_prefix + name for name in names]
        self.pool.wait_until(
            lambda: (
                self.client.exists(*keys) == len(keys)
                and self.sessions.hosts().get(self.host, 0) >= len(names)
            ),
            "ready",
            _PATIENCE_S,
        )

    def close(self) -> None:
        """Delete the sessions (their processes stop), stop the workers, sweep what is left."""
        try:
            for name in list(self.made):
                self.delete(name)
        finally:
            self.pool.stop()
            self.sessions.close()
            self.client.close()
            left = sweep_daemons(self.root)
            # Deleting a session stops its processes: one left running is a finding.
            print(
                "daemons left after the sessions were deleted: "
                + (f"{len(left)} (killed: {', '.join(map(str, left))})" if left else "none"),
                flush=True,
            )

    @contextmanager
    def session(self, label: str) -> Iterator[tuple[str, Executor]]:
        """A fresh session of this host and an Executor that runs in it; deleted after."""
        name = f"{label}-{next(self.serial)}"
        self.sessions.create(name, host=self.host, timeout=_PATIENCE_S)
        self.made.append(name)
        executor = Executor(settings=Settings(redis_url=self.url), session=name)
        try:
            executor.catalog(session=name)  # routes and the catalog read before any clock
            yield name, executor
        finally:
            executor.close()
            self.delete(name)

    def delete(self, name: str) -> None:
        if name in self.made:
            self.made.remove(name)
            self.sessions.delete(name, force=True, timeout=_PATIENCE_S)

    def host_folder(self, name: str) -> Path:
        return place.session_host_folder(self.root, name)


_ids = itertools.count(1)


def call(executor: Executor, tool: str, arguments: dict[str, Any]) -> tuple[float, str]:
    """One call of ``tool`` through ``Executor.run``: milliseconds and its answer; a call that
    does not answer ``ok`` (or a bash that does not exit 0) is a ``BenchError``."""
    turn = [{"id": f"c{next(_ids)}", "name": tool, "arguments": arguments}]
    started = time.perf_counter()
    [result] = executor.run(turn, timeout=_PATIENCE_S)
    took = (time.perf_counter() - started) * 1000.0
    if result.status is not ToolStatus.OK or (
        tool == "bash" and not result.content.startswith("exit code: 0")
    ):
        raise BenchError(f"{tool} {arguments} answered {result.status}: {result.content[:300]!r}")
    return took, result.content


def python_ms(argv: list[str]) -> float:
    """How long ``argv`` (a Python) takes to run, started with a keeper's environment."""
    started = time.perf_counter()
    subprocess.run(argv, env=daemon_env(), check=True, stdin=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000.0


def started_id(answer: str) -> str:
    """The process id in a ``process_start`` answer ("Started background process p3 ...")."""
    words = answer.split()
    if words[:3] != ["Started", "background", "process"]:
        raise BenchError(f"process_start did not start a process: {answer[:300]!r}")
    return words[3]


def wait_until(ready: Callable[[], bool], what: str, patience: float = _PATIENCE_S) -> None:
    """Wait until ``ready()``; ``BenchError`` naming ``what`` after ``patience`` s."""
    deadline = time.monotonic() + patience
    while not ready():
        if time.monotonic() > deadline:
            raise BenchError(f"{what} not seen within {patience:g} s")
        time.sleep(0.05)


# -- 1 and 2: latencies ------------------------------------------------------------------------


def measure_start(bench: ProcessBench, executor: Executor) -> dict[str, list[float]]:
    """Per kind of call, the time of each of ``--calls`` rounds, after warm-up rounds."""
    kinds = [TRIVIAL, LISTING, BASH, START, PY_BARE, PY_KEEPER]
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for index in range(bench.args.warmup + bench.args.calls):
        this_round: dict[str, float] = {}
        started = ""
        for kind in order(kinds, index):
            if kind in _PYTHONS:
                this_round[kind] = python_ms(_PYTHONS[kind])
                continue
            tool, arguments = _ARGUMENTS[kind]
            took, answer = call(executor, tool, arguments)
            this_round[kind] = took
            if kind == START:
                started = started_id(answer)
        # Untimed: the session may run only so many at once, and each round starts alike.
        call(executor, "process_stop", {"process": started, "signal": "KILL"})
        if index >= bench.args.warmup:
            for kind, took in this_round.items():
                times[kind].append(took)
    return times


def measure_output(bench: ProcessBench, executor: Executor) -> dict[str, list[float]]:
    """The time of a ``calculator`` call and of a page of a running process's output, per
    round, after warm-up rounds."""
    _, answer = call(executor, "process_start", {"command": _WRITER, "wait": 0})
    process = started_id(answer)
    read = {"process": process, "offset": 0, "max_bytes": _PAGE}

    def written() -> bool:
        return _page_of(call(executor, OUTPUT, read)[1])[2] >= _WRITTEN

    wait_until(written, f"{_WRITTEN} bytes of {process}'s output")
    kinds = [TRIVIAL, OUTPUT]
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for index in range(bench.args.warmup + bench.args.calls):
        for kind in order(kinds, index):
            if kind == OUTPUT:
                took, page = call(executor, OUTPUT, read)
                if _page_of(page)[:2] != (0, _PAGE):
                    raise BenchError(f"process_output read no full page: {page[:300]!r}")
            else:
                took, _ = call(executor, *_ARGUMENTS[kind])
            if index >= bench.args.warmup:
                times[kind].append(took)
    call(executor, "process_stop", {"process": process, "signal": "KILL"})
    return times


def _page_of(answer: str) -> tuple[int, int, int]:
    """(from, to, of) of the page a ``process_output`` answer shows; (0, 0, 0) if none."""
    found = _PAGE_LINE.search(answer)
    return (int(found[1]), int(found[2]), int(found[3])) if found else (0, 0, 0)


# -- 3: idle cost ------------------------------------------------------------------------------


@dataclass
class Idle:
    """One run of the idle measurement: per background process and per session."""

    processes: int
    keeper_rss_kb: float  # median over keepers
    keeper_pss_kb: float
    sandbox_rss_kb: float  # median over processes of the sum of its sandbox's processes
    sandbox_pss_kb: float
    sandbox_count: float  # processes in one sandbox (median)
    sandbox_names: str
    holder_rss_kb: float  # median over the sessions' network holders (0: none)
    holder_pss_kb: float
    keeper_cpu_ms: float  # CPU a keeper used over the idle window (mean over keepers)
    sandbox_cpu_ms: float  # the same, of the processes it runs (mean)
    window_s: float
    redis_delta_b: float  # used_memory delta over the starts / processes
    record_b: float  # MEMORY USAGE of the processes hashes / processes


def keepers_of(bench: ProcessBench, names: Sequence[str]) -> list[tuple[int, int]]:
    """(keeper pid, command pid) of every running process of the sessions ``names``."""
    found = []
    for name in names:
        for folder in place.process_folders(bench.host_folder(name)):
            record = place.read_record(folder)
            if record is not None and record[0].state == "running":
                found.append((record[1], record[0].pid))
    return found


def measure_idle(bench: ProcessBench) -> Idle:
    """Start the processes in fresh sessions, measure them idle, delete the sessions."""
    args = bench.args
    with contextlib.ExitStack() as stack:
        executors = []
        names = []
        for _ in range(args.sessions):
            name, executor = stack.enter_context(bench.session("idle"))
            names.append(name)
            executors.append(executor)
            # The session's network holder comes with its first command: made before the
            # baseline of Redis's memory, as it is no part of a process's cost.
            call(executor, *_ARGUMENTS[BASH])
        before = _used_memory(bench.client)
        for executor in executors:
            for _ in range(args.per_session):
                started_id(call(executor, *_ARGUMENTS[START])[1])
        count: int = args.sessions * args.per_session

        def recorded() -> bool:
            records = [r for n in names for r in bench.sessions.store.processes(n)]
            return sum(r.state == "running" for r in records) == count

        wait_until(recorded, f"{count} running process records in Redis")
        after = _used_memory(bench.client)
        hashes = [bench.keys.session_processes(name) for name in names]
        record_bytes = sum(int(bench.client.memory_usage(key, samples=0) or 0) for key in hashes)
        pairs = keepers_of(bench, names)
        if len(pairs) != count:
            raise BenchError(f"{len(pairs)} keepers found running, {count} started")
        trees = {keeper: descendants(keeper) for keeper, _ in pairs}
        holders = [_holder(bench.host_folder(name)) for name in names]
        window_start = time.monotonic()
        cpu_before = _cpu({pid for tree in trees.values() for pid in tree} | set(trees))
        time.sleep(args.idle)  # the measuring window itself: nothing is asked of the keepers
        cpu_after = _cpu(set(cpu_before))
        window = time.monotonic() - window_start
        keepers = [read_proc(keeper) for keeper in trees]
        if any(k is None for k in keepers):
            raise BenchError("a keeper ended during the idle window")
        sandboxes = [[p for p in map(read_proc, tree) if p is not None] for tree in trees.values()]
        holder_procs = [p for p in map(read_proc, [h for h in holders if h]) if p is not None]

        def spent(pids: Sequence[int]) -> float:
            spent_ns = sum(cpu_after.get(pid, 0) - cpu_before.get(pid, 0) for pid in pids)
            return spent_ns / 1e6

        return Idle(
            processes=count,
            keeper_rss_kb=statistics.median(k.rss_kb for k in keepers if k),
            keeper_pss_kb=statistics.median(k.pss_kb for k in keepers if k),
            sandbox_rss_kb=statistics.median(sum(p.rss_kb for p in box) for box in sandboxes),
            sandbox_pss_kb=statistics.median(sum(p.pss_kb for p in box) for box in sandboxes),
            sandbox_count=statistics.median(len(box) for box in sandboxes),
            sandbox_names=" > ".join(p.name for p in sorted(sandboxes[0], key=lambda p: p.pid)),
            holder_rss_kb=statistics.median([h.rss_kb for h in holder_procs] or [0]),
            holder_pss_kb=statistics.median([h.pss_kb for h in holder_procs] or [0]),
            keeper_cpu_ms=spent(list(trees)) / count,
            sandbox_cpu_ms=spent([pid for tree in trees.values() for pid in tree]) / count,
            window_s=window,
            redis_delta_b=(after - before) / count,
            record_b=record_bytes / count,
        )


def _used_memory(client: redis.Redis) -> int:
    info: dict[str, Any] = client.info("memory")
    return int(info["used_memory"])


def _cpu(pids: set[int]) -> dict[int, int]:
    found = {}
    for pid in pids:
        proc = read_proc(pid)
        if proc is not None:
            found[pid] = proc.cpu_ns
    return found


def _holder(host_folder: Path) -> int:
    try:
        return int((host_folder / place.NETNS_PID).read_text())
    except (OSError, ValueError):
        return 0


def sweep_daemons(root: Path) -> list[int]:
    """SIGKILL keepers and network holders still running for folders under ``root`` (only
    ours: the folder names this benchmark's temporary directory); the pids killed."""
    marks = [f"{KEEPER_OF}={root}".encode(), str(root / place.HOST_STATE).encode()]
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "environ").read_bytes() + b"\0" + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(mark in seen for mark in marks):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


# -- the report --------------------------------------------------------------------------------


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _mib(kb: float) -> str:
    return f"{kb / 1024:.1f}"


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (min / median / max)")
    parser.add_argument("--calls", type=at_least(1), default=30, help="timed rounds a run")
    parser.add_argument("--warmup", type=at_least(0), default=3, help="untimed rounds first")
    parser.add_argument("--workers", type=at_least(1), default=2, help="worker processes")
    parser.add_argument("--sessions", type=at_least(1), default=3, help="sessions, idle part")
    parser.add_argument(
        "--per-session", type=at_least(1), default=8, help="idle processes a session (max 8)"
    )
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    args = parser.parse_args(argv)
    if args.per_session > 8:
        parser.error("--per-session: a session runs at most 8 (TOOLPOOL_BASH_BACKGROUND_MAX)")
    if args.idle <= 0:
        parser.error("--idle must be positive")
    return args


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    print(f"command: {shlex.join(sys.orig_argv)}", flush=True)
    found = probe(False)
    sandbox = found.version or found.bwrap if found.bwrap else f"none ({found.reason})"
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average at start {_load()}\n"
        f"{args.workers} workers, one host; bash's default settings; sandbox: {sandbox}; "
        f"{args.calls} timed rounds a run after {args.warmup} warm-up rounds, order reversed "
        f"every other round; {args.runs} run(s)",
        flush=True,
    )
    folder = Path(tempfile.mkdtemp(prefix="toolpool-bench-processes-"))
    print(f"folder: {folder} (removed at the end)", flush=True)
    try:
        with RedisServer() as server:
            bench = ProcessBench(server=server, folder=folder, args=args)
            try:
                bench.start_workers()
                _run_all(bench)
            finally:
                bench.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nload average at end: {_load()}")


def _run_all(bench: ProcessBench) -> None:
    args = bench.args
    starts: dict[str, list[float]] = {}
    over_trivial: list[float] = []
    over_bash: list[float] = []
    reads: dict[str, list[float]] = {}
    over_read: list[float] = []
    idles: list[Idle] = []
    for index in range(args.runs):
        with bench.session("latency") as (_, executor):
            times = measure_start(bench, executor)
            for kind, values in times.items():
                starts.setdefault(kind, []).append(statistics.median(values))
            over_trivial.append(paired(times[START], times[TRIVIAL]))
            over_bash.append(paired(times[START], times[BASH]))
            print(
                f"run {index + 1}/{args.runs} start:  "
                + ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in times.items())
                + f"; process_start - calculator {over_trivial[-1]:+.2f}, - bash true "
                f"{over_bash[-1]:+.2f} ms",
                flush=True,
            )
            times = measure_output(bench, executor)
            for kind, values in times.items():
                reads.setdefault(kind, []).append(statistics.median(values))
            over_read.append(paired(times[OUTPUT], times[TRIVIAL]))
            print(
                f"run {index + 1}/{args.runs} output: "
                + ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in times.items())
                + f"; process_output - calculator {over_read[-1]:+.2f} ms",
                flush=True,
            )
        idle = measure_idle(bench)
        idles.append(idle)
        print(
            f"run {index + 1}/{args.runs} idle:   {idle.processes} processes; keeper RSS "
            f"{_mib(idle.keeper_rss_kb)} MiB (PSS {_mib(idle.keeper_pss_kb)}), sandbox RSS "
            f"{_mib(idle.sandbox_rss_kb)} MiB (PSS {_mib(idle.sandbox_pss_kb)}); keeper CPU "
            f"{idle.keeper_cpu_ms:.1f} ms over {idle.window_s:.1f} s; Redis "
            f"{idle.redis_delta_b:.0f} B a start, {idle.record_b:.0f} B a record",
            flush=True,
        )
    _report(args, starts, over_trivial, over_bash, reads, over_read, idles)


def _report(
    args: argparse.Namespace,
    starts: dict[str, list[float]],
    over_trivial: list[float],
    over_bash: list[float],
    reads: dict[str, list[float]],
    over_read: list[float],
    idles: list[Idle],
) -> None:
    runs = f"min / median / max of {args.runs} run(s)"
    print(f"\n1. A call's round trip, ms (per run: median of {args.calls} rounds; {runs})")
    for kind in (TRIVIAL, LISTING, BASH, START, PY_BARE, PY_KEEPER):
        print(f"  {kind:<38} {spread(starts[kind]):>26}")
    print(f"  {'process_start - calculator':<38} {spread(over_trivial, '+.2f'):>26}")
    print(f"  {'process_start - bash true':<38} {spread(over_bash, '+.2f'):>26}")
    ratio = [s / t for s, t in zip(starts[START], starts[TRIVIAL], strict=True)]
    print(f"  {'process_start / calculator':<38} {spread(ratio):>26}")
    print(f"\n2. A page of a running process's output ({_PAGE} bytes), ms ({runs})")
    print(f"  {TRIVIAL:<38} {spread(reads[TRIVIAL]):>26}")
    print(f"  {OUTPUT:<38} {spread(reads[OUTPUT]):>26}")
    print(f"  {'process_output - calculator':<38} {spread(over_read, '+.2f'):>26}")
    count = idles[0].processes
    print(
        f"\n3. An idle background process (`sleep 3600`; {count} of them: {args.sessions} "
        f"session(s) x {args.per_session}), per process ({runs})"
    )
    print(f"  in its sandbox: {idles[0].sandbox_names}")
    rows: list[tuple[str, list[float], str]] = [
        ("keeper RSS, MiB", [i.keeper_rss_kb / 1024 for i in idles], ".1f"),
        ("keeper PSS, MiB", [i.keeper_pss_kb / 1024 for i in idles], ".1f"),
        ("sandbox's processes RSS, MiB", [i.sandbox_rss_kb / 1024 for i in idles], ".1f"),
        ("sandbox's processes PSS, MiB", [i.sandbox_pss_kb / 1024 for i in idles], ".1f"),
        (
            "host memory a process, PSS MiB",
            [(i.keeper_pss_kb + i.sandbox_pss_kb) / 1024 for i in idles],
            ".1f",
        ),
        ("session's network holder RSS, MiB", [i.holder_rss_kb / 1024 for i in idles], ".1f"),
        ("session's network holder PSS, MiB", [i.holder_pss_kb / 1024 for i in idles], ".1f"),
        (
            f"keeper CPU over {args.idle:g} s idle, ms",
            [i.keeper_cpu_ms * args.idle / i.window_s for i in idles],
            ".1f",
        ),
        (
            "keeper CPU idle, % of a core",
            [i.keeper_cpu_ms / i.window_s / 10 for i in idles],
            ".3f",
        ),
        (
            f"sandbox's CPU over {args.idle:g} s idle, ms",
            [i.sandbox_cpu_ms * args.idle / i.window_s for i in idles],
            ".1f",
        ),
        ("Redis used_memory delta / process, B", [i.redis_delta_b for i in idles], ".0f"),
        ("Redis record (MEMORY USAGE) / process, B", [i.record_b for i in idles], ".0f"),
    ]
    for label, values, form in rows:
        print(f"  {label:<42} {spread(values, form):>22}")
    print(
        f"  (CPU: /proc/PID/schedstat's run time, summed over the {count} keepers, / {count}; "
        "used_memory counts all a start leaves: the record, the call's result, its events)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when a call failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(
        lambda: run(args),
        (BenchError, SessionError),
        stopped="sessions, their processes, workers and Redis stopped",
    )


if __name__ == "__main__":
    sys.exit(main())
