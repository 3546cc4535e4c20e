"""Redis memory per call, toolpool against its baselines, and a pool's memory under a steady load.

Each measurement has a redis-server of its own, so nothing else's keys expire meanwhile.
``retained``: bytes per retained trivial call, RQ's records included. Three sides, each on a
fresh redis-server with one worker: toolpool as it ships (RQ keeps no record of a call that
ended well), toolpool keeping RQ's records (``rq_record_ttl``, the default before), raw RQ.
Each run: a burst of trivial calls left to expire (Redis's first-use costs), then a measured
burst; Redis's ``used_memory`` and the keys by family (SCAN, then MEMORY USAGE of up to
``_SAMPLE`` keys a family, times the family's count) before it, right after it (a: RQ's
records live) and once they have expired (b: their TTL shortened to ``--record-ttl``; a SCAN
of every key makes Redis drop the expired ones at once). ``--repeat`` runs, each side's
figures as min / median / max. ``steady``: a paced load on a pool with default settings,
``used_memory`` sampled at intervals.

Run: ``python -m benchmarks.calls --only memory`` (``--steady --only memory,steady`` adds
the paced load).
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from benchmarks.sides import Bench, BenchError, Burst
from executor import Settings
from executor.client import Turn
from executor.wire import ToolStatus
from workers._embedded_redis import RedisServer

_SAMPLE = 300
_BENCH_KEYS = "bench:"
# A key segment that holds an id (a digit, or long): grouped as ``*``.
_VARIABLE = re.compile(r"\d|^.{24,}$")
GOAL_BYTES = 1024
_BUFFERS = "clients' buffers"


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
        _BUFFERS: int(stats.get("clients.normal", 0)),
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


@dataclass(frozen=True, eq=False)
class Side:
    """One configuration the retained figure measures, on a Redis of its own.

    ``settings``: toolpool's settings beside the defaults; ``raw_ttl``: raw RQ's result TTL
    (``raw`` sides only).
    """

    name: str
    settings: dict[str, Any]
    raw: bool = False
    raw_ttl: int | None = None


def retained_sides(ttl: int) -> tuple[Side, ...]:
    """toolpool as it ships (RQ keeps no record of a call that ended well), the baseline of
    toolpool keeping RQ's records (the default before, ``rq_record_ttl`` 600, shortened to
    ``ttl`` so that they expire within the run), and raw RQ (its records for ``ttl`` too)."""
    return (
        Side("toolpool", {}),
        Side("toolpool, RQ's records kept", {"rq_record_ttl": ttl}),
        Side("raw RQ", {}, raw=True, raw_ttl=ttl),
    )


@dataclass
class Retained:
    """One side's snapshots in one run: before the burst, right after it (a), once RQ's
    records expired (b)."""

    before: Snapshot
    live: Snapshot
    gone: Snapshot
    calls: int
    stream: str

    def per_call(self, at: Snapshot) -> float:
        """``used_memory`` gained a call by ``at``, less what does not grow with the calls
        kept: the capped events stream, and the clients' buffers (a connection's query and
        reply buffers, which come and go with its last commands)."""
        capped = _delta(self.before, at, lambda name: name == self.stream)
        buffers = at.outside[_BUFFERS] - self.before.outside[_BUFFERS]
        return (at.used - self.before.used - capped - buffers) / self.calls

    @property
    def live_bytes(self) -> float:
        """(a): bytes a retained call holds, RQ's records included."""
        return self.per_call(self.live)

    @property
    def gone_bytes(self) -> float:
        """(b): bytes a retained call holds once RQ's records expired."""
        return self.per_call(self.gone)

    def jobs(self, at: Snapshot) -> int:
        """RQ's job hashes at ``at``."""
        return at.families.get("rq:job:*", Family(0, 0.0)).keys


def _side_lines(side: str, run: Retained, ttl: int) -> list[str]:
    """The report of one side: both figures, each with its keys by family."""
    before, calls = run.before, run.calls
    return [
        f"  {side}: (a) {run.live_bytes:6.0f} B a call right after the burst, RQ's records "
        f"included ({run.jobs(run.live)} rq:job:* keys)",
        *_breakdown(before, run.live, calls, "        "),
        _outside_line(before, run.live, calls, "        "),
        f"  {side}: (b) {run.gone_bytes:6.0f} B a call once RQ's records expired (TTL "
        f"shortened to {ttl} s; {run.jobs(run.gone)} rq:job:* keys)",
        *_breakdown(before, run.gone, calls, "        "),
        _outside_line(before, run.gone, calls, "        "),
    ]


def _burst(bench: Bench, side: Side, calls: int, turn: int) -> Burst:
    """A burst of ``calls`` trivial calls on ``side``, and its workers idle after it."""
    if side.raw:
        burst = bench.raw_burst(calls)
        bench.wait_idle("raw")
    else:
        burst = bench.toolpool_burst(calls, turn)
        bench.wait_idle("tool")
    return burst


def _wait_expired(since: float, ttl: int) -> None:
    """Until RQ's records made by ``since`` (a monotonic time) expired."""
    time.sleep(max(0.0, since + ttl + 2 - time.monotonic()))


