"""The RW lock across real OS processes, on a real redis-server.

Every contender is a process of its own (``tests/support/lock_proc.py``, run with
``python -m``), with its own Redis clients and its own lease keeper thread. Processes that must
contend are released together by one barrier (a Redis list they BLPOP on). Holds are recorded on
``time.monotonic()``, which on Linux is one clock for every process, and checked afterwards by
an oracle. The parent never sleeps and hopes: it waits for a condition, an event or an exit,
each with a deadline. Leases are short (0.5-1.5 s) so that the file runs in seconds.

A recorded hold runs from just after the grant's reply arrived to just before the release was
sent, so it lies inside the hold Redis saw: two recorded holds that overlap really overlapped.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from executor.lock import Lease, LockTimeout, Mode, OwnerInfo, Policy, RWLock
from executor.lock._keeper import LeaseKeeper
from executor.lock._scripts import LockScripts
from executor.wire import Keys
from tests.support.lock_proc import (
    GO_KEY,
    READY_KEY,
    STOP_KEY,
    ChildConfig,
    control_key,
    events_key,
)
from tests.support.procs import python_path_env
from tests.support.waiting import wait_for

# A process-heavy proof (many lock-holding processes): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

# How long any single condition may take before the test fails (generous: a loaded 2-core box
# starts 20 Python processes in a few seconds).
_PATIENCE_S = 30.0


# -- the processes ------------------------------------------------------------------------


@dataclass
class Child:
    """One child process and where it reports."""

    config: ChildConfig
    process: subprocess.Popen[bytes]
    stderr: Path

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pid(self) -> int:
        return self.process.pid

    def records(self) -> list[dict[str, Any]]:
        out = Path(self.config.out)
        if not out.exists():
            return []
        return [json.loads(line) for line in out.read_text().splitlines()]

    def diagnosis(self) -> str:
        return f"{self.name} (pid {self.pid}): {self.stderr.read_text()[-3000:]}"


class Children:
    """Starts children, releases them together, reads their events; kills what is left."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        self.redis = redis.Redis.from_url(url, socket_timeout=_PATIENCE_S + 5)
        self.started: list[Child] = []
        self._env = python_path_env()

    def start(self, role: str, name: str, scope: str, **options: Any) -> Child:
        config = ChildConfig.model_validate(
            {
                "role": role,
                "name": name,
                "url": self.url,
                "scope": scope,
                "out": str(self.folder / f"{name}.jsonl"),
                **options,
            }
        )
        stderr = self.folder / f"{name}.stderr"
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.lock_proc", config.model_dump_json()],
                cwd=self.folder,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
            )
        child = Child(config, process, stderr)
        self.started.append(child)
        return child

    def release_together(self, children: list[Child]) -> float:
        """Wait until every child waits at the barrier, then let them all go at once."""

        def all_ready() -> bool:
            for child in children:
                code = child.process.poll()
                assert code is None, f"exited with {code} before the start: {child.diagnosis()}"
            return int(self.redis.llen(READY_KEY)) >= len(children)

        wait_for(all_ready, what="every child to reach the barrier")
        self.redis.delete(READY_KEY)
        self.redis.rpush(GO_KEY, *["go"] * len(children))
        return time.monotonic()

    def event(self, child: Child, kind: str, timeout: float = _PATIENCE_S) -> dict[str, Any]:
        """The child's next event, which must be of ``kind``."""
        deadline = time.monotonic() + timeout
        while True:
            reply = self.redis.blpop([events_key(child.name)], timeout=0.2)
            if reply is not None:
                event: dict[str, Any] = json.loads(reply[1])
                assert event["kind"] == kind, f"{child.name}: expected {kind}, got {event}"
                return event
            code = child.process.poll()
            assert code is None, f"exited with {code} before {kind}: {child.diagnosis()}"
            assert time.monotonic() < deadline, f"no {kind!r} event from {child.name}"

    def order(self, child: Child, what: str) -> None:
        self.redis.rpush(control_key(child.name), what)

    def finish(self, children: list[Child], timeout: float = _PATIENCE_S) -> None:
        """Wait for every child to exit, and require that each succeeded."""
        deadline = time.monotonic() + timeout
        for child in children:
            try:
                code = child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{child.name} did not finish in {timeout} s: {child.diagnosis()}")
            assert code == 0, f"exit code {code}: {child.diagnosis()}"

    def kill(self, child: Child) -> float:
        """SIGKILL the child (by its PID); returns when it was sent."""
        killed_at = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        child.process.wait(5.0)
        return killed_at

    def close(self) -> None:
        for child in self.started:
            if child.process.poll() is None:
                # A stopped child would not die of SIGTERM; SIGKILL works on it, by its PID.
                child.process.kill()
            child.process.wait(5.0)
        self.redis.close()


