"""What bash's sandbox adds to a call through a pool started as users start it.

Usage: ``python -m benchmarks.sandbox_pool [--runs 3] [--rounds 30] [--warmup 8]
[--only latency,sessions,creates] [--pause 1.0]``. On a private redis-server, ``toolpool
worker --workers 4 --sessions-root DIR --host HOST --sandbox required`` (bash's default
limits, so each command has its cgroups too), and, for the comparison of the second figure,
the same with ``--sandbox off``. Each figure against its baseline measured in the same run,
``--runs`` runs, min / median / max over runs:

- ``latency``: a bash call of ``sleep 0.1`` in a session, through ``Executor.run``, against
  ``subprocess.run(["bash", "-c", "sleep 0.1"])`` in this process and the round trip of a
  trivial call (``calculator``, same session): per round ``bash - subprocess.run - trivial``,
  the three in alternating order; per run the median over ``--rounds`` rounds after
  ``--warmup`` untimed ones. Measured alone, and with three orchestrators on the pool: three
  processes, each an agent with a session of its own calling bash ``sleep 0.1`` back to back.
  Goal: at most 5 ms (median over runs), both.
- ``sessions``: 8 agents (threads, an Executor each) on 4 workers, each one turn of 5 bash
  ``sleep 0.2`` calls (exclusive: one after another) in a fresh session of its own, released
  together ``--pause`` seconds after their sessions are made (an agent's model answers before
  its first call; ``--pause 0``: at once). Efficiency: ideal (the sleep spread over the
  workers, 2.0 s) over wall time (first agent's start to last result). Goal: at least 0.90
  with the sandbox; the same agents on the pool with the sandbox off are measured for
  comparison.
- ``creates``: what the default ``TOOLPOOL_BASH_WARM_PEERS=new`` (every worker makes a new
  session's sandbox ahead, with CPU to spare) costs a busy host: 4 agents call bash ``true``
  back to back in sessions of their own while 60 sessions are made one after another; their
  calls/s and the creates' time, on a pool with ``new`` against one with ``off`` (the two by
  turns, their order alternating run by run). No goal: at most a few percent.

Every wait has a deadline; workers and Redis are stopped by their PIDs at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

from benchmarks.entry import at_least, run_bench
from benchmarks.sides import BenchError, Pool
from executor import Executor, SessionError, Sessions, Settings, ToolResult, ToolStatus

WORKERS = 4
SLEEP_LATENCY = 0.1
ORCHESTRATORS = 3
AGENTS = 8
CALLS = 5
SLEEP_AGENT = 0.2
LATENCY_GOAL_MS = 5.0
EFFICIENCY_GOAL = 0.90
BUSY_AGENTS = 4
CREATES = 60
PARTS = ("latency", "sessions", "creates")
_PATIENCE_S = 120.0
_SPAWN = multiprocessing.get_context("spawn")


@dataclass
class Host:
    """A ``toolpool worker`` of ``WORKERS`` processes serving sessions under a fresh host."""

    url: str
    folder: Path
    sandbox: str
    peers: str = "new"
    name: str = ""
    pool: Pool = field(default_factory=Pool)

    @contextmanager
    def serving(self) -> Iterator[Settings]:
        """The pool started and serving sessions; its client settings. Stopped by its PID."""
        self.name = f"sbx-{self.sandbox}-{self.peers}-{os.getpid()}"
        root = self.folder / self.name
        root.mkdir()
        script = Path(sys.executable).with_name("toolpool")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "workers.cli"]
        argv = [
            *command,
            "worker",
            "--workers",
            str(WORKERS),
            "--sessions-root",
            str(root),
            "--host",
            self.name,
            "--sandbox",
            self.sandbox,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
        env["TOOLPOOL_REDIS_URL"] = self.url
        env["TOOLPOOL_BASH_WARM_PEERS"] = self.peers
        settings = Settings(redis_url=self.url)
        try:
            self.pool.run(argv, env)
            print(f"  {shlex.join(argv[1:])}  (pid {self.pool.commands[0].pid})", flush=True)
            with Sessions(settings=settings) as sessions:
                self.pool.wait_until(
                    lambda: sessions.hosts().get(self.name, 0) >= WORKERS,
                    "serving sessions",
                    _PATIENCE_S,
                )
            yield settings
        finally:
            self.pool.stop()
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def sessions_made(settings: Settings, host: str, names: Sequence[str]) -> Iterator[None]:
    """Sessions ``names`` on ``host`` for the block's length, deleted after it."""
    with Sessions(settings=settings) as sessions:
        for name in names:
            sessions.create(name, host=host, timeout=_PATIENCE_S)
        try:
            yield
        finally:
            for name in names:
                sessions.delete(name, force=True, timeout=_PATIENCE_S)


