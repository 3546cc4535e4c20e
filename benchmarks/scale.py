"""How toolpool scales with workers and turn size: calls/s and per-call latency.

Usage: ``python -m benchmarks.scale [--workers 1,2,4,8] [--turns 1,8,32] [--seconds 6]
[--warm-s 1] [--figure docs/figures-scale.png] [--markdown PATH] [--quick]``.

For each worker count, a pool of that many toolpool worker processes (SimpleWorker, spawned,
stopped by their PIDs) on a private Redis; for each turn size T, closed-loop agents, each a
thread with an Executor of its own, submit a turn of T ``noop`` calls (concurrency-safe: one
batch) and collect it, again and again. There are enough agents to keep twice as many calls
in flight as there are workers (at least 2), so the workers never wait for the client. After
``--warm-s`` the cell is measured for ``--seconds``: calls/s = calls of the turns collected in
the window / the window; latency of a call = its turn's submit to ``collect`` returning (the
agent has a call's result when its turn's collect returns), p50 and p99 over the calls.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import rq

from benchmarks.entry import run_bench
from benchmarks.sides import Bench, BenchError
from benchmarks.workers import bench_registry
from executor import Settings
from executor.client import Executor
from executor.wire import ToolStatus
from workers._embedded_redis import RedisServer

FIGURE = Path("docs/figures-scale.png")


@dataclass
class Cell:
    """One measured cell: its shape, its rate and its per-call latency percentiles."""

    workers: int
    turn: int
    agents: int
    calls: int
    seconds: float
    p50_ms: float
    p99_ms: float
    failed: int

    @property
    def rate(self) -> float:
        return self.calls / self.seconds


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class _Agent(threading.Thread):
    """Submits a turn, collects it, repeats until told to stop; records what it saw."""

    def __init__(self, bench: Bench, index: int, turn: int, stop: threading.Event) -> None:
        super().__init__(name=f"bench-agent-{index}", daemon=True)
        self.executor = Executor(settings=bench.settings, registry=bench_registry())
        self.prefix = f"{bench.tag()}a{index}"
        self.turn, self.stop = turn, stop
        # (submitted, collected, failed calls) per turn, monotonic seconds
        self.turns: list[tuple[float, float, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        serial = 0
        try:
            while not self.stop.is_set():
                serial += 1
                calls = [
                    {"id": f"{self.prefix}-{serial}-{i}", "name": "noop", "arguments": {}}
                    for i in range(self.turn)
                ]
                started = time.monotonic()
                results = self.executor.collect(self.executor.submit(calls), timeout=60)
                failed = sum(r.status is not ToolStatus.OK for r in results)
                self.turns.append((started, time.monotonic(), failed))
        except BaseException as exc:  # reported by the main thread, which owns the error
            self.error = exc
        finally:
            self.executor.close()


def measure_cell(bench: Bench, workers: int, turn: int, seconds: float, warm_s: float) -> Cell:
    """Closed-loop agents on ``workers`` workers with turns of ``turn``; the measured cell."""
    agents_count = max(2, math.ceil(2 * workers / turn))
    stop = threading.Event()
    agents = [_Agent(bench, i, turn, stop) for i in range(agents_count)]
    for agent in agents:
        agent.start()
    start = time.monotonic() + warm_s
    end = start + seconds
    time.sleep(max(0.0, end - time.monotonic()))
    stop.set()
    for agent in agents:
        agent.join(90)
    errors = [agent.error for agent in agents if agent.error is not None]
    if errors or any(agent.is_alive() for agent in agents):
        raise BenchError(
            f"an agent failed in cell {workers} workers x turns of {turn}: "
            f"{errors[0] if errors else 'did not stop within 90 s'}"
        )
    window = [t for agent in agents for t in agent.turns if start <= t[1] <= end]
    latencies = [(done - submitted) * 1000 for submitted, done, _ in window if submitted >= start]
    if not window or not latencies:
        raise BenchError(f"no turn completed in cell {workers} workers x turns of {turn}")
    return Cell(
        workers=workers,
        turn=turn,
        agents=agents_count,
        calls=len(window) * turn,
        seconds=seconds,
        p50_ms=_pct(latencies, 0.5),
        p99_ms=_pct(latencies, 0.99),
        failed=sum(failed for *_, failed in window),
    )


def markdown(cells: list[Cell]) -> list[str]:
    """The cells as a markdown table, one row a cell."""
    lines = [
        "| workers | calls per turn | agents | calls/s | p50 latency | p99 latency | failed |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {c.workers} | {c.turn} | {c.agents} | {c.rate:.0f} | {c.p50_ms:.1f} ms "
        f"| {c.p99_ms:.1f} ms | {c.failed} |"
        for c in cells
    ]
    return lines


def _parse_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive counts like 1,2,4")
    return counts


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=_parse_counts, default=[1, 2, 4, 8])
    parser.add_argument(
        "--turns", type=_parse_counts, default=[1, 8, 32], help="calls per turn, e.g. 1,8,32"
    )
    parser.add_argument("--seconds", type=float, default=6.0, help="measured time a cell")
    parser.add_argument("--warm-s", type=float, default=1.0, help="unmeasured start a cell")
    parser.add_argument(
        "--figure",
        type=Path,
        default=None,
        help=f"PNG to write (default {FIGURE}; --quick: a temp file)",
    )
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table")
    parser.add_argument("--quick", action="store_true", help="a fast version (about 30 s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.turns = [w for w in args.workers if w <= 2] or [1], args.turns[:2]
        args.seconds, args.warm_s = min(args.seconds, 2.0), min(args.warm_s, 0.5)
    if args.seconds <= 0 or args.warm_s < 0:
        parser.error("--seconds must be positive and --warm-s not negative")
    if args.figure is None:
        quick_dir = Path(tempfile.mkdtemp(prefix="toolpool-scale-"))
        args.figure = quick_dir / "figures-scale.png" if args.quick else FIGURE
    return args


def run(args: argparse.Namespace) -> None:
    from benchmarks.scale_plot import plot

    workspace = Path(tempfile.mkdtemp(prefix="toolpool-bench-scale-"))
    cells: list[Cell] = []
    with RedisServer() as server:
        settings = Settings(redis_url=server.url, workspace=workspace)
        bench = Bench(server=server, settings=settings, args=args)
        info: dict[str, Any] = bench.client.info("server")
        print(
            f"Python {sys.version.split()[0]}, rq {rq.__version__}, redis-py "
            f"{redis.__version__}, redis-server {info.get('redis_version')} (unix socket); "
            f"cores: {os.cpu_count()}; load average at start: "
            f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}",
            flush=True,
        )
        print(
            f"cells: {args.warm_s:g} s warm-up, then {args.seconds:g} s measured; closed-loop "
            "agents keep 2 calls a worker in flight (at least 2 turns); latency = a call's "
            "turn submitted -> collect returned",
            flush=True,
        )
        try:
            for workers in args.workers:
                started = time.monotonic()
                with bench.workers(workers, raw=False):
                    for turn in args.turns:
                        cell = measure_cell(bench, workers, turn, args.seconds, args.warm_s)
                        cells.append(cell)
                        print(
                            f"  {workers} worker(s), turns of {turn:>2} ({cell.agents} agents): "
                            f"{cell.rate:6.0f} calls/s, p50 {cell.p50_ms:6.1f} ms, p99 "
                            f"{cell.p99_ms:6.1f} ms, failed {cell.failed}",
                            flush=True,
                        )
                    bench.wait_idle("tool")  # a worker stopped mid-bookkeeping prints a trace
                print(f"  ({workers} worker(s): {time.monotonic() - started:.0f} s)", flush=True)
        finally:
            bench.close()
    table = markdown(cells)
    print("\n" + "\n".join(table))
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n".join(table) + "\n", encoding="utf-8")
        print(f"table written to {args.markdown}")
    print(plot(args.figure, cells, args.seconds))
    print(f"load average at end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    return run_bench(lambda: run(args), (BenchError,))


if __name__ == "__main__":
    sys.exit(main())