@pytest.fixture
def children(redis_url: str, tmp_path: Path) -> Iterator[Children]:
    own = Children(redis_url, tmp_path)
    yield own
    own.close()


@pytest.fixture
def keeper() -> Iterator[LeaseKeeper]:
    own = LeaseKeeper(name="test-processes-keeper")
    yield own
    own.close()


@pytest.fixture
def make_lock(redis_url: str, keeper: LeaseKeeper) -> Iterator[Callable[..., RWLock]]:
    """This (parent) process's locks, with a keeper of the test's own."""
    locks: list[RWLock] = []

    def make(scope: str, **options: Any) -> RWLock:
        lock = RWLock.from_url(redis_url, scope, keeper=keeper, **options)
        locks.append(lock)
        return lock

    yield make
    for lock in locks:
        lock.close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


def _queue_is(lock: RWLock, tokens: list[str]) -> Callable[[], bool]:
    return lambda: [w.token for w in lock.status().queue] == tokens


# -- the oracle ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Hold:
    """One recorded hold."""

    who: str
    mode: str
    start: float
    end: float
    fence: int | None = None

    def overlaps(self, other: Hold) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class Verdict:
    """What the oracle found in a set of holds."""

    exclusive_overlaps: list[tuple[Hold, Hold]]
    shared_overlaps: int
    fence_regressions: list[tuple[Hold, Hold]]


def judge(holds: list[Hold]) -> Verdict:
    """Every pair of overlapping holds, classified; and the fences in exclusive grant order."""
    ordered = sorted(holds, key=lambda h: h.start)
    exclusive_overlaps: list[tuple[Hold, Hold]] = []
    shared_overlaps = 0
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.start >= first.end:
                break
            if "exclusive" in (first.mode, second.mode):
                exclusive_overlaps.append((first, second))
            else:
                shared_overlaps += 1
    # Exclusive holds do not overlap (or the verdict says so), so start order is grant order.
    writes = [h for h in ordered if h.mode == "exclusive"]
    regressions = [
        (a, b)
        for a, b in itertools.pairwise(writes)
        if a.fence is None or b.fence is None or b.fence <= a.fence
    ]
    return Verdict(exclusive_overlaps, shared_overlaps, regressions)


def _holds(children: list[Child]) -> list[Hold]:
    return [
        Hold(r["name"], r["mode"], r["start"], r["end"], r["fence"])
        for child in children
        for r in child.records()
        if "start" in r
    ]


def test_the_oracle_catches_what_it_looks_for() -> None:
    clean = [
        Hold("a", "shared", 0.0, 2.0),
        Hold("b", "shared", 1.0, 3.0),
        Hold("c", "exclusive", 3.0, 4.0, fence=5),
        Hold("d", "exclusive", 4.0, 5.0, fence=9),
    ]
    assert judge(clean) == Verdict([], 1, [])

    bad = [*clean, Hold("e", "exclusive", 3.5, 3.6, fence=11), Hold("f", "shared", 4.9, 6.0)]
    verdict = judge(bad)
    pairs = {(a.who, b.who) for a, b in verdict.exclusive_overlaps}
    assert pairs == {("c", "e"), ("d", "f")}
    assert [(a.who, b.who) for a, b in verdict.fence_regressions] == [("e", "d")]
    assert verdict.shared_overlaps == 1


# -- mutual exclusion ---------------------------------------------------------------------


def test_sixteen_processes_exclude_writers_share_readers_and_fences_rise(
    children: Children, make_lock: Callable[..., RWLock]
) -> None:
    processes, iterations = 16, 25
    lock = make_lock("contention")
    contenders = [
        children.start(
            "contender",
            f"contender-{i}",
            "contention",
            lease_ms=1500,
            iterations=iterations,
            hold_ms=(1.0, 5.0),
            # Some processes write more, some mostly read: a mix within and across processes.
            exclusive_share=(0.15, 0.3, 0.5)[i % 3],
            seed=i,
            barrier=True,
        )
        for i in range(processes)
    ]
    children.release_together(contenders)
    children.finish(contenders, timeout=60)

    records = [r for child in contenders for r in child.records()]
    assert len(records) == processes * iterations
    assert all(r["held"] for r in records), "a lease was lost under contention"
    holds = _holds(contenders)
    verdict = judge(holds)
    assert verdict.exclusive_overlaps == []
    assert verdict.shared_overlaps > 0, "readers never shared the lock"
    assert verdict.fence_regressions == []

    writes = sum(1 for h in holds if h.mode == "exclusive")
    assert 0 < writes < len(holds)
    counters = lock.status().counters
    assert (counters.grants_exclusive, counters.grants_shared) == (writes, len(holds) - writes)
    assert (counters.expired_holders, counters.lost_leases) == (0, 0)