def _ok(result: ToolResult, what: str, expected: str = "exit code: 0") -> None:
    if result.status is not ToolStatus.OK or not result.content.startswith(expected):
        raise BenchError(f"{what} failed: {result.error_type} {result.content[:300]!r}")


def _bash(seconds: float) -> dict[str, object]:
    return {"name": "bash", "arguments": {"command": f"sleep {seconds:g}"}}


_TRIVIAL = {"name": "calculator", "arguments": {"expression": "1 + 1"}}


# -- latency ---------------------------------------------------------------------------------


def orchestrate(url: str, session: str, ready: EventType, stop: EventType) -> None:
    """An orchestrator on the pool (a spawned process): bash ``sleep 0.1`` back to back in
    its session until ``stop``; ``ready`` once its first call answered."""
    with Executor(settings=Settings(redis_url=url), session=session) as executor:
        while not stop.is_set():
            (result,) = executor.run([_bash(SLEEP_LATENCY)], timeout=_PATIENCE_S)
            _ok(result, f"an orchestrator's call in {session}")
            ready.set()


@contextmanager
def orchestrators(settings: Settings, host: str, count: int) -> Iterator[None]:
    """``count`` orchestrator processes on the pool, each in a session of its own."""
    names = [f"orch-{index}" for index in range(count)]
    stop = _SPAWN.Event()
    started: list[multiprocessing.process.BaseProcess] = []
    with sessions_made(settings, host, names):
        try:
            readies = []
            for name in names:
                ready = _SPAWN.Event()
                process = _SPAWN.Process(
                    target=orchestrate, args=(settings.redis.url, name, ready, stop), daemon=True
                )
                process.start()
                started.append(process)
                readies.append(ready)
            for ready, child in zip(readies, started, strict=True):
                if not ready.wait(_PATIENCE_S) or not child.is_alive():
                    raise BenchError(f"orchestrator {child.pid} did not get going")
            yield
        finally:
            stop.set()
            for child in started:
                child.join(_PATIENCE_S)
                if child.is_alive() and child.pid is not None:
                    child.kill()
                    child.join(5.0)


def _timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000.0


@dataclass
class Latency:
    """One run's rounds: per round the three times, in ms."""

    bash: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    trivial: list[float] = field(default_factory=list)

    @property
    def over(self) -> float:
        """Median over rounds of bash - subprocess.run - trivial round trip."""
        rounds = zip(self.bash, self.plain, self.trivial, strict=True)
        return statistics.median(b - p - t for b, p, t in rounds)


