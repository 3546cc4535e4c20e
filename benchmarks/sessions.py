"""Measure what sessions buy: agents whose exclusive calls no longer share one lock.

Usage: ``python -m benchmarks.sessions [--runs 3] [--quick] [--plot PATH]``. The figure
(default ``docs/figures-sessions.png``; none with ``--quick`` unless ``--plot`` is given) needs
matplotlib; without it the figures are printed only. An agent is a thread with an Executor of
its own that runs one turn of 5 ``bash`` calls of ``sleep 0.2``; the calls of a turn are
exclusive, so they run one after another. Prints, in one run:

- the headline, ``--runs`` times: 8 agents on 4 workers, each in a session of its own,
  against the same 8 agents without sessions (every exclusive call in the one global scope);
- a sweep of workers 1/2/4/8 against sessions 1/8/32 (one agent per session; the 1-session
  row is 8 agents sharing one session), one run a cell;
- a session created from a big template (site-packages) against ``cp -a`` of it, ``--runs``
  times (``benchmarks.session_create``);
- where the time goes, from the workers' events: how long a call holds its lock (the bash
  run) and how long a worker takes from one call's release to its next call's grant (dispatch;
  with fewer sessions than workers, waits for the session's lock too).

Efficiency is ideal time / measured time (wall: first agent's start to last agent's result).
Ideal: the agents' sleep spread over the workers, but no shorter than the calls of one lock
scope one after another (a session's, or one agent's own turn when there are no sessions, as
the issue measured the baseline). Workers are real processes (multiprocessing "spawn", stopped
by their PIDs) with a sessions root and a workspace, on a Redis of our own; each pool has a
fresh host name, so its sessions and catalog entries are its own. Every wait has a deadline.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import rq
from rq import Worker

from benchmarks.calls import _load, _spread
from benchmarks.entry import run_bench
from benchmarks.session_create import measure_create
from benchmarks.session_shape import (
    CALLS,
    HEADLINE_AGENTS,
    HEADLINE_WORKERS,
    SHARED_AGENTS,
    SLEEP_S,
    TARGET,
    Measured,
    Shape,
)
from benchmarks.sessions_plot import plot
from benchmarks.sides import BenchError, Pool
from benchmarks.workers import run_toolpool_worker
from executor import Executor, SessionError, Sessions, Settings, ToolStatus
from executor.wire import Event, Keys, read_events
from workers._embedded_redis import RedisServer

DEFAULT_PLOT = Path(__file__).resolve().parents[1] / "docs" / "figures-sessions.png"
_SWEEP_WORKERS = (1, 2, 4, 8)
_SWEEP_SESSIONS = (1, 8, 32)
_QUICK_WORKERS = (2, 4)
_QUICK_SESSIONS = (1, 8)
_PATIENCE_S = 90.0


@dataclass(frozen=True)
class _AgentRun:
    """One agent's turn: when it was submitted, when its last result came, failed calls."""

    started: float
    ended: float
    failed: int


