"""The fault run's failover mode: its Redis is a primary and replicas under three Sentinels.

``FailoverRedis`` runs ``RedisHA``; the processes reach the primary through ``url``: the
Sentinel URL, or (``follow="proxy"``) a loopback proxy that forwards to the current primary
and closes its connections to the old one at each promotion. ``FailoverInjector`` injects the
four failovers (SENTINEL FAILOVER, SIGKILL, SIGSTOP of the primary, a lagging replica
promoted), one of each first, and, with ``worker_faults``, the worker faults that need no
proxy in between; after each failover it waits until an exclusive lock is held again.

The checks of this mode, beside those of ``checks``: the counter file never goes back,
exclusive grants' fences rise in grant order, no call ran again after its answer, a second
collect of every turn answers what the first did; and the heal time of every failover: from
the fault to the first exclusive grant after the promotion.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import redis

from executor.lock import RWLock
from executor.wire import Event
from tests.support.fault.checks import CallRecord, CheckResult, Fault, Sighting, payload_writer
from tests.support.fault.inject import Injector
from tests.support.fault.procs import Pools
from tests.support.fault.proxy import TcpProxy
from tests.support.redis_ha import HAError, RedisHA

FAILOVER_KINDS = ["sentinel_failover", "kill_primary", "stop_primary", "lagging_failover"]
WORKER_KINDS = ["kill_random", "kill_holder", "stop_holder"]  # cut_holder needs a proxy
COUNTER = "counter.txt"  # written by one orchestrator, one value after another (``count_up``)

#: One collect's answer per call: (status, error type, content).
Answers = dict[str, tuple[str, str | None, str]]


def counter_value(writer: str | None) -> int | None:
    if writer is None or not writer.startswith("n") or "-" not in writer:
        return None
    head = writer.split("-", 1)[0][1:]
    return int(head) if head.isdigit() else None


class FailoverRedis:
    """``RedisHA`` for the run; ``url`` for its processes, ``tcp_url`` for its own reads."""

    def __init__(self, folder: Path, *, follow: str = "sentinel", replicas: int = 1) -> None:
        if follow not in ("sentinel", "proxy"):
            raise ValueError(f"follow: sentinel or proxy, not {follow!r}")
        self.ha = RedisHA(folder, replicas=replicas)
        self.follow = follow
        self.proxy: TcpProxy | None = None

    def start(self) -> FailoverRedis:
        self.ha.start()
        if self.follow == "proxy":
            self.proxy = TcpProxy("127.0.0.1", self.ha.primary_port).start()
            proxy = self.proxy
            self.ha.on_promoted = lambda port: proxy.retarget("127.0.0.1", port)
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        self.ha.close()

    @property
    def url(self) -> str:
        """What pools and orchestrators use: the Sentinel URL or the following proxy."""
        return self.ha.url() if self.proxy is None else f"{self.proxy.url}/0"

    @property
    def tcp_url(self) -> str:
        """The current primary, directly (the run's own reads and lock status)."""
        return f"redis://127.0.0.1:{self.ha.primary_port}/0"

    def inject(self, kind: str) -> Fault:
        """One failover of ``kind``, once the pair is healthy; ``end`` is the promotion."""
        self.ha.wait_ready()
        taken = {
            "sentinel_failover": self.ha.failover,
            "kill_primary": self.ha.kill_primary,
            "stop_primary": self.ha.stop_primary,
            "lagging_failover": self.ha.lagging_failover,
        }[kind]()
        return Fault(kind, self.ha.fault_at, self.ha.promoted_at, note=f"promoted in {taken:.2f} s")


class FailoverInjector(Injector):
    """Failovers of ``ha`` every ``gap`` s until ``done``; worker faults between them."""

    def __init__(
        self,
        ha: FailoverRedis,
        pools: Pools,
        done: threading.Event,
        rng: random.Random,
        *,
        lease_ms: int,
        gap: float,
        worker_faults: bool,
        scopes: list[str],
    ) -> None:
        super().__init__(
            ha, pools, done, rng, lease_ms=lease_ms, gap=gap, max_faults=None, scopes=scopes
        )
        self.ha = ha
        self.worker_faults = worker_faults

    def loop(self) -> None:
        plan = list(FAILOVER_KINDS)
        self.rng.shuffle(plan)
        while not self.done.wait(self.gap):
            if self.worker_faults and self.rng.random() < 0.5:
                fault = self._worker_fault(self.rng.choice(WORKER_KINDS))
            else:
                fault = self.ha.inject(plan.pop(0) if plan else self.rng.choice(FAILOVER_KINDS))
                self._wait_for_a_grant()
            if fault is not None:
                self.faults.append(fault)

    def _wait_for_a_grant(self, patience_s: float = 60.0) -> None:
        """Let the load heal before the next fault: wait until an exclusive lock is held
        again (back to back, failovers would only measure each other's outages)."""
        deadline = time.monotonic() + patience_s
        while not self.done.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, HAError):
                self.ha.ha.refresh()
                for scope in self.scopes:
                    lock = RWLock.from_url(self.ha.tcp_url, scope, lease_ms=self.lease_ms)
                    try:
                        if any(h.mode == "exclusive" for h in lock.status().holders):
                            return
                    finally:
                        lock.close()
            time.sleep(0.05)

    def _worker_fault(self, kind: str) -> Fault | None:
        with contextlib.suppress(redis.RedisError, HAError):
            self.ha.ha.refresh()
        locks = [
            RWLock.from_url(self.ha.tcp_url, scope, lease_ms=self.lease_ms) for scope in self.scopes
        ]
        try:
            return self._inject(kind, locks)
        finally:
            for lock in locks:
                lock.close()


