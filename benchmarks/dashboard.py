"""Does ``toolpool dashboard`` with live viewers slow the pool? Measured side by side.

Usage: ``python -m benchmarks.dashboard [--runs 3] [--seconds 10] [--rate 100]
[--viewers 10] [--workers 2]``.

A private redis-server and ``--workers`` worker processes serving the built-in tools (bash's
sandbox off) on a temporary workspace that holds one small file. The load: ``--rate`` calls a
second, paced (call i is due ``i / rate`` seconds after the window starts), from
``CLIENTS`` threads of this process, each with an Executor of its own; each call is a turn of
one, ``calculator`` ``6*7`` and ``read_file`` of the small file by turns, and every answer is
checked. ``--rate 0``: unpaced, each thread calls back to back (the most the pool does).

A first window of the load, not counted, warms the pool up (a fresh pool's first seconds are
slower). Then each run measures two windows of the same load, their order reversed every other
run:

- without: the pool alone, no dashboard process at all;
- with: ``toolpool dashboard`` (a process of its own, started before the window and stopped
  after it) and ``--viewers`` viewers, each holding ``/api/stream`` open and reading it. The
  viewers run in one process of their own, over plain sockets (a reader as cheap as can be,
  that only counts each ``state`` and ``event`` message it gets). They compete for this
  machine's CPU as browsers on it would, not for this process's GIL; what they cost is
  counted against the dashboard, a pessimistic reading when the real viewers sit elsewhere.

A window is ``WARM_S`` of load, then ``--seconds`` measured: calls/s = calls completed in it /
its length; a call's latency = ``Executor.run`` of its turn, p50 and p90 over the calls started
in it. What "slowing the pool" means here: at a paced rate the pool keeps the rate as long as it
can, so a cost shows first in the latency of the calls (and in calls/s only once the pool falls
behind); unpaced (``--rate 0``) it shows in calls/s. Per run: both windows and the ratios
with / without; the CPU each group of processes used over the window (% of one core, from
``/proc/PID/stat``: this process, which makes the load, Redis, the workers, the dashboard, the
viewers) and the whole machine's busy share (``/proc/stat``), so a reader sees what the
dashboard costs and whether something else ran; and the proof the viewers were live: the
messages each got in the window, against the events the pool wrote.
Over ``--runs``: min / median / max. The goal: with / without at least 0.95 for calls/s and at
most 1.05 for p50 latency (median over runs).

Redis, the workers, the dashboard and the viewers' process are stopped by their pids at the
end, Ctrl-C and SIGTERM included; every wait has a deadline.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from benchmarks.entry import at_least, run_bench
from benchmarks.sides import BenchError, Pool, start_builtin_workers
from benchmarks.viewers import HOST, Viewers, viewers
from executor import Settings, ToolCall
from executor.client import Executor
from executor.wire import Keys, ToolStatus
from tests.support.ports import free_port
from tests.support.procs import python_path_env, stop_process
from workers._embedded_redis import RedisServer
from workers.tools._shell_settings import BashSettings

ROOT = Path(__file__).resolve().parents[1]
WITHOUT, WITH = "without dashboard", "with dashboard"
CLIENTS = 4
WARM_S = 2.0
#: The most the dashboard may slow the pool by (the issue's goal): 5 %.
SLOWDOWN = 0.05
SMALL_FILE = "notes.txt"
SMALL_TEXT = "".join(f"line {n}: a small file for read_file to read\n" for n in range(1, 11))
_START_PATIENCE_S = 90.0
# Only a broken pool makes a call wait this long; the benchmark then fails.
_CALL_PATIENCE_S = 60.0
_ASK_PATIENCE_S = 10.0
_STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Call:
    """One tool call of the load, and the text it must answer."""

    tool: str
    arguments: dict[str, Any]
    expected: str


CALLS = (
    Call("calculator", {"expression": "6*7"}, "6*7 = 42"),
    Call("read_file", {"path": SMALL_FILE}, SMALL_TEXT),
)


# -- the dashboard ----------------------------------------------------------------------------


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def dashboard(redis_url: str, log: Path) -> Iterator[tuple[int, int]]:
    """``toolpool dashboard`` on a free loopback port: (its port, its pid) once it answers;
    stopped by its pid after."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "executor.cli",
        "dashboard",
        "--host",
        HOST,
        "--port",
        str(port),
        "--redis",
        redis_url,
    ]
    # Our environment without TOOLPOOL_* (the command line says it all), the repository on
    # the path.
    env = python_path_env({k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")})
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + _START_PATIENCE_S
        while not _answers(f"http://{HOST}:{port}/api/state"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise BenchError(
                    f"the dashboard did not answer within {_START_PATIENCE_S:g} s "
                    f"(exit {process.poll()}): {_tail(log)}"
                )
            time.sleep(0.05)
        yield port, process.pid
    finally:
        stop_process(process, _STOP_GRACE_S)


# -- the measuring ----------------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    """The CPU time ``pid`` used so far (user + system, all its threads), in clock ticks."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # After the command's ")", fields 3 onwards; utime and stime are fields 14 and 15.
    rest = stat.rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def machine_ticks() -> tuple[int, int]:
    """The whole machine's (busy, total) clock ticks so far, every CPU."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:9]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


@dataclass(frozen=True)
class Sample:
    """What the counters said at one instant of a window."""

    at: float
    ticks: dict[str, int]
    machine: tuple[int, int]
    tallies: list[tuple[int, int]]
    events: int


@dataclass
class Probe:
    """Reads the counters of one window: the CPU of each group of processes in ``pids``, the
    viewers' tallies if any, and how many events the pool has written."""

    client: redis.Redis
    keys: Keys
    pids: dict[str, list[int]]
    viewers: Viewers | None = None

    def sample(self) -> Sample:
        written = self.client.xinfo_stream(self.keys.events)["entries-added"]
        return Sample(
            at=time.perf_counter(),
            ticks={name: sum(map(cpu_ticks, pids)) for name, pids in self.pids.items()},
            machine=machine_ticks(),
            tallies=self.viewers.tally() if self.viewers is not None else [],
            events=int(written),
        )


def percentile(values: Sequence[float], share: float) -> float:
    """The value ``share`` of the way up the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass
class Window:
    """One measured window of one side: the calls' figures and what the counters said."""

    side: str
    seconds: float
    completed: int
    latencies_ms: list[float]
    first: Sample
    last: Sample

    @property
    def rate(self) -> float:
        return self.completed / self.seconds

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.5)

    @property
    def p90(self) -> float:
        return percentile(self.latencies_ms, 0.9)

    def cpu(self, name: str) -> float | None:
        """The CPU of the processes ``name`` over the window, % of one core (None: none ran)."""
        if name not in self.first.ticks:
            return None
        used = (self.last.ticks[name] - self.first.ticks[name]) / os.sysconf("SC_CLK_TCK")
        return 100.0 * used / (self.last.at - self.first.at)

    @property
    def busy(self) -> float:
        """The machine's busy share over the window, % of all its CPUs."""
        (busy0, total0), (busy1, total1) = self.first.machine, self.last.machine
        return 100.0 * (busy1 - busy0) / max(1, total1 - total0)

    @property
    def written(self) -> int:
        return self.last.events - self.first.events

    def received(self) -> list[tuple[int, int]]:
        """Per viewer, the (state, event) messages it got in the window."""
        pairs = zip(self.first.tallies, self.last.tallies, strict=True)
        return [(s1 - s0, e1 - e0) for (s0, e0), (s1, e1) in pairs]


class Load:
    """``rate`` calls a second (0: back to back) from ``CLIENTS`` threads, each with an
    Executor of its own kept for every window."""

    def __init__(self, redis_url: str, rate: int) -> None:
        self.rate = rate
        self.executors = [Executor(settings=Settings(redis_url=redis_url)) for _ in range(CLIENTS)]

    def close(self) -> None:
        for executor in self.executors:
            executor.close()

    def window(self, side: str, seconds: float, probe: Probe) -> Window:
        """``WARM_S`` of load, then ``seconds`` measured between two samples of ``probe``."""
        stop, errors = threading.Event(), list[str]()
        records: list[tuple[float, float]] = []
        slots, taking = itertools.count(), threading.Lock()
        began = time.perf_counter()
        start, end = began + WARM_S, began + WARM_S + seconds

        def client(executor: Executor) -> None:
            while not stop.is_set():
                with taking:
                    index = next(slots)
                if self.rate:
                    due = began + index / self.rate
                    if due >= end or stop.wait(max(0.0, due - time.perf_counter())):
                        return
                elif time.perf_counter() >= end:
                    return
                which = CALLS[index % len(CALLS)]
                started = time.perf_counter()
                try:
                    text = _call(executor, which)
                except Exception as exc:  # reported by the main thread, which owns the error
                    errors.append(f"{which.tool} failed: {exc!r}")
                    stop.set()
                    return
                if text != which.expected:
                    errors.append(
                        f"{which.tool} answered {text[:200]!r}, expected {which.expected[:200]!r}"
                    )
                    stop.set()
                    return
                records.append((started, time.perf_counter()))

        threads = [
            threading.Thread(target=client, args=(executor,), daemon=True, name=f"bench-client-{n}")
            for n, executor in enumerate(self.executors)
        ]
        for thread in threads:
            thread.start()
        try:
            stop.wait(max(0.0, start - time.perf_counter()))
            first = probe.sample()
            stop.wait(max(0.0, end - time.perf_counter()))
            last = probe.sample()
        finally:
            # Past the window (or on a failure): no call starts any more; those running end.
            stop.set()
            deadline = time.perf_counter() + _CALL_PATIENCE_S + _STOP_GRACE_S
            for thread in threads:
                thread.join(max(0.0, deadline - time.perf_counter()))
        if errors:
            raise BenchError(f"{side}: {errors[0]}")
        if any(thread.is_alive() for thread in threads):
            raise BenchError(
                f"{side}: a client thread did not stop within "
                f"{_CALL_PATIENCE_S + _STOP_GRACE_S:g} s"
            )
        latencies = [
            (ended - started) * 1000 for started, ended in records if start <= started < end
        ]
        completed = sum(start <= ended < end for _, ended in records)
        if not latencies:
            raise BenchError(f"{side}: no call started in the {seconds:g} s window")
        return Window(side, seconds, completed, latencies, first, last)


def _call(executor: Executor, which: Call) -> str:
    (result,) = executor.run(
        [ToolCall(name=which.tool, arguments=which.arguments)], timeout=_CALL_PATIENCE_S
    )
    if result.status is not ToolStatus.OK:
        raise BenchError(f"{which.tool} failed: {result.content[:300]!r}")
    return result.content


def check_live(window: Window) -> None:
    """``BenchError`` unless every viewer got a message in the window (and an event, if the
    pool wrote any)."""
    for index, (states, events) in enumerate(window.received()):
        if states + events == 0 or (window.written and events == 0):
            raise BenchError(
                f"viewer {index} got {states} state and {events} event messages "
                f"in the window, the pool wrote {window.written} events: "
                "not live"
            )


# -- the report -------------------------------------------------------------------------------


def order(run_index: int) -> list[str]:
    """This run's order of the sides: without first, reversed every other run."""
    return [WITHOUT, WITH] if run_index % 2 == 0 else [WITH, WITHOUT]


@dataclass
class Figures:
    """Per side, one window a run."""

    windows: dict[str, list[Window]] = field(default_factory=lambda: {WITHOUT: [], WITH: []})

    def add(self, without: Window, with_: Window) -> None:
        self.windows[WITHOUT].append(without)
        self.windows[WITH].append(with_)

    def ratios(self, figure: Callable[[Window], float]) -> list[float]:
        """Per run, with / without of ``figure``."""
        pairs = zip(self.windows[WITH], self.windows[WITHOUT], strict=True)
        return [figure(with_) / figure(without) for with_, without in pairs]


def spread(values: Sequence[float], digits: int = 2) -> str:
    """``min / median / max``."""
    return " / ".join(
        f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values))
    )


