"""toolpool with a replica acknowledging its writes, against toolpool without, and raw RQ.

The ``replicas`` part of ``benchmarks.calls``: a primary redis-server of its own (TCP on a free
loopback port, clients on its unix socket) and a replica of it (``--replicaof``, another free
port), both stopped by their PIDs. Three sides share the primary, so replication costs each
the same and only the waiting differs: toolpool with ``TOOLPOOL_REDIS_REPLICAS=1`` (every
write a guarantee rests on waits for the replica), toolpool with ``0``, and raw RQ. The
setting reaches the workers twice, in their environment and in the ``Settings`` they are
handed, and the client through its ``Settings``; a toolpool without the setting runs both
toolpool sides alike, and the report says so. Each run measures the three sides back to back
(rotating which goes first), so each ratio has a baseline measured beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import fields
from pathlib import Path

import redis

from benchmarks.overhead import redis_command_counts
from benchmarks.sides import Bench, BenchError, Burst
from executor import Settings
from executor._settings import RedisGroup
from workers._embedded_redis import RedisServer

VARIABLE = "TOOLPOOL_REDIS_REPLICAS"
_SIDES = ("REPLICAS=1", "REPLICAS=0", "raw RQ")
_SYNC_PATIENCE_S = 60.0


def replicas_supported() -> bool:
    """Whether this toolpool has ``settings.redis.replicas`` (``TOOLPOOL_REDIS_REPLICAS``)."""
    return "replicas" in {f.name for f in fields(RedisGroup)}


def side_settings(base: Settings, replicas: int) -> Settings:
    """``base`` on a queue of the side's own, with ``replicas`` when this toolpool has it."""
    changes: dict[str, object] = {"queue": f"bench-replicas-{replicas}"}
    if replicas_supported():
        changes["redis_replicas"] = replicas
    return base.with_changes(**changes)


@contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """``name=value`` in this process's environment (which spawned workers inherit), then the
    old value back."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextmanager
def primary_and_replica() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and a replica of it, in sync; both stopped (by PID) on the way out."""
    with ExitStack() as stack:
        primary = stack.enter_context(RedisServer(tcp=True))
        replica = stack.enter_context(
            RedisServer(tcp=True, extra_args=["--replicaof", "127.0.0.1", str(primary.port)])
        )
        client = redis.Redis.from_url(primary.url, socket_timeout=10)
        stack.callback(client.close)
        deadline = time.monotonic() + _SYNC_PATIENCE_S
        while not _replica_online(client):
            if time.monotonic() > deadline:
                raise BenchError(f"the replica did not sync within {_SYNC_PATIENCE_S:g} s")
            time.sleep(0.05)
        yield primary, replica


def _replica_online(client: redis.Redis) -> bool:
    info = client.info("replication")
    replica = info.get("slave0")
    return isinstance(replica, dict) and replica.get("state") == "online"


def _waits(client: redis.Redis) -> int:
    return redis_command_counts(client).get("wait", (0, 0))[0]


def _spread(values: list[float], digits: int = 2) -> str:
    return " / ".join(
        f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values))
    )


class _Figures:
    """Per-run figures of the three sides; a ratio is taken run by run."""

    def __init__(self) -> None:
        self.runs: dict[str, list[float]] = {side: [] for side in _SIDES}

    def ratio(self, top: str, bottom: str) -> str:
        return _spread([t / b for t, b in zip(self.runs[top], self.runs[bottom], strict=True)])


def measure_replicas(report: Bench, args: argparse.Namespace, workspace: Path) -> None:
    """Print throughput (each of ``args.workers``) and the idle round trip of the three sides."""
    supported = replicas_supported()
    if not supported:
        report.out(
            "  this toolpool has no settings.redis.replicas: both toolpool sides run without "
            f"WAIT ({VARIABLE} is still passed to the workers)"
        )
    with primary_and_replica() as (primary, replica):
        base = Settings(redis_url=primary.url, workspace=workspace)
        benches = {
            "REPLICAS=1": Bench(
                server=primary,
                settings=side_settings(base, 1),
                args=args,
                label="-rep1",
                raw_queue_name="bench-raw-rep1",
            ),
            "REPLICAS=0": Bench(
                server=primary,
                settings=side_settings(base, 0),
                args=args,
                label="-rep0",
                raw_queue_name="bench-raw-rep0",
            ),
        }
        report.out(
            f"  primary redis-server pid {primary.pid} on 127.0.0.1:{primary.port} (clients on "
            f"its unix socket), replica pid {replica.pid} on 127.0.0.1:{replica.port} "
            f"(--replicaof), in sync; settings.redis.replicas: {'yes' if supported else 'absent'}"
        )
        replica_client = redis.Redis.from_url(replica.url, socket_timeout=10)
        try:
            for count in args.workers:
                _measure_on(report, benches, replica_client, count, args)
        finally:
            for bench in benches.values():
                bench.close()
            replica_client.close()