def measure_latency(executor: Executor, rounds: int, warmup: int) -> Latency:
    """``rounds`` rounds of the three, after ``warmup`` untimed ones; order alternating."""

    def bash() -> None:
        (result,) = executor.run([_bash(SLEEP_LATENCY)], timeout=_PATIENCE_S)
        _ok(result, "the measured bash call")

    def trivial() -> None:
        (result,) = executor.run([_TRIVIAL], timeout=_PATIENCE_S)
        _ok(result, "the trivial call", "1 + 1 = 2")

    def plain() -> None:
        subprocess.run(["bash", "-c", f"sleep {SLEEP_LATENCY:g}"], check=True)

    figures = Latency()
    for index in range(warmup + rounds):
        order = [("bash", bash), ("plain", plain), ("trivial", trivial)]
        taken = {name: _timed(run) for name, run in (order if index % 2 else order[::-1])}
        if index >= warmup:
            figures.bash.append(taken["bash"])
            figures.plain.append(taken["plain"])
            figures.trivial.append(taken["trivial"])
    return figures


def latency(url: str, folder: Path, args: argparse.Namespace) -> list[str]:
    """The first figure, alone and with orchestrators; the summary lines."""
    print(f"\nlatency: bash `sleep {SLEEP_LATENCY:g}` in a session, sandbox required")
    runs: dict[str, list[Latency]] = {"alone": [], "busy": []}
    host = Host(url, folder, "required")
    with (
        host.serving() as settings,
        sessions_made(settings, host.name, ["measured"]),
        Executor(settings=settings, session="measured") as executor,
    ):
        executor.catalog(session="measured")
        for index in range(args.runs):
            for phase in ("alone", "busy") if index % 2 == 0 else ("busy", "alone"):
                load = ORCHESTRATORS if phase == "busy" else 0
                with orchestrators(settings, host.name, load):
                    found = measure_latency(executor, args.rounds, args.warmup)
                runs[phase].append(found)
                print(
                    f"  run {index + 1}/{args.runs} {phase:<5} bash "
                    f"{statistics.median(found.bash):7.2f} ms, subprocess.run "
                    f"{statistics.median(found.plain):7.2f} ms, trivial call "
                    f"{statistics.median(found.trivial):6.2f} ms; bash over both "
                    f"{found.over:+6.2f} ms (median of {args.rounds} rounds)",
                    flush=True,
                )
    lines = []
    for phase, label in (("alone", "alone"), ("busy", f"with {ORCHESTRATORS} orchestrators")):
        overs = [found.over for found in runs[phase]]
        middle = statistics.median(overs)
        verdict = "met" if middle <= LATENCY_GOAL_MS else "NOT met"
        lines.append(
            f"bash `sleep {SLEEP_LATENCY:g}` over subprocess.run, less a trivial call's round "
            f"trip, {label}: {_spread(overs, signed=True)} ms (goal <= {LATENCY_GOAL_MS:g} ms "
            f"median: {verdict})"
        )
    return lines


# -- sessions --------------------------------------------------------------------------------