@dataclass
class SessionBench:
    """The private Redis, the sessions client and the worker pool of the moment."""

    server: RedisServer
    folder: Path
    args: argparse.Namespace
    pools: list[Pool] = field(default_factory=list)
    serial: int = 0
    host: str = ""
    summary: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.url = self.server.url
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.client_settings = Settings(redis_url=self.url)
        self.sessions = Sessions(settings=self.client_settings)
        self.keys = Keys(self.client_settings.redis.key_prefix)

    def close(self) -> None:
        for pool in list(self.pools):
            pool.stop()
        self.sessions.close()
        self.client.close()

    def tag(self) -> str:
        """A fresh prefix for call ids and session names (each may be used once)."""
        self.serial += 1
        return f"b{self.serial}"

    def out(self, line: str = "") -> None:
        """Print a line of the report now."""
        print(line, flush=True)

    @contextmanager
    def workers(self, count: int) -> Iterator[None]:
        """``count`` worker processes of a fresh host, each serving sessions and pool calls."""
        self.host = f"bench-{self.tag()}"
        workspace, root = self.folder / self.host / "workspace", self.folder / self.host / "s"
        workspace.mkdir(parents=True)
        root.mkdir()
        settings = Settings(
            redis_url=self.url, workspace=workspace, sessions_root=root, host=self.host
        )
        pool = Pool()
        self.pools.append(pool)
        names = [f"{self.host}-w{index}" for index in range(count)]
        try:
            for name in names:
                pool.start(run_toolpool_worker, self.url, settings, name)
            self._wait_ready(pool, names)
            yield
        finally:
            pool.stop()
            self.pools.remove(pool)

    def _wait_ready(self, pool: Pool, names: list[str]) -> None:
        # Registered with RQ (taking jobs) and published in the catalog (sessions can be made).
        keys = [Worker.redis_worker_namespace_prefix + name for name in names]
        pool.wait_until(
            lambda: (
                self.client.exists(*keys) == len(keys)
                and self.sessions.hosts().get(self.host, 0) >= len(names)
            ),
            "ready",
            _PATIENCE_S,
        )

    def measure(self, shape: Shape, *, calls: int = CALLS) -> Measured:
        """One run of ``shape``: create its sessions, release its agents together, delete them."""
        tag = self.tag()
        # The events of this run come after the newest one now (XRANGE's start is inclusive:
        # that one is read again and dropped with the other runs' calls).
        newest: list[tuple[bytes, Any]] = self.client.xrevrange(  # type: ignore[assignment]
            self.keys.events, count=1
        )
        since = newest[0][0].decode() if newest else "-"
        names = [f"{tag}-s{index}" for index in range(shape.sessions)]
        for name in names:
            self.sessions.create(name, host=self.host, timeout=_PATIENCE_S)
        assigned = [names[i % len(names)] if names else None for i in range(shape.agents)]
        executors = [Executor(settings=self.client_settings) for _ in assigned]
        try:
            for executor, session in zip(executors, assigned, strict=True):
                executor.catalog(session=session)  # routes and catalogs read before the clock
            runs = _run_agents(executors, assigned, tag, calls)
        finally:
            for executor in executors:
                executor.close()
            for name in names:
                self.sessions.delete(name, timeout=_PATIENCE_S)
        wall = max(r.ended for r in runs) - min(r.started for r in runs)
        hold, gap = self._call_timings(tag, since)
        return Measured(shape, wall, sum(r.failed for r in runs), hold, gap)

    def _call_timings(self, tag: str, since: str) -> tuple[float, float]:
        """Median hold of a call and median gap between a worker's calls, from the events."""
        granted: dict[str, Event] = {}
        spans: dict[str, list[tuple[float, float]]] = {}
        for _, item in read_events(self.client, self.keys, since=since):
            if not item.call_id.startswith(f"{tag}-"):
                continue
            if item.event == "lock_acquired":
                granted[item.call_id] = item
            elif item.event == "lock_released" and item.call_id in granted:
                start = granted.pop(item.call_id).ts
                spans.setdefault(item.worker, []).append((start, item.ts))
        holds = [end - start for held in spans.values() for start, end in held]
        gaps = [b[0] - a[1] for held in spans.values() for a, b in itertools.pairwise(sorted(held))]
        return _median(holds), _median(gaps)