def _measure_on(
    report: Bench,
    benches: dict[str, Bench],
    replica: redis.Redis,
    count: int,
    args: argparse.Namespace,
) -> None:
    with ExitStack() as stack:
        for side, bench in benches.items():
            replicas = "1" if side == "REPLICAS=1" else "0"
            with environment(VARIABLE, replicas):  # the workers spawn inside this block
                stack.enter_context(bench.workers(count, raw=side == "REPLICAS=0"))
        one, zero = benches["REPLICAS=1"], benches["REPLICAS=0"]
        runs: dict[str, Callable[[int], float]] = {
            "REPLICAS=1": lambda calls: _rate(one.toolpool_burst(calls)),
            "REPLICAS=0": lambda calls: _rate(zero.toolpool_burst(calls)),
            "raw RQ": lambda calls: _rate(zero.raw_burst(calls)),
        }
        report.out(f"\n  Throughput, {count} worker process(es) a side, calls/s")
        rates = _rotate(runs, args.calls, args.repeat, min(args.calls, 20 * count + 40))
        _report(report, rates, f"throughput, {count} worker(s)", "calls/s", 0, higher=True)
        burst = min(args.calls, 500)
        costs = _burst_costs(one, zero, replica, burst)
        report.out(
            f"  WAIT commands per call (server's count, a burst of {burst}): "
            f"REPLICAS=1 {costs[0][0]:.2f}, REPLICAS=0 {costs[1][0]:.2f}"
        )
        report.out(
            "  Redis CPU per call, primary + replica: "
            + ", ".join(
                f"{side} {primary:.0f} + {copy:.0f} us"
                for side, (_, primary, copy) in zip(_SIDES, costs, strict=False)
            )
        )
        if count != 1:
            return
        samples = args.samples
        trips: dict[str, Callable[[int], float]] = {
            "REPLICAS=1": lambda n: _p50([one.toolpool_round_trip(True) for _ in range(n)]),
            "REPLICAS=0": lambda n: _p50([zero.toolpool_round_trip(True) for _ in range(n)]),
            "raw RQ": lambda n: _p50([zero.raw_round_trip(True) for _ in range(n)]),
        }
        report.out(
            f"\n  Round trip of one call, one idle worker a side, p50 in ms ({samples} a run)"
        )
        rtts = _rotate(trips, samples, args.repeat, 20)
        _report(report, rtts, "round trip p50, idle worker", "ms", 2, higher=False)


def _rate(burst: Burst) -> float:
    if burst.failed:
        raise BenchError(f"{burst.failed} of {burst.calls} calls failed")
    return burst.rate


def _p50(measured: list[tuple[float, float, bool]]) -> float:
    failed = sum(not ok for *_, ok in measured)
    if failed:
        raise BenchError(f"{failed} of {len(measured)} round trips failed")
    return statistics.median(total for _, total, _ in measured) * 1000


def _rotate(runs: dict[str, Callable[[int], float]], size: int, repeat: int, warm: int) -> _Figures:
    """``repeat`` rounds of every side back to back, rotating which goes first; one warm-up."""
    for run in runs.values():
        run(warm)
    figures = _Figures()
    order = list(runs)
    for index in range(repeat):
        shift = index % len(order)
        for side in order[shift:] + order[:shift]:
            figures.runs[side].append(runs[side](size))
    return figures


def _report(
    report: Bench, figures: _Figures, what: str, unit: str, digits: int, *, higher: bool
) -> None:
    for side, values in figures.runs.items():
        report.out(
            f"  {side:<11} {statistics.median(values):9.{digits}f} {unit}   "
            f"(min / median / max {_spread(values, digits)})"
        )
    against_zero = figures.ratio("REPLICAS=1", "REPLICAS=0")
    one_raw = figures.ratio("REPLICAS=1", "raw RQ")
    zero_raw = figures.ratio("REPLICAS=0", "raw RQ")
    # A round trip's goal is the rate's turned over: 1 / 0.8.
    goal = "goal >= 0.8" if higher else "goal <= 1.25"
    report.out(f"  REPLICAS=1 / REPLICAS=0 = {against_zero} (min / median / max; {goal})")
    report.out(f"  REPLICAS=1 / raw RQ = {one_raw}; REPLICAS=0 / raw RQ = {zero_raw}")
    runs = len(figures.runs[_SIDES[0]])
    report.summary.append(
        f"with a replica, {what}: REPLICAS=1 / REPLICAS=0 {against_zero}, REPLICAS=1 / raw RQ "
        f"{one_raw}, REPLICAS=0 / raw RQ {zero_raw} (min / median / max of {runs} runs)"
    )


def _burst_costs(
    one: Bench, zero: Bench, replica: redis.Redis, calls: int
) -> tuple[tuple[float, float, float], ...]:
    """Per call of a burst on each toolpool side: WAIT commands the primary ran, and the
    primary's and the replica's CPU in microseconds."""
    costs = []
    for bench in (one, zero):
        bench.wait_idle("tool")  # the last run's closing writes are counted before, not here
        before = (_waits(bench.client), _cpu_s(bench.client), _cpu_s(replica))
        _rate(bench.toolpool_burst(calls))
        bench.wait_idle("tool")
        after = (_waits(bench.client), _cpu_s(bench.client), _cpu_s(replica))
        waits, primary_us, replica_us = (
            (a - b) / calls * scale
            for a, b, scale in zip(after, before, (1, 1e6, 1e6), strict=True)
        )
        costs.append((waits, primary_us, replica_us))
    return tuple(costs)


def _cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