def check_counter(sightings: list[Sighting], final: str | None) -> CheckResult:
    """The counter file's value never goes back: each write of it was sent only after the
    previous one was answered, so a smaller value after a larger is an old write landing."""
    out = CheckResult("6 counter never goes back")
    seen = [(s.seen, counter_value(s.writer)) for s in sightings if s.path == COUNTER]
    values = [v for _, v in seen if v is not None]
    top = 0
    for at, value in seen:
        if value is None:
            continue
        if value < top:
            out.violations.append(f"{COUNTER} went back from {top} to {value} at {at:.3f}")
        top = max(top, value)
    if final is not None:
        last = counter_value(payload_writer(final))
        if last is not None and last < top:
            out.violations.append(f"{COUNTER} ends at {last}, below {top} seen before")
    out.notes.append(f"values seen {len(values)}, highest {top}")
    return out


def check_fences(events: list[Event], records: dict[str, CallRecord]) -> CheckResult:
    """Exclusive grants' fences rise in grant order (a grant's event is stamped after it)."""
    out = CheckResult("7 fences rise in grant order")
    lost = {
        e.call_id for e in events if e.event == "lock_released" and not e.data.get("held", True)
    }
    released = {e.call_id for e in events if e.event == "lock_released"}
    grants = sorted(
        (e.ts, int(e.data["fence"]), e.call_id)
        for e in events
        if e.event == "lock_acquired"
        and e.data.get("mode") == "exclusive"
        and e.data.get("fence") is not None
    )
    excused = 0
    for (_, fence_a, call_a), (ts_b, fence_b, call_b) in itertools.pairwise(grants):
        if fence_b > fence_a:
            continue
        # A holder paused right after its grant stamps its event late; its lease was lost.
        valid = all(c in released and c not in lost for c in (call_a, call_b))
        if not valid:
            excused += 1
            continue
        tool_a = records[call_a].tool if call_a in records else "?"
        tool_b = records[call_b].tool if call_b in records else "?"
        out.violations.append(
            f"fence {fence_b:#x} ({tool_b} {call_b}, {ts_b:.3f}) after fence {fence_a:#x} "
            f"({tool_a} {call_a})"
        )
    epochs = sorted({fence >> 32 for _, fence, _ in grants})
    out.notes.append(
        f"exclusive grants {len(grants)}, epochs {len(epochs)}, "
        f"out of order with a lease lost or ended unseen {excused}"
    )
    return out


def check_after_answer(records: dict[str, CallRecord], events: list[Event]) -> CheckResult:
    """No call started again after the caller had its answer."""
    out = CheckResult("8 none run again after its answer")
    for item in events:
        if item.event != "tool_execution_started":
            continue
        rec = records.get(item.call_id)
        if rec is not None and rec.answered_at and item.ts > rec.answered_at:
            out.violations.append(
                f"{rec.tool} {rec.call_id} answered {rec.status}/{rec.error_type} at "
                f"{rec.answered_at:.3f}, started again at {item.ts:.3f}"
            )
    return out


def check_recollect(first: dict[str, Answers], second: dict[str, Answers | str]) -> CheckResult:
    """A second collect of every turn, at the end, answers exactly what the first did."""
    out = CheckResult("9 stored results kept")
    for turn_id, answers in first.items():
        again = second.get(turn_id, "not collected again")
        if isinstance(again, str):
            out.violations.append(f"turn {turn_id}: the second collect failed: {again}")
            continue
        for call_id, answer in answers.items():
            if again.get(call_id) != answer:
                shown = again.get(call_id)
                out.violations.append(
                    f"turn {turn_id} call {call_id}: first {answer[:2]}, then "
                    f"{shown[:2] if shown else None}"
                    + (" (content differs)" if shown and shown[:2] == answer[:2] else "")
                )
    out.notes.append(f"turns collected twice {len(first)}")
    return out


def heal_times(
    faults: Iterable[Fault], events: list[Event], lease_ms: int
) -> tuple[CheckResult, dict[str, list[float]]]:
    """Per failover: fault -> the first exclusive grant after its promotion."""
    out = CheckResult("10 heal after a failover (no violations: a figure)")
    grants = sorted(
        e.ts for e in events if e.event == "lock_acquired" and e.data.get("mode") == "exclusive"
    )
    goal = lease_ms / 3000 + 2.0
    times: dict[str, list[float]] = defaultdict(list)
    lines = []
    for fault in faults:
        if fault.kind not in FAILOVER_KINDS:
            continue
        after = [ts for ts in grants if ts >= fault.end]
        heal = after[0] - fault.start if after else None
        if heal is not None:
            times[f"failover {fault.kind}: heal"].append(heal)
            times["failover (all): heal"].append(heal)
        shown = f"{heal:.2f} s" if heal is not None else "no grant after"
        lines.append(f"{fault.kind} {fault.note}, heal {shown}")
    every = times.get("failover (all): heal", [])
    over = sum(1 for t in every if t > goal)
    if every:
        out.notes.append(
            f"failovers {len(lines)}: heal median {statistics.median(every):.2f} s, max "
            f"{max(every):.2f} s; over the goal of {goal:.2f} s (lease/3 + 2 s): {over}"
        )
    out.notes += lines
    return out, dict(times)