# -- writer starvation --------------------------------------------------------------------

_READERS = 5
_READ_HOLD_MS = (60.0, 100.0)
# A writer asking while readers hold waits for the longest of their holds, plus a hand-off.
_WRITER_BOUND_S = _READ_HOLD_MS[1] / 1000 + 0.25


@pytest.mark.parametrize("policy", ["fair", "read_preferring"])
def test_a_writer_is_not_starved_by_continuous_readers_unless_the_lock_prefers_readers(
    policy: Policy, children: Children, make_lock: Callable[..., RWLock]
) -> None:
    attempts = 4
    scope = f"starve-{policy}"
    lock = make_lock(scope, lease_ms=1000, recheck_s=0.25, policy=policy)
    readers = [
        children.start(
            "reader",
            f"reader-{i}",
            scope,
            policy=policy,
            lease_ms=1000,
            hold_ms=_READ_HOLD_MS,
            seed=i,
            barrier=True,
        )
        for i in range(_READERS)
    ]
    children.release_together(readers)

    def readers_hold() -> bool:
        status = lock.status()
        return status.mode == "shared" and len(status.holders) >= _READERS - 1

    waits: list[float | None] = []
    signals: list[int] = []
    waited: list[tuple[float, float]] = []  # each attempt: (asked, granted or gave up)
    for _ in range(attempts):
        wait_for(readers_hold, what="the readers to hold together")
        asked = time.monotonic()
        try:
            lease = lock.acquire("exclusive", timeout=2 * _WRITER_BOUND_S)
        except LockTimeout:
            waits.append(None)
            waited.append((asked, time.monotonic()))
            continue
        waited.append((asked, time.monotonic()))
        waits.append(lease.waited_s)
        signals.append(lease.signals)
        lease.release()
    children.redis.set(STOP_KEY, "1")
    children.finish(readers)

    # The readers shared the lock, overlapping each other.
    reads = _holds(readers)
    verdict = judge(reads)
    assert verdict.shared_overlaps > 0
    assert verdict.exclusive_overlaps == []
    # Reader holds granted while the writer waited: under the fair lock only readers queued
    # before it (one request at most per reader process); under the read-preferring one,
    # every reader that asks. This holds however the machine schedules the processes.
    overtakes = [sum(1 for h in reads if asked < h.start < until) for asked, until in waited]
    within = [w for w in waits if w is not None and w <= _WRITER_BOUND_S]
    if policy == "fair":
        assert max(overtakes) <= _READERS, f"readers passed a queued writer: {overtakes}"
        assert len(within) == attempts, f"writer waits {waits}, bound {_WRITER_BOUND_S:.3f} s"
        # Each grant was a hand-off from the last reader out, through one signal.
        assert signals == [1] * attempts
    else:
        # Readers kept passing the queued writer, more than a fair lock ever lets through;
        # it got in only when, by chance, no reader held (a busy machine makes such gaps).
        assert max(overtakes) > _READERS, f"no reader passed the writer: {overtakes}, {waits}"
        for (asked, until), passed, wait in zip(waited, overtakes, waits, strict=True):
            if wait is None:
                assert passed > 0, f"refused at {asked:.3f}-{until:.3f}, no reader passing"


# -- no thundering herd -------------------------------------------------------------------