def _ms_spread(values: list[float]) -> str:
    """``min / median / max`` of ``values`` in whole milliseconds."""
    spread = (min(values), statistics.median(values), max(values))
    return " / ".join(f"{v * 1000:.0f}" for v in spread) + " ms"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _run_agents(
    executors: list[Executor], sessions: list[str | None], tag: str, calls: int
) -> list[_AgentRun]:
    """Each executor runs one turn in its session, all released by one barrier."""
    barrier = threading.Barrier(len(executors))
    outcomes: list[_AgentRun | BaseException | None] = [None] * len(executors)
    patience = _PATIENCE_S + len(executors) * calls * SLEEP_S * 4

    def agent(index: int) -> None:
        turn = [
            {
                "id": f"{tag}-a{index}-{j}",
                "name": "bash",
                "arguments": {"command": f"sleep {SLEEP_S:g}"},
            }
            for j in range(calls)
        ]
        try:
            barrier.wait(timeout=_PATIENCE_S)
            started = time.perf_counter()
            results = executors[index].run(turn, session=sessions[index], timeout=patience)
            ended = time.perf_counter()
            failed = sum(
                r.status is not ToolStatus.OK or not r.content.startswith("exit code: 0")
                for r in results
            )
            outcomes[index] = _AgentRun(started, ended, failed)
        except BaseException as exc:  # handed to the main thread, which raises it
            outcomes[index] = exc

    threads = [
        threading.Thread(target=agent, args=(i,), daemon=True) for i in range(len(executors))
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + _PATIENCE_S + patience
    for thread in threads:
        thread.join(max(0.1, deadline - time.monotonic()))
    runs: list[_AgentRun] = []
    for outcome in outcomes:
        if outcome is None:
            raise BenchError(f"an agent did not finish within {_PATIENCE_S + patience:g} s")
        if isinstance(outcome, BaseException):
            raise BenchError(f"an agent failed: {outcome!r}") from outcome
        runs.append(outcome)
    return runs


# -- the measurements ------------------------------------------------------------------------


def measure_headline(bench: SessionBench) -> dict[int, list[Measured]]:
    """``--runs`` runs each of 8 sessions and of no sessions, alternating which goes first."""
    shapes = [
        Shape(HEADLINE_WORKERS, HEADLINE_AGENTS, HEADLINE_AGENTS),
        Shape(HEADLINE_WORKERS, 0, HEADLINE_AGENTS),
    ]
    runs: dict[int, list[Measured]] = {shape.sessions: [] for shape in shapes}
    for index in range(bench.args.runs):
        for shape in shapes if index % 2 == 0 else shapes[::-1]:
            runs[shape.sessions].append(bench.measure(shape))
    ideal = shapes[0].ideal_s
    for shape in shapes:
        done = runs[shape.sessions]
        bench.out(
            f"  {shape.label:<12} measured {_spread([m.wall_s for m in done])} s   efficiency "
            f"{_spread([m.efficiency for m in done])}   (failed {sum(m.failed for m in done)})"
        )
    sessions = runs[HEADLINE_AGENTS]
    bench.out(
        f"  with sessions, a call holds its lock {_ms_spread([m.hold_s for m in sessions])} "
        f"(bash `sleep {SLEEP_S:g}`), and a worker's next call starts "
        f"{_ms_spread([m.gap_s for m in sessions])} after (medians per run)"
    )
    speedups = [b.wall_s / s.wall_s for s, b in zip(runs[HEADLINE_AGENTS], runs[0], strict=True)]
    bench.out(f"  speed-up (no sessions / 8 sessions, per run pair): {_spread(speedups)}")
    bench.out(f"  all as min / median / max of {bench.args.runs} run(s); ideal {ideal:.2f} s")
    efficiency = statistics.median(m.efficiency for m in runs[HEADLINE_AGENTS])
    verdict = "meets" if efficiency >= TARGET else "misses"
    bench.summary.append(
        f"{HEADLINE_AGENTS} agents x {CALLS} x sleep {SLEEP_S:g} on {HEADLINE_WORKERS} workers: "
        f"8 sessions efficiency {_spread([m.efficiency for m in runs[HEADLINE_AGENTS]])}, "
        f"no sessions {_spread([m.efficiency for m in runs[0]])} (min / median / max of "
        f"{bench.args.runs}); median {efficiency:.2f} {verdict} the target {TARGET}"
    )
    return runs


def sweep_shapes(workers: int, quick: bool) -> list[Shape]:
    """The sweep's cells for one worker count."""
    counts = _QUICK_SESSIONS if quick else _SWEEP_SESSIONS
    return [Shape(workers, s, SHARED_AGENTS if s == 1 else s) for s in counts]


def format_row(measured: Measured) -> str:
    shape = measured.shape
    return (
        f"  {shape.workers:>7} {shape.sessions:>9} {shape.agents:>7} {shape.ideal_s:>9.2f} "
        f"{measured.wall_s:>12.2f} {measured.efficiency:>11.2f} {measured.hold_s * 1000:>8.0f} "
        f"{measured.gap_s * 1000:>7.0f} {measured.failed:>7}"
    )


SWEEP_HEADER = (
    f"  {'workers':>7} {'sessions':>9} {'agents':>7} {'ideal s':>9} {'measured s':>12} "
    f"{'efficiency':>11} {'hold ms':>8} {'gap ms':>7} {'failed':>7}"
)


# -- the run ---------------------------------------------------------------------------------


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="headline runs (min/median/max)")
    parser.add_argument("--quick", action="store_true", help="a smaller sweep (< 1 min)")
    parser.add_argument(
        "--plot",
        type=Path,
        help=f"where the PNG goes (default {DEFAULT_PLOT.relative_to(DEFAULT_PLOT.parents[1])}; "
        "none with --quick, so a quick run leaves the full run's figure alone)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.plot is None and not args.quick:
        args.plot = DEFAULT_PLOT
    return args


def _header(bench: SessionBench) -> None:
    info: dict[str, Any] = bench.client.info("server")
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    bench.out(
        f"Python {sys.version.split()[0]}, rq {rq.__version__}, redis-py {redis.__version__}, "
        f"redis-server {info.get('redis_version')} (unix socket); cores: {cores} ({usable} "
        "usable)"
    )
    bench.out(
        f"an agent: a thread with its own Executor, one turn of {CALLS} bash calls of "
        f"`sleep {SLEEP_S:g}` (exclusive: one after another); efficiency = ideal / measured"
    )
    bench.out(f"load average at start: {_load()} (other programs may share these cores)")


def run(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="toolpool-bench-sessions-"))
    try:
        with RedisServer() as server:
            bench = SessionBench(server=server, folder=folder, args=args)
            try:
                _run_all(bench)
            finally:
                bench.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_all(bench: SessionBench) -> None:
    args = bench.args
    _header(bench)
    counts = sorted({HEADLINE_WORKERS, *(_QUICK_WORKERS if args.quick else _SWEEP_WORKERS)})
    headline: dict[int, list[Measured]] = {}
    sweep: list[Measured] = []
    rows: list[str] = []
    for workers in counts:
        with bench.workers(workers):
            # Untimed: every worker's first bash call and every import behind it.
            bench.measure(Shape(workers, workers, workers), calls=1)
            if workers == HEADLINE_WORKERS:
                bench.out(
                    f"\nHeadline: {HEADLINE_AGENTS} agents on {HEADLINE_WORKERS} workers, "
                    f"{HEADLINE_AGENTS} sessions against none"
                )
                headline = measure_headline(bench)
                measure_create(bench, args.runs)
            for shape in sweep_shapes(workers, args.quick):
                sweep.append(bench.measure(shape))
                rows.append(format_row(sweep[-1]))
    bench.out("\nSweep, one run a cell (1 session: 8 agents share it; hold, gap: medians)")
    bench.out(SWEEP_HEADER)
    for row in rows:
        bench.out(row)
    for sessions in sorted({m.shape.sessions for m in sweep}):
        cells = [m for m in sweep if m.shape.sessions == sessions]
        bench.summary.append(
            f"sweep, {cells[0].shape.label}: efficiency "
            + ", ".join(f"{m.efficiency:.2f} on {m.shape.workers}" for m in cells)
            + " worker(s)"
        )
    if args.plot is None:
        bench.out("\nno figure (--quick; --plot PATH draws one)")
    else:
        bench.out(f"\n{plot(args.plot, headline, sweep)}")
    bench.out(f"\nload average at end: {_load()}")
    bench.out("\nSummary")
    for line in bench.summary:
        bench.out(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    return run_bench(lambda: run(args), (BenchError, SessionError))


if __name__ == "__main__":
    sys.exit(main())