def window_lines(window: Window, indent: int) -> list[str]:
    """One window's figures: calls/s and latency; the CPU each group of processes used; with
    the dashboard, the viewers' messages against the events the pool wrote."""
    lines = [
        f"{window.side:<17}  {window.rate:6.1f} calls/s  p50 {window.p50:6.2f} ms  "
        f"p90 {window.p90:6.2f} ms"
    ]
    used = ", ".join(f"{name} {window.cpu(name):.1f}" for name in window.first.ticks)
    lines.append(
        f"{'':<{indent}}CPU, % of one core: {used}; the machine {window.busy:.1f} % "
        "busy (all cores)"
    )
    received = window.received()
    if received:
        states, events = [s for s, _ in received], [e for _, e in received]
        lines.append(
            f"{'':<{indent}}viewers: each of {len(received)} got "
            f"{min(states)}-{max(states)} state and {min(events)}-{max(events)} event "
            f"messages, the pool wrote {window.written} events"
        )
    return lines


def ratio_line(without: Window, with_: Window) -> str:
    return (
        f"{'with / without':<17}  {with_.rate / without.rate:6.3f}x calls/s  "
        f"p50 {with_.p50 / without.p50:.3f}x   p90 {with_.p90 / without.p90:.3f}x"
    )


def table(figures: Figures) -> list[str]:
    """Per side, min / median / max over runs; and the ratios with / without."""
    header = (
        f"{'':<17} {'calls/s':>22} {'p50 ms':>22} {'p90 ms':>22} "
        f"{'dashboard CPU %':>19} {'viewers CPU %':>19}"
    )
    lines = [header + "   (each: min / median / max over runs)", "-" * len(header)]
    for side in (WITHOUT, WITH):
        windows = figures.windows[side]
        cpus = [[w.cpu(name) for w in windows] for name in ("dashboard", "viewers")]
        shown = [
            spread([c for c in cpu if c is not None], 1) if cpu[0] is not None else "-"
            for cpu in cpus
        ]
        lines.append(
            f"{side:<17} {spread([w.rate for w in windows], 1):>22} "
            f"{spread([w.p50 for w in windows]):>22} "
            f"{spread([w.p90 for w in windows]):>22} {shown[0]:>19} "
            f"{shown[1]:>19}"
        )
    lines.append(
        f"{'with / without':<17} {spread(figures.ratios(lambda w: w.rate), 3):>22} "
        f"{spread(figures.ratios(lambda w: w.p50), 3):>22} "
        f"{spread(figures.ratios(lambda w: w.p90), 3):>22}"
    )
    return lines