def test_twenty_queued_writer_processes_drain_with_one_wakeup_per_hand_off(
    children: Children, make_lock: Callable[..., RWLock]
) -> None:
    writers = 20
    # The re-check is far away, so every grant below must come from a signal.
    recheck_s = 20.0
    lock = make_lock("herd", recheck_s=recheck_s)
    holder = lock.acquire("exclusive")
    tokens = [f"writer-{i:02d}" for i in range(writers)]
    queued = [
        children.start(
            "waiter", token, "herd", token=token, recheck_s=recheck_s, timeout=_PATIENCE_S
        )
        for token in tokens
    ]
    wait_for(lambda: len(lock.status().queue) == writers, what="all writers to queue")
    queue_order = [w.token for w in lock.status().queue]
    before = lock.status().counters.wakeups

    released_at = time.monotonic()
    assert holder.release()
    children.finish(queued)
    records = sorted((r for c in queued for r in c.records()), key=lambda r: r["start"])
    drained_in = records[-1]["end"] - released_at

    status = lock.status()
    # One hand-off per queued writer (the holder's release, then each writer's but the last),
    # and one wake-up each: nobody else was woken.
    assert status.counters.wakeups - before == writers
    # Every writer woke exactly once, and that wake-up let it in: a waiter woken in vain
    # would have needed a second signal (or the re-check, 20 s away).
    assert [r["signals"] for r in records] == [1] * writers
    assert [r["token"] for r in records] == queue_order  # FIFO
    fences = [r["fence"] for r in records]
    assert fences == sorted(fences)
    assert len(set(fences)) == writers
    assert drained_in < recheck_s
    assert status.queue == ()
    assert status.holders == ()


# -- processes that die or stop -----------------------------------------------------------


def _grant_time(lock: RWLock, pool: ThreadPoolExecutor) -> Callable[[], tuple[Lease, float]]:
    future = pool.submit(lambda: (lock.acquire("exclusive", timeout=_PATIENCE_S), time.monotonic()))
    return lambda: future.result(timeout=_PATIENCE_S)


def test_a_killed_holder_frees_the_lock_when_its_lease_ends(
    children: Children, make_lock: Callable[..., RWLock], pool: ThreadPoolExecutor
) -> None:
    lease_ms, recheck_s, margin_s = 800, 0.2, 0.3
    lock = make_lock("killed-holder", lease_ms=lease_ms, recheck_s=recheck_s)
    holder = children.start("holder", "holder", "killed-holder", lease_ms=lease_ms)
    held = children.event(holder, "held")
    granted = _grant_time(lock, pool)
    wait_for(lambda: len(lock.status().queue) == 1, what="the waiter to queue")

    [holding] = lock.status().holders
    killed_at = children.kill(holder)
    lease, granted_at = granted()

    waited = granted_at - killed_at
    # Not before the lease Redis knew ran out, and at most a re-check after it.
    assert waited >= holding.remaining_ms / 1000 - 0.05
    assert waited <= lease_ms / 1000 + recheck_s + margin_s, f"granted {waited:.3f} s after kill"
    assert lease.fence is not None
    assert lease.fence > held["fence"]
    assert lock.status().counters.expired_holders == 1
    assert lease.release()


def test_a_killed_head_waiter_leaves_the_queue_after_its_deadline(
    children: Children, make_lock: Callable[..., RWLock]
) -> None:
    recheck_s, ttl_ms, margin_s = 0.25, 1000, 0.3
    options: dict[str, Any] = {"recheck_s": recheck_s, "waiter_ttl_ms": ttl_ms}
    lock = make_lock("dead-waiter", **options)
    holder = lock.acquire("exclusive")
    queue: list[str] = []
    rest: list[Child] = []
    for name in ("head", "second", "third"):
        child = children.start(
            "waiter", name, "dead-waiter", token=name, hold_ms=(5.0, 5.0), **options
        )
        queue.append(name)
        wait_for(_queue_is(lock, queue), what=f"{name} to queue at position {len(queue)}")
        rest.append(child)
    head = rest.pop(0)

    deadline_in = lock.status().queue[0].deadline_in_ms / 1000
    killed_at = children.kill(head)
    assert holder.release()
    children.finish(rest)

    second, third = (child.records()[0] for child in rest)
    waited = second["start"] - killed_at
    assert waited >= deadline_in - 0.05, "granted while the dead head still had its place"
    assert waited <= ttl_ms / 1000 + recheck_s + margin_s, f"granted {waited:.3f} s after kill"
    assert third["start"] >= second["end"]
    counters = lock.status().counters
    assert counters.expired_waiters == 1
    assert counters.grants_exclusive == 3  # the holder, second, third: never the dead head


