"""The fair lock keeps FIFO order between a queued reader and the writers around it.

A reader queued ahead of a writer is granted before it when the lock is handed off, and a
writer that arrives while that reader waits does not barge past it. The scripts are driven one
call at a time against a real redis-server, so every interleaving is chosen, not raced for.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from executor.lock import LockTimeout, OwnerInfo, RWLock
from executor.lock._scripts import AcquireOutcome, AcquireReply, LockScripts, ReleaseOutcome
from executor.wire import Keys, LockKeys
from tests.support.waiting import wait_for

LONG = 60_000
OWNER = OwnerInfo(worker="w1", host="h", pid=7, call_id="c1", tool="t").model_dump_json()


@pytest.fixture
def keys() -> LockKeys:
    return Keys("tp").lock("pins")


@pytest.fixture
def scripts(client: redis.Redis, keys: LockKeys) -> LockScripts:
    return LockScripts(client, keys, policy="fair", wake_ttl_ms=LONG)


def _acquire(
    scripts: LockScripts, token: str, mode: str, *, enqueue: bool = True
) -> AcquireOutcome:
    reply: AcquireReply = scripts.acquire(
        token,
        "shared" if mode == "shared" else "exclusive",
        lease_ms=LONG,
        waiter_ttl_ms=LONG,
        may_enqueue=enqueue,
        owner_json=OWNER,
    )
    return reply.outcome


def _holders(scripts: LockScripts) -> list[str]:
    return sorted(holder.token for holder in scripts.status().holders)


def _signals(client: redis.Redis, keys: LockKeys, *tokens: str) -> dict[str, int]:
    return {token: int(client.llen(keys.wake(token))) for token in tokens}


def test_a_reader_queued_before_a_writer_is_granted_first_on_hand_off(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    assert _acquire(scripts, "x", "exclusive") is AcquireOutcome.GRANTED
    assert _acquire(scripts, "r", "shared") is AcquireOutcome.QUEUED
    assert _acquire(scripts, "w2", "exclusive") is AcquireOutcome.QUEUED

    assert scripts.release("x") is ReleaseOutcome.RELEASED
    # Only the reader is told it may go.
    assert _signals(client, keys, "r", "w2") == {"r": 1, "w2": 0}
    # The writer re-checks first (its bounded wait ended, say): it still waits for r.
    assert _acquire(scripts, "w2", "exclusive") is AcquireOutcome.QUEUED
    assert _holders(scripts) == []
    assert _acquire(scripts, "r", "shared") is AcquireOutcome.GRANTED
    assert _holders(scripts) == ["r"]
    assert _acquire(scripts, "w2", "exclusive") is AcquireOutcome.QUEUED

    # The writer's turn comes when the reader is done.
    assert scripts.release("r") is ReleaseOutcome.RELEASED
    assert _signals(client, keys, "w2") == {"w2": 1}
    assert _acquire(scripts, "w2", "exclusive") is AcquireOutcome.GRANTED
    assert _holders(scripts) == ["w2"]


def test_a_newcomer_writer_does_not_barge_past_a_waiting_reader(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    assert _acquire(scripts, "x", "exclusive") is AcquireOutcome.GRANTED
    assert _acquire(scripts, "r", "shared") is AcquireOutcome.QUEUED
    assert scripts.release("x") is ReleaseOutcome.RELEASED
    # The lock is free, r was signalled but has not re-checked yet: a writer arrives.
    assert _signals(client, keys, "r") == {"r": 1}
    assert _acquire(scripts, "late", "exclusive", enqueue=False) is AcquireOutcome.WOULD_WAIT
    assert _acquire(scripts, "late", "exclusive") is AcquireOutcome.QUEUED
    assert _holders(scripts) == []
    assert [waiter.token for waiter in scripts.status().queue] == ["r", "late"]

    assert _acquire(scripts, "r", "shared") is AcquireOutcome.GRANTED
    assert _acquire(scripts, "late", "exclusive") is AcquireOutcome.QUEUED
    scripts.release("r")
    assert _acquire(scripts, "late", "exclusive") is AcquireOutcome.GRANTED


def test_a_newcomer_writer_waits_for_a_reader_queued_behind_a_reader_batch(
    scripts: LockScripts,
) -> None:
    # A writer holds, r1 and r2 queue; r1 comes back first and reads; a writer that comes
    # while r2 still has not re-checked must wait for r2 too, not only for r1's release.
    assert _acquire(scripts, "x", "exclusive") is AcquireOutcome.GRANTED
    assert _acquire(scripts, "r1", "shared") is AcquireOutcome.QUEUED
    assert _acquire(scripts, "r2", "shared") is AcquireOutcome.QUEUED
    scripts.release("x")
    assert _acquire(scripts, "r1", "shared") is AcquireOutcome.GRANTED
    scripts.release("r1")
    assert _acquire(scripts, "late", "exclusive") is AcquireOutcome.QUEUED
    assert _acquire(scripts, "r2", "shared") is AcquireOutcome.GRANTED
    assert _holders(scripts) == ["r2"]


# -- the same order through RWLock, whose waiters block on their wake lists -------------------


@pytest.fixture
def rwlock(redis_url: str) -> Iterator[RWLock]:
    # A long re-check: a waiter moves only when a release signals it.
    made = RWLock.from_url(redis_url, scope="pins", keys=Keys("tp"), recheck_s=60.0)
    yield made
    made.close()


def test_rwlock_grants_the_queued_reader_before_the_queued_writer(rwlock: RWLock) -> None:
    holder = rwlock.acquire_exclusive(timeout=0)
    with ThreadPoolExecutor(max_workers=2) as pool:
        reading = pool.submit(rwlock.acquire_shared, 40)
        wait_for(lambda: len(rwlock.status().queue) == 1, what="the reader to queue")
        writing = pool.submit(rwlock.acquire_exclusive, 40)
        wait_for(lambda: len(rwlock.status().queue) == 2, what="the writer to queue")
        assert [w.mode for w in rwlock.status().queue] == ["shared", "exclusive"]

        holder.release()
        reader = reading.result(timeout=30)
        status = rwlock.status()
        assert [h.token for h in status.holders] == [reader.token]
        assert [w.mode for w in status.queue] == ["exclusive"]
        assert not writing.done()
        # A writer that only tries does not get past the one queued either.
        with pytest.raises(LockTimeout):
            rwlock.acquire_exclusive(timeout=0)

        reader.release()
        writer = writing.result(timeout=30)
        assert writer.held
        writer.release()