def goal(args: argparse.Namespace) -> str:
    """The goal line's first part, for these options."""
    pace = f"{args.rate} calls/s" if args.rate else "flat out"
    viewers = f"{args.viewers} viewer{'s' if args.viewers > 1 else ''}"
    return (
        f"goal: the dashboard and its {viewers} slow a pool running {pace} by at most "
        f"{SLOWDOWN * 100:g} % (with / without, median over runs: calls/s >= {1 - SLOWDOWN:g}, "
        f"p50 latency <= {1 + SLOWDOWN:g})"
    )


def verdict(figures: Figures, args: argparse.Namespace) -> str:
    """The goal line: met when the median over runs of both ratios is within the goal."""
    rate = statistics.median(figures.ratios(lambda w: w.rate))
    p50 = statistics.median(figures.ratios(lambda w: w.p50))
    met = rate >= 1 - SLOWDOWN and p50 <= 1 + SLOWDOWN
    return (
        f"{goal(args)}: {'met' if met else 'NOT met'} (calls/s {rate:.3f}, p50 latency {p50:.3f})"
    )


# -- the run ----------------------------------------------------------------------------------


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


@dataclass
class Setup:
    """What each window needs from the processes started before the runs."""

    args: argparse.Namespace
    redis_url: str
    folder: Path
    load: Load
    probe: Probe