def retained_run(args: Any, sides: tuple[Side, ...], calls: int, ttl: int) -> list[Retained]:
    """One run: each side on a fresh redis-server with one worker; their snapshots."""
    stream = f"{Settings().redis.key_prefix}:events"
    with ExitStack() as stack:
        benches = [
            stack.enter_context(_bench_on_own_redis(args, side.settings, side.raw_ttl, 1, side.raw))
            for side in sides
        ]
        # A first burst of the same size, left to expire: Redis's first-use costs (scripts,
        # registries, clients' buffers, its key tables grown to this size) stay out.
        for bench, side in zip(benches, sides, strict=True):
            _burst(bench, side, calls, args.memory_turn)
        _wait_expired(time.monotonic(), ttl)
        before = [Snapshot.take(bench.client) for bench in benches]
        live = []
        for bench, side in zip(benches, sides, strict=True):
            burst = _burst(bench, side, calls, args.memory_turn)
            if burst.failed:
                raise BenchError(f"{burst.failed} of the {side.name} memory burst's calls failed")
            live.append(Snapshot.take(bench.client))
        _wait_expired(time.monotonic(), ttl)
        gone = [Snapshot.take(bench.client) for bench in benches]
    return [
        Retained(*snaps, calls=calls, stream=stream)
        for snaps in zip(before, live, gone, strict=True)
    ]


def _spread(values: list[float], digits: int = 0) -> str:
    """``min / median / max`` of ``values``."""
    ordered = (min(values), statistics.median(values), max(values))
    return " / ".join(f"{value:.{digits}f}" for value in ordered)


def measure_retained(report: Bench, calls: int, ttl: int, args: Any) -> float:
    """Print bytes per retained trivial call, RQ's records included, for toolpool and its
    baselines, ``args.repeat`` runs; return toolpool's own bytes per retained call (median)."""
    out = report.out
    prefix = Settings().redis.key_prefix
    turn = args.memory_turn
    tool, kept, raw = sides = retained_sides(ttl)
    runs: list[dict[Side, Retained]] = []
    for index in range(max(1, args.repeat)):
        runs.append(dict(zip(sides, retained_run(args, sides, calls, ttl), strict=True)))
        figures = ", ".join(f"{side.name} {runs[-1][side].live_bytes:.0f} B" for side in sides)
        out(f"  run {index + 1}: (a) {figures}")
        for side in (kept, raw):
            if runs[-1][side].jobs(runs[-1][side].live) < calls:
                out(f"    {side.name}: some records expired before (a): raise --record-ttl")
    out(f"  by family, run {len(runs)}, per call:")
    for side in sides:
        for line in _side_lines(side.name, runs[-1][side], ttl):
            out(line)
    stream = runs[0][tool].stream
    out(
        f"  (left out of (a) and (b): {stream}, capped at events_maxlen "
        f"{Settings().worker.events_maxlen} entries, a fixed cost once full, and the clients' "
        "buffers, which come and go with the connections' last commands; neither grows with the "
        "calls kept. A first burst of the same size ran, its RQ records left to expire, so Redis's "
        "first-use costs stay out too)"
    )

    def figure(side: Side) -> list[float]:
        return [run[side].live_bytes for run in runs]

    out(
        f"  bytes per retained trivial call (turns of {turn}), RQ's records included: (a) right "
        f"after the burst, (b) once RQ's records expired; min / median / max of {len(runs)} runs"
    )
    for side in sides:
        gone = _spread([run[side].gone_bytes for run in runs])
        out(f"    {side.name:<28} (a) {_spread(figure(side)):>17}   (b) {gone:>17}")
    over_kept = [t / k for t, k in zip(figure(tool), figure(kept), strict=True)]
    over_raw = [t / r for t, r in zip(figure(tool), figure(raw), strict=True)]
    out(
        f"  per run, (a): toolpool / {kept.name} {_spread(over_kept, 2)}; toolpool / raw RQ "
        f"{_spread(over_raw, 2)} (min / median / max)"
    )
    own = [
        _delta(
            run[tool].before,
            run[tool].gone,
            lambda name: name.startswith(prefix + ":") and name != stream,
        )
        / calls
        for run in runs
    ]
    worst = max(figure(tool))
    out(
        f"  goal: <= {GOAL_BYTES} B per retained trivial call, RQ's records included: toolpool "
        f"{statistics.median(figure(tool)):.0f} B (median; at most {worst:.0f} B), "
        f"{'met' if worst <= GOAL_BYTES else 'NOT met'}; of which toolpool's own keys "
        f"{statistics.median(own):.0f} B"
    )
    report.summary.append(
        f"Redis memory per retained trivial call (turns of {turn}, RQ's records included, "
        f"events stream and clients' buffers aside), min / median / max of {len(runs)} runs: "
        f"toolpool {_spread(figure(tool))} B; {kept.name} {_spread(figure(kept))} B; raw RQ "
        f"{_spread(figure(raw))} B"
    )
    return statistics.median(own)


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
    record_ttl = defaults.client.rq_record_ttl
    kept = f"RQ's records of the last {record_ttl} s still live" if record_ttl else "RQ keeps none"
    out(
        f"  final: used_memory {final.used / 2**20:.1f} MiB after {final.calls} calls "
        f"({per_call:.0f} B a call since the start; {kept})"
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
    rq_live = rq_bytes * rate * record_ttl
    out(
        f"  + RQ's records while they live ({rq_bytes:.0f} B a call x {rate:g} calls/s x "
        f"rq_record_ttl {record_ttl} s): about {max(0.0, rq_live) / 2**20:.0f} MiB; the "
        f"events stream is capped at {defaults.worker.events_maxlen} entries"
    )
    bench_out.summary.append(
        f"steady load {achieved:.0f} calls/s for {seconds:g} s on {args.steady_workers} "
        f"workers: used_memory {final.used / 2**20:.1f} MiB at the end, {per_call:.0f} B a call"
    )