def test_a_paused_holder_loses_its_lease_to_a_higher_fence_and_learns_it_on_resume(
    children: Children, make_lock: Callable[..., RWLock], keeper: LeaseKeeper
) -> None:
    lease_ms, recheck_s = 600, 0.1
    lock = make_lock("paused", lease_ms=lease_ms, recheck_s=recheck_s)
    paused = children.start("holder", "paused", "paused", lease_ms=lease_ms)
    held = children.event(paused, "held")

    os.kill(paused.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        # A stopped process renews nothing: its lease ends within what Redis has left of it.
        [stopped] = lock.status().holders
        rival = lock.acquire("exclusive", timeout=10 * lease_ms / 1000)
        assert time.monotonic() - stopped_at >= stopped.remaining_ms / 1000 - 0.05
    finally:
        resumed_at = time.monotonic()  # read first: the child may run before kill() returns
        os.kill(paused.pid, signal.SIGCONT)
    assert rival.fence is not None
    assert rival.fence > held["fence"]

    # The keeper thread notices on its own, at once, without being asked.
    lost = children.event(paused, "lost", timeout=3.0)
    assert resumed_at <= lost["at"] <= resumed_at + 1.0
    assert "ran out" in lost["reason"] or "gone" in lost["reason"]
    children.order(paused, "check")
    checked = children.event(paused, "checked")
    assert checked["lost"] is True
    assert checked["lease_check"] is False
    assert checked["server_check"] is False  # Redis itself says the old fence is dead
    assert "lost the exclusive lock" in checked["refused"]
    assert checked["released"] is False
    children.finish([paused])

    assert rival.check_fence()
    assert rival.release()
    wait_for(lambda: lock.status().counters.lost_leases == 1, what="the loss to be counted")
    assert lock.status().counters.expired_holders == 1


def test_a_long_hold_with_the_heartbeat_admits_nobody_and_never_expires(
    children: Children, make_lock: Callable[..., RWLock]
) -> None:
    lease_ms = 500
    hold_s = 4 * lease_ms / 1000
    options: dict[str, Any] = {"lease_ms": lease_ms, "recheck_s": 0.1}
    lock = make_lock("long", **options)
    long_holder = children.start(
        "long_holder", "long", "long", hold_ms=(hold_s * 1000, hold_s * 1000), **options
    )
    impatient = children.start(
        "waiter", "impatient", "long", timeout=hold_s / 2, barrier=True, **options
    )
    patient = children.start(
        "waiter", "patient", "long", timeout=3 * hold_s, barrier=True, **options
    )
    held = children.event(long_holder, "held")
    children.release_together([impatient, patient])
    children.finish([long_holder, impatient, patient])

    [hold] = long_holder.records()
    assert hold["end"] - hold["start"] >= hold_s
    assert hold["held"] is True
    assert hold["lost"] is False
    assert hold["checks"] >= hold_s / 0.1 * 0.5  # proven all along, not just at the end
    assert hold["failed_checks"] == 0
    [gave_up] = impatient.records()
    assert gave_up["granted"] is False
    assert gave_up["gave_up"] < hold["end"]  # it timed out while the holder still held
    [admitted] = patient.records()
    assert admitted["start"] >= hold["end"]  # admitted only after the release
    assert admitted["fence"] > held["fence"]
    counters = lock.status().counters
    assert (counters.expired_holders, counters.lost_leases) == (0, 0)
    assert counters.grants_exclusive == 2


# -- regressions of defects found while writing these proofs ------------------------------


def test_the_wakeup_counter_counts_each_woken_waiter_once(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = Keys("defect").lock("wakeups")
    scripts = LockScripts(client, keys, policy="fair", wake_ttl_ms=60_000)
    owner = OwnerInfo().model_dump_json()

    def acquire(token: str, mode: Mode) -> bool:
        reply = scripts.acquire(
            token, mode, lease_ms=60_000, waiter_ttl_ms=60_000, may_enqueue=True, owner_json=owner
        )
        return reply.granted

    assert acquire("writer", "exclusive")
    assert not acquire("r1", "shared")
    assert not acquire("r2", "shared")
    scripts.release("writer")  # wakes r1 and r2: two wake-ups
    # Both readers wake (their BLPOPs take the signals); r2 re-checks first, reads, is done.
    assert client.lpop(keys.wake("r1")) == b"1"
    assert client.lpop(keys.wake("r2")) == b"1"
    assert acquire("r2", "shared")
    scripts.release("r2")  # r1, awake already, gets a second signal, counted
    assert acquire("r1", "shared")
    assert client.exists(keys.wake("r1")) == 0  # the grant dropped it: nobody woke twice
    counters = scripts.status().counters
    client.close()
    assert counters.wakeups == 2  # two waiters, each woken once
