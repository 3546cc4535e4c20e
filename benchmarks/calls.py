"""Measure toolpool's calls against raw RQ, side by side on one private Redis.

Usage: ``python -m benchmarks.calls [--calls 2000] [--workers 1,4] [--repeat 3]
[--samples 200] [--batch-workers 4,8] [--profile] [--quick] [--only PARTS] [--steady]
[--steady-s 600]``; ``--only replicas`` for the figures with a replica.
Prints, in one run (``--only`` picks some of the parts named in brackets):

- throughput: trivial calls per second through toolpool (``Executor.submit`` of turns of
  ``noop`` calls, then ``collect``) against raw RQ (``Queue.enqueue`` of a function returning a
  dict, then each job's ``latest_result``), both drained by the same number of SimpleWorker
  processes with the JSON serializer; the time spent enqueueing; Redis commands per call;
- round trip of one call (submit, wait for the result) against raw RQ's, one idle worker each;
- a batch of 8 concurrency-safe 200 ms calls on 4 (and 8) workers against the ideal;
- where toolpool's time per call goes on the worker, and a cProfile of a burst worker when
  toolpool drains fewer than a third of raw RQ's calls per second (or with ``--profile``);
- [trips] Redis round trips per call, client and worker side, counted in redis-py
  (``roundtrips``);
- [hiredis] round trip and burst with hiredis against redis-py's Python parser (``parsers``);
- [memory] Redis memory per call while RQ's records live and once they expired, by key
  family; [steady] with ``--steady``: a pool's memory under a paced load (``memory``);
- [replicas] only when named in ``--only``: throughput and round trip with a replica
  acknowledging toolpool's writes (``TOOLPOOL_REDIS_REPLICAS=1``) against 0 and raw RQ, on a
  primary and replica of its own (``replicas``).

Workers are started with multiprocessing's "spawn" method and stopped by their PIDs; the
Redis is our own (``workers._embedded_redis.RedisServer``). Every wait has a deadline, and
Ctrl-C or SIGTERM stops everything started here.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import redis
import rq

from benchmarks import counting
from benchmarks.entry import run_bench
from benchmarks.memory import measure_retained, measure_steady
from benchmarks.overhead import (
    format_parts,
    measure_parts,
    profile_worker,
    redis_command_counts,
)
from benchmarks.parsers import measure_parsers
from benchmarks.replicas import measure_replicas
from benchmarks.roundtrips import measure_trips
from benchmarks.sides import Bench, BenchError, Burst
from executor import Settings
from workers._embedded_redis import RedisServer

_PROFILE_BELOW = 1 / 3
_T = TypeVar("_T")


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _load() -> str:
    if not hasattr(os, "getloadavg"):
        return "unknown"
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _spread(values: list[float]) -> str:
    """``min / median / max`` of ``values``, two decimals each."""
    return " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


# -- the measurements ------------------------------------------------------------------------


def measure_throughput(bench: Bench, workers: int) -> tuple[float, float]:
    """Interleaved runs of both sides; prints the medians and returns (toolpool, raw) calls/s."""
    calls, repeat = bench.args.calls, bench.args.repeat
    warm = min(calls, 20 * workers + 40)
    bench.toolpool_burst(warm)
    bench.raw_burst(warm)
    tool_runs: list[Burst] = []
    raw_runs: list[Burst] = []
    for index in range(repeat):
        # Alternate which side goes first, so neither always runs on a warmer machine.
        sides = [(bench.toolpool_burst, tool_runs), (bench.raw_burst, raw_runs)]
        for run, into in sides if index % 2 == 0 else sides[::-1]:
            into.append(run(calls))
    tool, raw = (statistics.median(b.rate for b in runs) for runs in (tool_runs, raw_runs))
    for label, runs, rate in (("toolpool", tool_runs, tool), ("raw RQ  ", raw_runs, raw)):
        enqueue_us = statistics.median(b.enqueue_s / b.calls for b in runs) * 1e6
        failed = sum(b.failed for b in runs)
        bench.out(
            f"  {workers} worker(s)  {label} {rate:8.0f} calls/s   "
            f"(runs: {', '.join(f'{b.rate:.0f}' for b in runs)}; enqueue "
            f"{enqueue_us:.0f} us/call; failed {failed})"
        )
    # Each round ran both sides back to back: its ratio is measured against its own baseline.
    ratios = _spread([t.rate / r.rate for t, r in zip(tool_runs, raw_runs, strict=True)])
    bench.out(f"  {workers} worker(s)  toolpool / raw RQ = {ratios} (min / median / max)")
    bench.summary.append(
        f"throughput, {workers} worker(s) a side: toolpool {tool:.0f} calls/s, "
        f"raw RQ {raw:.0f} calls/s, ratio {ratios} (min / median / max of {repeat} runs)"
    )
    return tool, raw


def measure_commands(bench: Bench, calls: int) -> None:
    """Redis commands and Redis CPU per call on each side: throughput runs, and round trips.

    Counted by the server, so clients and workers are both in; the commands that Lua scripts
    run are counted too.
    """
    runs: list[tuple[str, Callable[[], object], int]] = [
        ("toolpool, burst", lambda: bench.toolpool_burst(calls), calls),
        ("raw RQ, burst", lambda: bench.raw_burst(calls), calls),
        ("toolpool, 1 call", lambda: [bench.toolpool_round_trip(False) for _ in range(50)], 50),
        ("raw RQ, 1 call", lambda: [bench.raw_round_trip(False) for _ in range(50)], 50),
    ]
    for label, run, count in runs:
        cpu_before = _redis_cpu_s(bench.client)
        bench.client.config_resetstat()
        run()
        cpu = (_redis_cpu_s(bench.client) - cpu_before) / count * 1e6
        counts = redis_command_counts(bench.client)
        for bookkeeping in ("config|resetstat", "info"):
            counts.pop(bookkeeping, None)
        total = sum(c for c, _ in counts.values()) / count
        top = sorted(counts.items(), key=lambda kv: -kv[1][0])[:8]
        detail = ", ".join(f"{name} {c / count:.1f}" for name, (c, _) in top)
        bench.out(f"  {label:<17}{total:6.1f} commands, Redis CPU {cpu:4.0f} us ({detail})")


def _redis_cpu_s(client: redis.Redis) -> float:
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure_round_trips(bench: Bench, idle: bool) -> None:
    """Round trips of single calls, one idle worker (or back to back), p50 and p95."""
    samples, repeat = bench.args.samples, bench.args.repeat
    sides: dict[str, Callable[[bool], tuple[float, float, bool]]] = {
        "toolpool": bench.toolpool_round_trip,
        "raw RQ": bench.raw_round_trip,
    }
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    failed = dict.fromkeys(sides, 0)
    for run in sides.values():
        for _ in range(20):
            run(idle)
    for _ in range(repeat):
        for name, run in sides.items():
            measured = [run(idle) for _ in range(samples)]
            failed[name] += sum(not ok for _, _, ok in measured)
            totals = [total for _, total, _ in measured]
            submits = [submit for submit, _, _ in measured]
            figures[name].append((_pct(totals, 0.5), _pct(totals, 0.95), _pct(submits, 0.5)))
    p50s = {}
    per_run = [t[0] / r[0] for t, r in zip(figures["toolpool"], figures["raw RQ"], strict=True)]
    for name, runs in figures.items():
        p50, p95, submit = (statistics.median(r[i] for r in runs) for i in range(3))
        p50s[name] = p50
        bench.out(
            f"  {name:<8} p50 {_ms(p50):>9}  p95 {_ms(p95):>9}  (enqueue p50 "
            f"{_ms(submit)}; {samples} x {repeat}; failed {failed[name]})"
        )
    ratios = _spread(per_run)
    bench.out(f"  toolpool / raw RQ (p50) = {ratios} (min / median / max)")
    how = "one idle worker" if idle else "back to back"
    bench.summary.append(
        f"round trip p50, {how}: toolpool {_ms(p50s['toolpool'])}, "
        f"raw RQ {_ms(p50s['raw RQ'])}, ratio {ratios} (min / median / max of {repeat} runs)"
    )


def measure_batch(bench: Bench, workers: int) -> None:
    count, nap_ms = 8, bench.args.nap_ms
    bench.batch(count, nap_ms)  # warm-up
    runs = [bench.batch(count, nap_ms) for _ in range(max(3, bench.args.repeat))]
    wall = statistics.median(w for w, _ in runs)
    ideal = -(-count // workers) * nap_ms / 1000
    bench.out(
        f"  {count} x {nap_ms} ms on {workers} workers: {_ms(wall)} (ideal {_ms(ideal)}, "
        f"ratio {wall / ideal:.2f}; runs {', '.join(_ms(w) for w, _ in runs)}; "
        f"failed {sum(f for _, f in runs)})"
    )
    bench.summary.append(
        f"batch of {count} x {nap_ms} ms on {workers} workers: {_ms(wall)}, "
        f"ideal {_ms(ideal)}, ratio {wall / ideal:.2f}"
    )


# -- the run ---------------------------------------------------------------------------------


def _parse_counts(text: str) -> list[int]:
    counts = sorted({int(part) for part in text.split(",") if part.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give worker counts like 1,4")
    return counts


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per throughput run")
    parser.add_argument(
        "--workers",
        type=_parse_counts,
        default=[1, 4],
        help="worker counts for throughput, e.g. 1,4",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--samples", type=int, default=200, help="round trips per run")
    parser.add_argument("--turn-size", type=int, default=10, help="calls per toolpool turn")
    parser.add_argument(
        "--batch-workers",
        type=_parse_counts,
        default=[4, 8],
        help="worker counts for the batch of 8 naps",
    )
    parser.add_argument("--nap-ms", type=int, default=200, help="length of each batch call")
    parser.add_argument("--profile", action="store_true", help="always profile a worker")
    parser.add_argument(
        "--only",
        type=_parse_parts,
        default=DEFAULT_PARTS,
        help=(
            f"the parts to run, comma-separated, of: {','.join(PARTS)} (default: all but replicas)"
        ),
    )
    parser.add_argument(
        "--idle-s", type=float, default=5.0, help="[trips] idle baseline of the workers, s"
    )
    parser.add_argument(
        "--memory-calls", type=int, default=2000, help="[memory] calls of the memory burst"
    )
    parser.add_argument(
        "--memory-turn", type=int, default=1, help="[memory] calls per turn of the burst"
    )
    parser.add_argument(
        "--record-ttl",
        type=int,
        default=30,
        help="[memory] RQ's record TTL for the retained figure, s (longer than the burst)",
    )
    parser.add_argument(
        "--steady",
        action="store_true",
        help="also run [steady]: a paced load for --steady-s (10 minutes by default)",
    )
    parser.add_argument("--steady-s", type=float, default=600.0, help="[steady] duration, s")
    parser.add_argument("--steady-rate", type=float, default=100.0, help="[steady] calls/s")
    parser.add_argument("--steady-turn", type=int, default=4, help="[steady] calls per turn")
    parser.add_argument("--steady-workers", type=int, default=2, help="[steady] workers")
    parser.add_argument("--quick", action="store_true", help="a fast version (about a minute)")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.workers, args.repeat = min(args.calls, 300), [1], 1
        args.samples, args.batch_workers = min(args.samples, 50), [4]
        args.idle_s, args.memory_calls = min(args.idle_s, 2.0), min(args.memory_calls, 300)
        args.record_ttl, args.steady_s = min(args.record_ttl, 8), min(args.steady_s, 10.0)
    for name in (
        "calls",
        "samples",
        "memory_calls",
        "memory_turn",
        "record_ttl",
        "steady_turn",
        "steady_workers",
        "turn_size",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.idle_s <= 0 or args.steady_rate <= 0 or args.steady_s < 0:
        parser.error("--idle-s and --steady-rate must be positive, --steady-s not negative")
    return args


PARTS = (
    "throughput",
    "commands",
    "latency",
    "batch",
    "overhead",
    "trips",
    "hiredis",
    "memory",
    "steady",
    "replicas",
)  # steady runs only with --steady, replicas only when named
DEFAULT_PARTS = tuple(part for part in PARTS if part != "replicas")


def _parse_parts(text: str) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in parts if part not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name parts among {', '.join(PARTS)} (unknown: {', '.join(unknown)})"
        )
    return parts


def _header(bench: Bench) -> None:
    info: dict[str, Any] = bench.client.info("server")
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    args = bench.args
    bench.out(
        f"Python {sys.version.split()[0]}, rq {rq.__version__}, redis-py "
        f"{redis.__version__}, redis-server {info.get('redis_version')} (unix socket), "
        f"reply parser: {'hiredis' if counting.hiredis_available() else 'Python (no hiredis)'}"
    )
    bench.out(
        f"cores: {cores} ({usable} usable); throughput workers {args.workers}, "
        f"{args.calls} calls a run in turns of {args.turn_size}, {args.repeat} run(s), "
        f"medians, ratios per run as min / median / max; SimpleWorker + JSONSerializer on "
        "both sides"
    )
    bench.out(f"load average at start: {_load()} (other programs may share these cores)")


def run(args: argparse.Namespace) -> None:
    workspace = Path(tempfile.mkdtemp(prefix="toolpool-bench-"))
    with RedisServer() as server:
        settings = Settings(redis_url=server.url, workspace=workspace)
        bench = Bench(server=server, settings=settings, args=args)
        try:
            _run_all(bench)
        finally:
            bench.close()


def _run_all(bench: Bench) -> None:
    args = bench.args
    _header(bench)
    rates = _run_pools(bench)
    if "overhead" in args.only:
        timed(bench, "overhead", functools.partial(_run_overhead, bench, rates))
    if "replicas" in args.only:
        bench.out(
            "\nWith a replica: TOOLPOOL_REDIS_REPLICAS=1 against 0 and raw RQ, on a primary and "
            "a replica of its own"
        )
        workspace = bench.settings.worker.workspace
        timed(bench, "replicas", lambda: measure_replicas(bench, args, workspace))
    # Counting wraps redis-py in this process from here on: the figures above are unaffected.
    if "trips" in args.only:
        counting.install()
        for count in args.workers:
            bench.out(
                f"\nRedis round trips per call, {count} worker(s) a side (counted in redis-py: "
                "one per command or pipeline sent; client = this process, worker = the sum of "
                "the worker processes)"
            )
            timed(bench, "trips", functools.partial(_run_trips, bench, count))
    if "hiredis" in args.only:
        bench.out("\nhiredis against redis-py's Python parser, 1 worker a side")
        timed(bench, "hiredis", lambda: measure_parsers(bench, bench.server, bench.settings, args))
    own: float | None = None
    if "memory" in args.only:
        bench.out(
            f"\nRedis memory per call: a burst of {args.memory_calls} noop calls (toolpool in "
            f"turns of {args.memory_turn}), 1 worker, on a Redis of its own a side; keys by "
            "family, per call"
        )
        own = timed(
            bench,
            "memory",
            functools.partial(measure_retained, bench, args.memory_calls, args.record_ttl, args),
        )
    if args.steady and "steady" in args.only and args.steady_s > 0:
        bench.out(f"\nSteady state: {args.steady_rate:g} calls/s for {args.steady_s:g} s")
        timed(bench, "steady", lambda: measure_steady(bench, args, own))
    bench.out(f"\nload average at end: {_load()}")
    bench.out("\nSummary")
    for line in bench.summary:
        bench.out(f"  {line}")


def timed(bench: Bench, part: str, run: Callable[[], _T]) -> _T:
    """Run one part of the benchmark, say how long it took, return what it returned."""
    started = time.monotonic()
    value = run()
    bench.out(f"  ({part}: {time.monotonic() - started:.0f} s)")
    return value


def _run_trips(bench: Bench, count: int) -> None:
    samples = min(bench.args.samples, 100)
    with bench.workers(count, raw=True, parser=counting.DEFAULT_PARSER):
        measure_trips(bench, count, bench.args.calls, samples, bench.args.idle_s)


def _run_pools(bench: Bench) -> dict[int, tuple[float, float]]:
    """The measurements on the shared pools: throughput, commands, latency, batch."""
    args = bench.args
    wanted = set(args.only)
    counts = sorted(
        {
            *(args.workers if "throughput" in wanted else []),
            *([1] if wanted & {"commands", "latency"} else []),
            *(args.batch_workers if "batch" in wanted else []),
        }
    )
    rates: dict[int, tuple[float, float]] = {}
    for count in counts:
        raw = (count in args.workers and "throughput" in wanted) or count == 1
        started = time.monotonic()
        with bench.workers(count, raw=raw):
            if count in args.workers and "throughput" in wanted:
                bench.out(f"\nThroughput, {count} worker process(es) a side")
                rates[count] = measure_throughput(bench, count)
            if count == 1 and "commands" in wanted:
                bench.out("\nRedis commands and Redis CPU per call, 1 worker a side")
                measure_commands(bench, min(args.calls, 300))
            if count == 1 and "latency" in wanted:
                bench.out("\nRound trip of one call, one idle worker a side")
                measure_round_trips(bench, idle=True)
                bench.out("\nRound trips back to back (next call as soon as a result is in)")
                measure_round_trips(bench, idle=False)
            if count in args.batch_workers and "batch" in wanted:
                bench.out(f"\nBatch of 8 concurrency-safe calls, {count} workers")
                measure_batch(bench, count)
        bench.out(f"  (the parts above on {count} worker(s): {time.monotonic() - started:.0f} s)")
    return rates


def _run_overhead(bench: Bench, rates: dict[int, tuple[float, float]]) -> None:
    args = bench.args
    raw_job_us = 1e6 / rates[1][1] if 1 in rates else None
    bench.out("\nWhere a toolpool call's time goes on the worker (timed in this process)")
    parts = measure_parts(
        bench.url, bench.settings, 100 if args.quick else 300, bench.tag(), bench.client
    )
    for line in format_parts(parts, raw_job_us):
        bench.out(line)
    bench.summary.append(
        f"toolpool's worker path outside RQ: {parts['whole'] / 1000:.1f} ms a call "
        f"({parts['commands']:.0f} Redis commands, 4 events, 2 lock scripts, 1 reused tool thread)"
    )
    worst = min((tool / raw for tool, raw in rates.values()), default=1.0)
    if args.profile or worst < _PROFILE_BELOW:
        bench.out(f"\ncProfile of a burst worker (toolpool / raw RQ at worst {worst:.2f})")
        bench.out(profile_worker(bench.url, bench.settings, 300, bench.tag()))


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    return run_bench(lambda: run(args), (BenchError,))


if __name__ == "__main__":
    sys.exit(main())