def _agents(settings: Settings, names: Sequence[str], pause: float) -> float:
    """Each session's agent runs its turn, all released together ``pause`` s after their
    sessions were made; the wall time in s."""
    made = time.monotonic()
    executors = [Executor(settings=settings, session=name) for name in names]
    barrier = threading.Barrier(len(names))
    spans: list[tuple[float, float] | BaseException | None] = [None] * len(names)

    def agent(index: int) -> None:
        try:
            barrier.wait(_PATIENCE_S)
            started = time.perf_counter()
            results = executors[index].run([_bash(SLEEP_AGENT)] * CALLS, timeout=_PATIENCE_S)
            ended = time.perf_counter()
            for result in results:
                _ok(result, f"a call of agent {index}")
            spans[index] = (started, ended)
        except BaseException as exc:  # handed to the main thread, which raises it
            spans[index] = exc

    try:
        for executor, name in zip(executors, names, strict=True):
            executor.catalog(session=name)  # routes and catalogs read before the clock
        time.sleep(max(0.0, made + pause - time.monotonic()))
        threads = [
            threading.Thread(target=agent, args=(i,), daemon=True) for i in range(len(names))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(_PATIENCE_S)
    finally:
        for executor in executors:
            executor.close()
    done: list[tuple[float, float]] = []
    for span in spans:
        if not isinstance(span, tuple):
            raise BenchError(f"an agent did not finish: {span!r}")
        done.append(span)
    return max(end for _, end in done) - min(start for start, _ in done)


def sessions(url: str, folder: Path, args: argparse.Namespace) -> list[str]:
    """The second figure, with the sandbox and, for comparison, without; the summary lines."""
    ideal = AGENTS * CALLS * SLEEP_AGENT / WORKERS
    print(
        f"\nsessions: {AGENTS} agents x {CALLS} bash `sleep {SLEEP_AGENT:g}` on {WORKERS} "
        f"workers, a fresh session each, released {args.pause:g} s after it is made "
        f"(ideal {ideal:.2f} s)"
    )
    efficiency: dict[str, list[float]] = {}
    for sandbox in ("required", "off"):
        host = Host(url, folder, sandbox)
        efficiency[sandbox] = []
        with host.serving() as settings:
            for index in range(args.runs + 1):
                names = [f"r{index}-a{agent}" for agent in range(AGENTS)]
                with sessions_made(settings, host.name, names):
                    wall = _agents(settings, names, args.pause)
                if index == 0:
                    continue  # untimed: every worker's first calls and imports
                efficiency[sandbox].append(ideal / wall)
                print(
                    f"  run {index}/{args.runs} sandbox {sandbox:<8} wall {wall:.3f} s, "
                    f"efficiency {ideal / wall:.3f}",
                    flush=True,
                )
    middle = statistics.median(efficiency["required"])
    verdict = "met" if middle >= EFFICIENCY_GOAL else "NOT met"
    return [
        f"{AGENTS} sessions x {CALLS} bash `sleep {SLEEP_AGENT:g}` on {WORKERS} workers, "
        f"released {args.pause:g} s after made, efficiency: sandbox "
        f"{_spread(efficiency['required'])}, sandbox off "
        f"{_spread(efficiency['off'])} (goal >= {EFFICIENCY_GOAL:.2f} with the sandbox, "
        f"median: {verdict})"
    ]


# -- creates ---------------------------------------------------------------------------------


@dataclass
class _Creates:
    """One pool's figures: the busy agents' bash calls/s, and each create's time in ms."""

    rate: float
    times: list[float]


def _creates_beside_agents(settings: Settings, host: str, index: int) -> _Creates:
    """``BUSY_AGENTS`` agents call bash back to back while ``CREATES`` sessions are made."""
    names = [f"c{index}-busy{agent}" for agent in range(BUSY_AGENTS)]
    stop, counts = threading.Event(), [0] * BUSY_AGENTS
    started = threading.Barrier(BUSY_AGENTS + 1)
    failures: list[BaseException] = []

    def agent(number: int) -> None:
        try:
            with Executor(settings=settings, session=names[number]) as executor:
                first = True
                while not stop.is_set():
                    (result,) = executor.run([_bash(0)], timeout=_PATIENCE_S)
                    _ok(result, f"busy agent {number}'s call")
                    counts[number] += 1
                    if first:
                        first = False
                        started.wait(_PATIENCE_S)
        except BaseException as exc:  # handed to the main thread, which raises it
            failures.append(exc)
            started.abort()

    made: list[str] = []
    with sessions_made(settings, host, names), Sessions(settings=settings) as sessions:
        threads = [
            threading.Thread(target=agent, args=(i,), daemon=True) for i in range(BUSY_AGENTS)
        ]
        try:
            for thread in threads:
                thread.start()
            started.wait(_PATIENCE_S)  # every agent has called bash: the workers watch the host
            before, clock = sum(counts), time.perf_counter()
            times = []
            for number in range(CREATES):
                name = f"c{index}-new{number}"
                begun = time.perf_counter()
                sessions.create(name, host=host, timeout=_PATIENCE_S)
                times.append((time.perf_counter() - begun) * 1000)
                made.append(name)
            rate = (sum(counts) - before) / (time.perf_counter() - clock)
        except threading.BrokenBarrierError:
            raise BenchError(f"a busy agent failed: {failures[:1]!r}") from None
        finally:
            stop.set()
            for thread in threads:
                thread.join(_PATIENCE_S)
            for name in made:
                sessions.delete(name, force=True, timeout=_PATIENCE_S)
    if failures:
        raise BenchError(f"a busy agent failed: {failures[0]!r}")
    return _Creates(rate, times)


def creates(url: str, folder: Path, args: argparse.Namespace) -> list[str]:
    """The third figure: ``new`` against ``off``, by turns; the summary lines."""
    print(
        f"\ncreates: {CREATES} sessions made one after another beside {BUSY_AGENTS} agents "
        f"calling bash `true` back to back, TOOLPOOL_BASH_WARM_PEERS new against off"
    )
    found: dict[str, list[_Creates]] = {"new": [], "off": []}
    for index in range(1, args.runs + 1):
        for peers in ("off", "new") if index % 2 else ("new", "off"):
            host = Host(url, folder, "required", peers=peers)
            with host.serving() as settings:
                figures = _creates_beside_agents(settings, host.name, index)
            found[peers].append(figures)
            print(
                f"  run {index}/{args.runs} peers {peers:<3} busy agents "
                f"{figures.rate:6.1f} calls/s, create p50 "
                f"{statistics.median(figures.times):5.1f} ms, p90 "
                f"{statistics.quantiles(figures.times, n=10)[-1]:5.1f} ms",
                flush=True,
            )
    ratios = [new.rate / off.rate for new, off in zip(found["new"], found["off"], strict=True)]
    p50 = {peers: [statistics.median(f.times) for f in runs] for peers, runs in found.items()}
    return [
        f"{CREATES} sessions made beside {BUSY_AGENTS} agents calling bash back to back: their "
        f"calls/s, peers new / off {_spread(ratios)}; create p50 new {_spread(p50['new'])} ms, "
        f"off {_spread(p50['off'])} ms"
    ]


# -- the run ---------------------------------------------------------------------------------


def _spread(values: Sequence[float], signed: bool = False) -> str:
    form = "+.2f" if signed else ".2f"
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"{low:{form}} / {middle:{form}} / {high:{form}}"


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (min / median / max)")
    parser.add_argument("--rounds", type=at_least(1), default=30, help="timed latency rounds")
    parser.add_argument("--warmup", type=at_least(0), default=8, help="untimed rounds first")
    parser.add_argument("--only", default=",".join(PARTS), help=f"parts, of {', '.join(PARTS)}")
    parser.add_argument(
        "--pause",
        type=float,
        default=1.0,
        help="sessions: seconds from the sessions made to the agents released",
    )
    args = parser.parse_args(argv)
    args.parts = [part.strip() for part in args.only.split(",") if part.strip()]
    if not 0 <= args.pause <= _PATIENCE_S:
        parser.error(f"--pause takes 0 to {_PATIENCE_S:g} seconds, got {args.pause:g}")
    if not args.parts or any(part not in PARTS for part in args.parts):
        parser.error(f"--only takes names from {', '.join(PARTS)}, got {args.only!r}")
    return args


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    from workers._embedded_redis import RedisServer

    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"machine: {os.cpu_count()} CPUs; load average at start {_load()}")
    summary: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="toolpool-bench-sandbox-pool-"))
    try:
        with RedisServer() as server:
            if "latency" in args.parts:
                summary += latency(server.url, folder, args)
            if "sessions" in args.parts:
                summary += sessions(server.url, folder, args)
            if "creates" in args.parts:
                summary += creates(server.url, folder, args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nload average at end: {_load()}\n\nSummary (min / median / max of {args.runs} runs)")
    for line in summary:
        print(f"  {line}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when a call or the pool failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(lambda: run(args), (BenchError, SessionError))


if __name__ == "__main__":
    sys.exit(main())
