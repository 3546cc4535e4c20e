"""Redis round trips per call on each side, toolpool against raw RQ, for ``benchmarks.calls``.

The client side is this process (the Executor, or raw RQ's enqueue and ``latest_result``);
the worker side is the sum over the worker processes, which count their own and report on
request (``counting``). The benchmark's own Redis use (waiting for idle workers, asking for
the counts) is not counted. A worker's idle background (RQ's heartbeat, toolpool's catalog
refresh, a blocking dequeue that times out) is measured alone for a few seconds before, as a
rate, and that rate times the measured time is subtracted from the worker's count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks import counting
from benchmarks.sides import Bench

GOAL_CLIENT = 3.0


@dataclass
class Trips:
    """Round trips per call of one side in one run."""

    client: float
    worker: float
    idle_subtracted: float

    @property
    def both(self) -> float:
        return self.client + self.worker


def _worker_total(bench: Bench, side: str) -> int:
    return sum(counting.snapshot(bench.client, sorted(bench.names[side])).values())


def idle_rates(bench: Bench, idle_s: float) -> dict[str, float]:
    """Round trips per second of each side's workers while nothing is submitted."""
    before = {side: _worker_total(bench, side) for side in ("tool", "raw")}
    time.sleep(idle_s)
    return {side: (_worker_total(bench, side) - before[side]) / idle_s for side in before}


def count_run(
    bench: Bench, side: str, run: Callable[[], object], calls: int, idle_rate: float
) -> Trips:
    """Run ``run`` (``calls`` calls of ``side``) and count both sides' round trips per call."""
    bench.wait_idle(side)
    workers_before = _worker_total(bench, side)
    client_before = counting.count()
    started = time.monotonic()
    run()
    client = counting.count() - client_before
    # The worker's closing bookkeeping (and its next blocking dequeue) belongs to the calls.
    bench.wait_idle(side)
    elapsed = time.monotonic() - started
    subtracted = idle_rate * elapsed
    worker = _worker_total(bench, side) - workers_before - subtracted
    return Trips(client / calls, max(0.0, worker) / calls, subtracted / calls)


def measure_trips(bench: Bench, workers: int, calls: int, samples: int, idle_s: float) -> None:
    """Print round trips per call, one call at a time and in a burst, on ``workers`` a side.

    Needs counting workers (``bench.workers(..., parser=...)``) and ``counting.install()``.
    """
    rates = idle_rates(bench, idle_s)
    bench.out(
        f"  idle workers: toolpool {rates['tool']:.2f}/s, raw RQ {rates['raw']:.2f}/s "
        f"(measured over {idle_s:g} s with nothing submitted; that rate x the measured time "
        "is subtracted from the worker counts)"
    )
    runs: list[tuple[str, str, Callable[[], object], int]] = [
        (
            "toolpool, 1 call at a time",
            "tool",
            lambda: [bench.toolpool_round_trip(True) for _ in range(samples)],
            samples,
        ),
        (
            "raw RQ,   1 call at a time",
            "raw",
            lambda: [bench.raw_round_trip(True) for _ in range(samples)],
            samples,
        ),
        (f"toolpool, burst of {calls}", "tool", lambda: bench.toolpool_burst(calls), calls),
        (f"raw RQ,   burst of {calls}", "raw", lambda: bench.raw_burst(calls), calls),
    ]
    for _ in range(3):  # warm-up: connections, script loading, the catalog
        bench.toolpool_round_trip(True)
        bench.raw_round_trip(True)
    bench.out(f"  {'':<28}{'client':>8}{'worker':>8}{'both':>8}   (idle subtracted)")
    found: dict[tuple[str, str], Trips] = {}
    for label, side, run_calls, count in runs:
        trips = count_run(bench, side, run_calls, count, rates[side])
        found[(side, "burst" if "burst" in label else "one")] = trips
        bench.out(
            f"  {label:<28}{trips.client:8.2f}{trips.worker:8.2f}{trips.both:8.2f}"
            f"   ({trips.idle_subtracted:.2f})"
        )
    for shape, name in (("one", "1 call at a time"), ("burst", f"burst of {calls}")):
        tool, raw = found[("tool", shape)], found[("raw", shape)]
        worker_ok = "met" if tool.worker <= raw.worker + 0.05 else "NOT met"
        client_ok = "met" if tool.client <= GOAL_CLIENT + 0.05 else "NOT met"
        bench.out(
            f"  goal, {name}: toolpool worker {tool.worker:.2f} <= raw RQ worker "
            f"{raw.worker:.2f}: {worker_ok}; toolpool client {tool.client:.2f} <= "
            f"{GOAL_CLIENT:g}: {client_ok}"
        )
        bench.summary.append(
            f"round trips per call, {name}, {workers} worker(s): toolpool client "
            f"{tool.client:.2f} + worker {tool.worker:.2f} = {tool.both:.2f}; raw RQ client "
            f"{raw.client:.2f} + worker {raw.worker:.2f} = {raw.both:.2f}"
        )
    workers_seen = counting.worker_parsers(
        bench.client, sorted(bench.names["tool"] | bench.names["raw"])
    )
    bench.out(
        f"  parsers: client {', '.join(sorted(counting.parsers_seen()))}; "
        f"workers {', '.join(sorted(workers_seen))}"
    )
