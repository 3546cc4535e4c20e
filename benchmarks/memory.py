"""Redis memory per call, toolpool against raw RQ, and a pool's memory under a steady load.

Each measurement has a redis-server of its own, so nothing else's keys expire meanwhile.
``retained``: a burst of trivial calls; Redis's ``used_memory`` and the keys by family (SCAN,
then MEMORY USAGE of up to ``_SAMPLE`` keys a family, times the family's count) right after
it, while RQ's records of the calls live, and again once they have expired (RQ's record TTL
is shortened for this: toolpool's ``rq_record_ttl``, raw RQ's ``result_ttl``; a SCAN of every
key makes Redis drop the expired ones at once). ``steady``: a paced load on a pool with
default settings, ``used_memory`` sampled at intervals.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from benchmarks.sides import Bench, BenchError
from executor import Settings
from executor.client import Turn
from executor.wire import ToolStatus
from workers._embedded_redis import RedisServer

_SAMPLE = 300
_BENCH_KEYS = "bench:"
# A key segment that holds an id (a digit, or long): grouped as ``*``.
_VARIABLE = re.compile(r"\d|^.{24,}$")
GOAL_BYTES = 1024


@dataclass
class Family:
    """Keys of one pattern: how many, and their bytes (estimated from a sample)."""

    keys: int
    bytes: float


def family_of(key: str) -> str:
    """The key's pattern: every segment that holds an id becomes ``*``."""
    return ":".join("*" if _VARIABLE.search(part) else part for part in key.split(":"))


