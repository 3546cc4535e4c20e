"""The lock across a failover: acknowledged grants and renewals, and fences with epochs.

A real primary and replica (``tests/support/replica.py``); the failover is the replica's
promotion (``REPLICAOF NO ONE``), which gives it a new replication id, as Sentinel's does.
Oracles: a grant no replica holds is never handed out; a lease whose renewals no replica
acknowledged is declared lost at its local deadline although the primary still renews it;
after the promotion a holder granted before it is answered lost, the next fence is higher
than every fence before (even when the old primary's epoch ran ahead of the new primary's
clock), and a stale holder stops blocking within one lease without any release.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from executor.lock import EXCLUSIVE, LockTimeout, LockUnavailable, RWLock
from executor.lock._keeper import LeaseKeeper
from executor.lock._models import fence_parts
from executor.lock._scripts import AcquireOutcome, RenewOutcome
from executor.wire import Acks, Keys
from executor.wire._acks import NotAcknowledged
from tests.support.replica import Pair, primary_and_replica

LEASE_MS = 1500


@pytest.fixture
def pair() -> Iterator[Pair]:
    with primary_and_replica() as started:
        yield started


@pytest.fixture
def keeper() -> Iterator[LeaseKeeper]:
    own = LeaseKeeper("test-keeper")
    yield own
    own.close()


_LOCKS: list[RWLock] = []


def _lock(url: str, keeper: LeaseKeeper, replicas: int = 1) -> RWLock:
    """A lock with clients of its own, closed at the end of the module's test."""
    acks = Acks(replicas=replicas, wait_ms=200, marker=Keys().ack_marker)
    lock = RWLock.from_url(url, lease_ms=LEASE_MS, recheck_s=0.2, keeper=keeper, acks=acks)
    _LOCKS.append(lock)
    return lock


@pytest.fixture(autouse=True)
def _close_locks() -> Iterator[None]:
    yield
    while _LOCKS:
        _LOCKS.pop().close()


def test_confirm_and_scripts_fail_loudly_while_no_replica_acknowledges(pair: Pair) -> None:
    acks = Acks(replicas=1, wait_ms=100, marker=Keys().ack_marker)
    client = pair.client(pair.primary)
    acks.confirm(client, "a test write")  # the replica is up: acknowledged
    with pair.replica_paused(), pytest.raises(NotAcknowledged) as raised:
        acks.confirm(client, "a test write")
    assert isinstance(raised.value, redis.ConnectionError)  # an outage, to every caller
    assert "0 of 1 replicas acknowledged a test write within 100 ms" in str(raised.value)
    # Two replicas asked of one: never enough.
    with pytest.raises(NotAcknowledged, match="1 of 2 replicas"):
        Acks(replicas=2, wait_ms=50, marker=Keys().ack_marker).confirm(client, "a test write")


def test_a_grant_no_replica_holds_is_not_handed_out(pair: Pair, keeper: LeaseKeeper) -> None:
    lock = _lock(pair.primary.url, keeper)
    with pair.replica_paused(), pytest.raises((LockUnavailable, LockTimeout)):
        lock.acquire(EXCLUSIVE, timeout=1.0)
    # Nothing was used, and what the primary granted was let go: the lock is free again.
    pair.wait_synced()
    lease = lock.acquire(EXCLUSIVE, timeout=5.0)
    assert lease.held
    lease.release()


def test_renewals_no_replica_acknowledged_do_not_extend_the_lease(
    pair: Pair, keeper: LeaseKeeper
) -> None:
    lock = _lock(pair.primary.url, keeper)
    lease = lock.acquire(EXCLUSIVE, timeout=5.0)
    lost_at: list[float] = []
    lease.on_lost(lambda _lease: lost_at.append(time.monotonic()))
    with pair.replica_paused():
        paused_at = time.monotonic()
        assert lease.lost_event.wait(LEASE_MS / 1000 * 10), "the lease was never declared lost"
        # The primary itself renewed it meanwhile: only the missing acknowledgements ended it.
        holders = RWLock(pair.client(pair.primary)).status().holders
        assert [h.token for h in holders] == [lease.token]
    assert lost_at
    assert lost_at[0] - paused_at <= LEASE_MS / 1000 + 5.0
    assert lease.lost_reason is not None
    assert "ran out" in lease.lost_reason  # at its local deadline, not found gone


def test_after_a_promotion_old_holders_are_lost_and_fences_rise(
    pair: Pair, keeper: LeaseKeeper
) -> None:
    old = _lock(pair.primary.url, keeper)
    # The old primary's epoch far ahead of any clock (as if its clock were hours ahead).
    old.status()  # a first script: the epoch hash exists
    keys = Keys().lock("global")
    pair.client(pair.primary).hset(
        keys.epoch, "epoch", fence_parts(old.status().last_fence)[0] + 10**6
    )
    held = old.acquire(EXCLUSIVE, timeout=5.0, keep_alive=False)
    assert held.fence is not None
    pair.wait_synced()

    pair.promote()
    new = _lock(pair.replica.url, keeper, replicas=0)
    # The grant was acknowledged, so the new primary knows it: nobody else may enter...
    with pytest.raises(LockTimeout):
        new.acquire(EXCLUSIVE, timeout=0)
    # ...but its holder is told at its next renewal and fence check that it lost the lease.
    assert new.scripts.renew(held.token, LEASE_MS) is RenewOutcome.LOST
    assert not new.check_fence(held.token, held.fence)
    again = new.scripts.acquire(
        held.token,
        EXCLUSIVE,
        lease_ms=LEASE_MS,
        waiter_ttl_ms=2000,
        may_enqueue=False,
        owner_json="{}",
    )
    assert again.outcome is AcquireOutcome.STALE
    # At least the fresh primary's first epoch and the promoted replica's.
    assert new.status().counters.epochs >= 2

    # Its holder reports the loss: the lock is free, and the next fence is higher, from a
    # higher epoch, though the new primary's clock is far behind the old epoch.
    new.scripts.release(held.token, "lost")
    lease = new.acquire(EXCLUSIVE, timeout=5.0, keep_alive=False)
    assert lease.fence is not None
    assert lease.fence > held.fence
    assert fence_parts(lease.fence)[0] > fence_parts(held.fence)[0]
    lease.release()


def test_a_stale_holder_stops_blocking_within_a_lease_of_the_promotion(
    pair: Pair, keeper: LeaseKeeper
) -> None:
    old = _lock(pair.primary.url, keeper)
    held = old.acquire(EXCLUSIVE, timeout=5.0, keep_alive=False)
    # Renewed far ahead: a lease the new primary must not wait for in full.
    old.scripts.renew(held.token, 600_000)
    pair.wait_synced()
    pair.primary.pause()  # the old primary is gone for good; its holder never releases
    try:
        pair.promote()
        new = _lock(pair.replica.url, keeper, replicas=0)
        started = time.monotonic()
        granted = threading.Event()

        def take() -> None:
            with new.acquire(EXCLUSIVE, timeout=LEASE_MS / 1000 * 20):
                granted.set()

        taker = threading.Thread(target=take)
        taker.start()
        taker.join(LEASE_MS / 1000 * 25)
        assert granted.is_set()
        # Cut to one lease at the bump, whatever was renewed before.
        assert time.monotonic() - started < LEASE_MS / 1000 * 20
        assert new.status().counters.expired_holders == 1
    finally:
        pair.primary.resume()