def measure_side(side: str, setup: Setup, prefix: str) -> Window:
    """One window of ``side``; with the dashboard, its process and the viewers' started for it
    and stopped after."""
    args, probe = setup.args, setup.probe
    if side == WITHOUT:
        return setup.load.window(side, args.seconds, probe)
    log = setup.folder / "dashboard.log"
    with dashboard(setup.redis_url, log) as (port, pid), viewers(port, args.viewers) as watching:
        print(f"{prefix}  (dashboard pid {pid}, viewers' process pid {watching.pid})", flush=True)
        pids = {**probe.pids, "dashboard": [pid], "viewers": [watching.pid]}
        window = setup.load.window(
            side, args.seconds, Probe(probe.client, probe.keys, pids, watching)
        )
    check_live(window)
    return window


def _running(*pids: int | None) -> list[int]:
    """The pids of processes that must be running (None: one is not)."""
    if None in pids:
        raise BenchError("a process the benchmark started is not running")
    return [pid for pid in pids if pid is not None]


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average at start {_load()}",
        flush=True,
    )
    with ExitStack() as stack:
        folder = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="toolpool-bench-dash-"))
        )
        workspace = folder / "ws"
        workspace.mkdir()
        (workspace / SMALL_FILE).write_text(SMALL_TEXT)
        server = stack.enter_context(RedisServer())
        settings = Settings(
            redis_url=server.url, workspace=workspace, tools=[BashSettings(sandbox="off")]
        )
        pool = Pool()
        stack.callback(pool.stop)
        start_builtin_workers(pool, server.url, settings, args.workers, "dash")
        print(
            f"pool: redis-server (pid {server.pid}, unix socket), {args.workers} worker "
            f"processes (pids {', '.join(str(p.pid) for p in pool.processes)}) serving the "
            f"built-in tools, bash sandbox off; workspace {workspace}, removed at the "
            "end"
        )
        load = Load(server.url, args.rate)
        stack.callback(load.close)
        pace = f"paced at {args.rate} calls/s" if args.rate else "unpaced (back to back)"
        print(
            f"load: turns of one call, {' and '.join(c.tool for c in CALLS)} by turns, from "
            f"{CLIENTS} client threads, {pace}; a window: {WARM_S:g} s warm-up, "
            f"{args.seconds:g} s measured; a warm-up window, then {args.runs} run(s), each "
            f"a window without and one with the dashboard and {args.viewers} viewers, order "
            "reversed every other run"
        )
        print(goal(args) + "\n", flush=True)
        client = stack.enter_context(redis.Redis.from_url(server.url, socket_timeout=10))
        pids = {
            "load (this process)": [os.getpid()],
            "redis": _running(server.pid),
            "workers": _running(*(p.pid for p in pool.processes)),
        }
        probe = Probe(client, Keys(settings.redis.key_prefix), pids)
        setup = Setup(args, server.url, folder, load, probe)
        # The first window of a fresh pool is slower than the rest: one, not counted, first.
        warm = setup.load.window("warm-up", args.seconds, probe)
        print("\n".join(window_lines(warm, 0)), "(not counted)\n", flush=True)
        figures = Figures()
        for index in range(args.runs):
            prefix = f"run {index + 1}/{args.runs}"
            windows = {side: measure_side(side, setup, prefix) for side in order(index)}
            figures.add(windows[WITHOUT], windows[WITH])
            for side in order(index):
                lines = window_lines(windows[side], len(prefix) + 2)
                print(f"{prefix}  " + "\n".join(lines))
            print(f"{prefix}  {ratio_line(windows[WITHOUT], windows[WITH])}", flush=True)
    print()
    print("\n".join(table(figures)))
    print(f"\nload average at end: {_load()}")
    print(verdict(figures, args))


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (min / median / max)")
    parser.add_argument(
        "--seconds",
        type=at_least(1),
        default=10,
        help="measured seconds of each window (after a warm-up)",
    )
    parser.add_argument(
        "--rate",
        type=at_least(0),
        default=100,
        help="calls a second the load paces itself to (0: unpaced)",
    )
    parser.add_argument(
        "--viewers", type=at_least(1), default=10, help="viewers reading the dashboard's stream"
    )
    parser.add_argument("--workers", type=at_least(1), default=2, help="worker processes")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when something failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(
        lambda: run(args), (BenchError,), stopped="Redis, workers, dashboard and viewers stopped"
    )


if __name__ == "__main__":
    sys.exit(main())