def families(client: redis.Redis) -> dict[str, Family]:
    """Every key by family; a family's bytes are its sampled keys' mean times its count.

    The SCAN also makes Redis drop the expired keys it meets.
    """
    grouped: dict[str, list[bytes]] = {}
    for key in client.scan_iter(count=1000):
        name = key.decode(errors="replace")
        if not name.startswith(_BENCH_KEYS):
            grouped.setdefault(family_of(name), []).append(key)
    found: dict[str, Family] = {}
    for name, keys in grouped.items():
        step = max(1, len(keys) // _SAMPLE)
        sample = keys[::step][:_SAMPLE]
        pipe = client.pipeline(transaction=False)
        for key in sample:
            pipe.memory_usage(key, samples=0)
        sizes = [int(size) for size in pipe.execute() if size is not None]
        mean = statistics.fmean(sizes) if sizes else 0.0
        found[name] = Family(len(keys), mean * len(keys))
    return found


def used_memory(client: redis.Redis) -> int:
    """Redis's ``used_memory``: everything it allocated, clients' buffers included."""
    info: dict[str, Any] = client.info("memory")
    return int(info["used_memory"])


@dataclass
class Snapshot:
    """``used_memory`` and the key families at one moment."""

    used: int
    families: dict[str, Family]
    outside: dict[str, int]

    @classmethod
    def take(cls, client: redis.Redis) -> Snapshot:
        found = families(client)  # first: it drops the expired keys
        return cls(used_memory(client), found, _outside_keys(client))


def _outside_keys(client: redis.Redis) -> dict[str, int]:
    """What ``used_memory`` holds besides the keys: MEMORY STATS's overheads."""
    stats: dict[str, Any] = client.memory_stats()
    tables = sum(
        int(v)
        for db, fields in stats.items()
        if db.startswith("db.")
        for v in dict(fields).values()
    )
    return {
        "clients' buffers": int(stats.get("clients.normal", 0)),
        "key tables": tables,
        "Lua scripts": int(stats.get("lua.caches", 0)),
    }


def _outside_line(before: Snapshot, after: Snapshot, calls: int, indent: str) -> str:
    parts = ", ".join(
        f"{name} {(after.outside[name] - before.outside.get(name, 0)) / calls:.0f} B"
        for name in after.outside
    )
    keys = sum(f.bytes for f in after.families.values())
    keys -= sum(f.bytes for f in before.families.values())
    return f"{indent}keys {keys / calls:.0f} B; outside the keys, a call: {parts}"


def _breakdown(before: Snapshot, after: Snapshot, calls: int, indent: str) -> list[str]:
    """Families whose keys or bytes changed, per call, largest first."""
    names = set(before.families) | set(after.families)
    rows = []
    for name in names:
        old = before.families.get(name, Family(0, 0.0))
        new = after.families.get(name, Family(0, 0.0))
        keys, size = new.keys - old.keys, new.bytes - old.bytes
        if abs(keys) >= calls / 100 or abs(size) >= calls:  # a key in 100 calls, a byte a call
            rows.append((size, f"{indent}{name:<40}{keys / calls:6.2f} keys{size / calls:7.0f} B"))
    return [row for _, row in sorted(rows, reverse=True)]


@contextmanager
def _bench_on_own_redis(
    args: Any, settings: dict[str, Any], raw_ttl: int | None, workers: int, raw: bool
) -> Iterator[Bench]:
    """A Bench on a fresh redis-server with ``workers`` workers of one side."""
    workspace = Path(tempfile.mkdtemp(prefix="toolpool-bench-mem-"))
    with RedisServer() as server:
        base = Settings(redis_url=server.url, workspace=workspace, **settings)
        bench = Bench(server=server, settings=base, args=args, raw_result_ttl=raw_ttl)
        try:
            with bench.workers(workers, raw=raw, tool=not raw):
                yield bench
        finally:
            bench.close()


def _delta(before: Snapshot, after: Snapshot, keep: Callable[[str], bool]) -> float:
    """Bytes the families that ``keep`` names gained between two snapshots."""
    names = set(before.families) | set(after.families)
    empty = Family(0, 0.0)
    return sum(
        after.families.get(name, empty).bytes - before.families.get(name, empty).bytes
        for name in names
        if keep(name)
    )


def _side_lines(
    side: str, snaps: tuple[Snapshot, Snapshot, Snapshot], calls: int, ttl: int, stream: str
) -> tuple[list[str], float]:
    """The report of one side, and its bytes per retained call without the capped stream.

    ``snaps``: before the burst, right after it, once RQ's records expired.
    """
    before, live, gone = snaps
    live_b = (live.used - before.used) / calls
    gone_b = (gone.used - before.used) / calls
    capped = _delta(before, gone, lambda name: name == stream) / calls
    lines = [
        f"  {side}: (a) {live_b:6.0f} B a call while RQ's records live (used_memory)",
        *_breakdown(before, live, calls, "        "),
        _outside_line(before, live, calls, "        "),
        f"  {side}: (b) {gone_b:6.0f} B a call once RQ's records expired (TTL shortened to "
        f"{ttl} s), {gone_b - capped:.0f} B without the capped events stream",
        *_breakdown(before, gone, calls, "        "),
        _outside_line(before, gone, calls, "        "),
    ]
    return lines, gone_b - capped


def measure_retained(report: Bench, calls: int, ttl: int, args: Any) -> float:
    """Print memory per call for both sides; return toolpool's own bytes per retained call."""
    out = report.out
    defaults = Settings()
    stream = f"{defaults.redis.key_prefix}:events"
    turn = args.memory_turn
    with (
        _bench_on_own_redis(args, {"rq_record_ttl": ttl}, None, 1, False) as tool,
        _bench_on_own_redis(args, {}, ttl, 1, True) as raw,
    ):
        # A first burst of the same size, left to expire: Redis's first-use costs (scripts,
        # registries, clients' buffers, its key tables grown to this size) stay out.
        tool.toolpool_burst(calls, turn)
        tool.wait_idle("tool")
        raw.raw_burst(calls)
        raw.wait_idle("raw")
        time.sleep(ttl + 2)
        before = {"tool": Snapshot.take(tool.client), "raw": Snapshot.take(raw.client)}
        bursts = {"tool": tool.toolpool_burst(calls, turn)}
        tool.wait_idle("tool")
        live = {"tool": Snapshot.take(tool.client)}
        bursts["raw"] = raw.raw_burst(calls)
        raw.wait_idle("raw")
        live["raw"] = Snapshot.take(raw.client)
        finished = time.monotonic()
        for side, run in bursts.items():
            if run.failed:
                raise BenchError(f"{run.failed} of the {side} memory burst's calls failed")
        time.sleep(max(0.0, finished + ttl + 2 - time.monotonic()))
        gone = {"tool": Snapshot.take(tool.client), "raw": Snapshot.take(raw.client)}
    for side, name in (("tool", "toolpool"), ("raw", "raw RQ")):
        jobs = live[side].families.get("rq:job:*", Family(0, 0)).keys
        left = gone[side].families.get("rq:job:*", Family(0, 0)).keys
        out(
            f"  {name}: rq:job:* keys {jobs} at (a), {left} at (b)"
            + ("" if jobs >= calls else " (some expired before (a): raise --record-ttl)")
        )
    lines, tool_b = _side_lines(
        "toolpool", (before["tool"], live["tool"], gone["tool"]), calls, ttl, stream
    )
    raw_lines, raw_b = _side_lines(
        "raw RQ  ", (before["raw"], live["raw"], gone["raw"]), calls, ttl, stream
    )
    own = (
        _delta(
            before["tool"],
            gone["tool"],
            lambda n: n.startswith(defaults.redis.key_prefix + ":") and n != stream,
        )
        / calls
    )
    for line in lines + raw_lines:
        out(line)
    out(
        f"  ({stream} is capped at events_maxlen {defaults.worker.events_maxlen} entries: a fixed "
        "cost once full, not a cost per retained call; a first burst of the same size ran and "
        "expired before (a), so Redis's first-use costs stay out of these figures)"
    )
    verdict = "met" if tool_b < GOAL_BYTES else "NOT met"
    out(
        f"  goal: < {GOAL_BYTES} B per retained trivial call (turns of {turn}): toolpool "
        f"{tool_b:.0f} B, {verdict} (raw RQ {raw_b:.0f} B); toolpool's own keys {own:.0f} B"
    )
    report.summary.append(
        f"Redis memory per retained trivial call (turns of {turn}, RQ's records expired, "
        f"events stream aside): toolpool {tool_b:.0f} B ({own:.0f} B its own keys), "
        f"raw RQ {raw_b:.0f} B"
    )
    return own


# -- steady state ------------------------------------------------------------------------------


@dataclass
class Sample:
    """``used_memory`` and the calls done at one moment of the steady load."""

    at_s: float
    used: int
    keys: int
    calls: int


def _paced(
    bench: Bench, rate: float, turn: int, seconds: float, every_s: float
) -> tuple[list[Sample], int, int, float]:
    """Submit turns of ``turn`` noop calls at ``rate`` calls/s for ``seconds``; collect them.

    Returns the samples, the calls done, the failed ones, and the achieved rate.
    """
    interval = turn / rate
    pending: deque[tuple[Turn, float]] = deque()
    samples: list[Sample] = []
    done = failed = 0
    started = time.monotonic()
    next_turn, next_sample, serial = started, started, 0

    def collect_one() -> None:
        nonlocal done, failed
        submitted, _ = pending.popleft()
        results = bench.executor.collect(submitted, timeout=60)
        done += len(results)
        failed += sum(r.status is not ToolStatus.OK for r in results)

    while (now := time.monotonic()) < started + seconds:
        if now >= next_sample:
            samples.append(
                Sample(now - started, used_memory(bench.client), int(bench.client.dbsize()), done)
            )
            next_sample += every_s
        if now >= next_turn:
            tag = bench.tag()
            calls = [{"id": f"{tag}-{i}", "name": "noop", "arguments": {}} for i in range(turn)]
            pending.append((bench.executor.submit(calls), now))
            serial += 1
            next_turn = started + serial * interval
        elif pending and (now - pending[0][1] > 0.25 or len(pending) > 50):
            collect_one()
        else:
            time.sleep(min(0.002, max(0.0, next_turn - now)))
    submitted_calls = serial * turn
    elapsed = time.monotonic() - started
    while pending:
        collect_one()
    samples.append(
        Sample(
            time.monotonic() - started, used_memory(bench.client), int(bench.client.dbsize()), done
        )
    )
    return samples, done, failed, submitted_calls / elapsed


def measure_steady(bench_out: Bench, args: Any, own_bytes: float | None) -> None:
    """Print ``used_memory`` of a 2-worker pool under ``args.steady_rate`` calls/s."""
    out = bench_out.out
    seconds, rate = args.steady_s, args.steady_rate
    every = min(30.0, max(1.0, seconds / 4))
    defaults = Settings()
    with _bench_on_own_redis(args, {}, None, args.steady_workers, False) as bench:
        start = Snapshot.take(bench.client)
        samples, done, failed, achieved = _paced(bench, rate, args.steady_turn, seconds, every)
        bench.wait_idle("tool")
        end = Snapshot.take(bench.client)
    out(
        f"  {args.steady_workers} workers, default settings, turns of {args.steady_turn} noop "
        f"calls at {rate:g} calls/s for {seconds:g} s: achieved {achieved:.1f} calls/s, "
        f"{done} calls, failed {failed}"
    )
    out(f"  {'t (s)':>7}{'used_memory':>14}{'keys':>9}{'calls':>8}{'B/call since start':>20}")
    for s in samples:
        per = (s.used - start.used) / s.calls if s.calls else 0.0
        out(f"  {s.at_s:7.0f}{s.used:14,d}{s.keys:9,d}{s.calls:8,d}{per:20.0f}")
    final = samples[-1]
    per_call = (final.used - start.used) / max(1, final.calls)
    out(
        f"  final: used_memory {final.used / 2**20:.1f} MiB after {final.calls} calls "
        f"({per_call:.0f} B a call since the start; RQ's records of the last "
        f"{defaults.client.rq_record_ttl} s still live)"
    )
    out("  by family at the end (per call):")
    for line in _breakdown(start, end, max(1, done), "    "):
        out(line)
    day = defaults.worker.result_ttl
    if own_bytes is not None:
        held = own_bytes * rate * day
        out(
            f"  projection: toolpool's own keys {own_bytes:.0f} B a call x {rate:g} calls/s x "
            f"result_ttl {day} s = {held / 2**30:.2f} GiB held at steady state"
        )
    rq_bytes = sum(
        f.bytes - start.families.get(name, Family(0, 0.0)).bytes
        for name, f in end.families.items()
        if name.startswith("rq:")
    ) / max(1, done)
    rq_live = rq_bytes * rate * defaults.client.rq_record_ttl
    out(
        f"  + RQ's records while they live ({rq_bytes:.0f} B a call x {rate:g} calls/s x "
        f"{defaults.client.rq_record_ttl} s): about "
        f"{max(0.0, rq_live) / 2**20:.0f} MiB; the events stream is capped at "
        f"{defaults.worker.events_maxlen} entries"
    )
    bench_out.summary.append(
        f"steady load {achieved:.0f} calls/s for {seconds:g} s on {args.steady_workers} "
        f"workers: used_memory {final.used / 2**20:.1f} MiB at the end, {per_call:.0f} B a call"
    )
