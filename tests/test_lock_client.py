"""RWLock, Lease and LeaseKeeper against a real redis-server: waiting, signals, leases, loss, CLI.

Waiters run in threads of this process; the multi-process proofs live elsewhere. Where a test
needs time to pass (leases, deadlines) it waits for a condition with a deadline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor import ConfigurationError, FenceError
from executor.cli._common import EXIT_REDIS
from executor.cli._lock import lock as lock_cli
from executor.contract import ToolContext, Workspace
from executor.lock import Lease, LockError, LockTimeout, LockUnavailable, OwnerInfo, RWLock
from executor.lock._keeper import LeaseKeeper
from executor.lock._scripts import script_source
from executor.wire import Keys
from tests.support.waiting import wait_for
from workers._embedded_redis import RedisServer

MakeLock = Callable[..., RWLock]


def _client(url: str, **kwargs: Any) -> redis.Redis:
    kwargs.setdefault("socket_timeout", 10.0)
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    return redis.Redis.from_url(url, **kwargs)


@pytest.fixture
def keeper() -> Iterator[LeaseKeeper]:
    # A name of its own: an earlier test's keeper may still be ending (its close waits at most
    # 5 s for a renewal under way), and a test that counts this keeper's threads must not see it.
    own = LeaseKeeper(name=f"test-lease-keeper-{uuid.uuid4().hex[:8]}")
    yield own
    own.close()


@pytest.fixture
def make_lock(redis_url: str, keeper: LeaseKeeper) -> Iterator[MakeLock]:
    clients: list[redis.Redis] = []

    def make(
        url: str = redis_url, client_options: dict[str, Any] | None = None, **options: Any
    ) -> RWLock:
        client = _client(url, **(client_options or {}))
        clients.append(client)
        options.setdefault("keeper", keeper)
        return RWLock(client, **options)

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=12) as executor:
        yield executor


def queued(lock: RWLock, count: int) -> Callable[[], bool]:
    return lambda: len(lock.status().queue) == count


# -- holding and waiting ----------------------------------------------------------------


def test_context_manager_releases_and_release_says_whether_it_held(make_lock: MakeLock) -> None:
    lock = make_lock()
    with lock.acquire("exclusive") as lease:
        assert lease.held
        assert lock.status().holders[0].token == lease.token
    assert lease.released
    assert lock.status().holders == ()
    assert lease.release() is False  # released already

    other = lock.acquire("shared")
    assert other.release() is True


def test_readers_share_and_keep_writers_out(make_lock: MakeLock) -> None:
    lock = make_lock()
    readers = [lock.acquire_shared(timeout=1) for _ in range(5)]
    assert len(lock.status().holders) == 5
    with pytest.raises(LockTimeout):
        lock.acquire_exclusive(timeout=0)
    for lease in readers:
        assert lease.release()
    assert lock.acquire_exclusive(timeout=0).release()


def test_a_waiter_is_granted_on_release_through_one_signal(
    make_lock: MakeLock, pool: ThreadPoolExecutor
) -> None:
    # A 5 s re-check bound: a grant within 2 s can only come from the signal.
    lock = make_lock(recheck_s=5.0)
    holder = lock.acquire("exclusive")
    waiting = pool.submit(lock.acquire, "exclusive", 10)
    wait_for(queued(lock, 1), what="the waiter to queue")

    released_at = time.monotonic()
    holder.release()
    lease = waiting.result(timeout=2.0)

    assert time.monotonic() - released_at < 2.0
    assert lease.signals == 1
    assert lease.fence is not None
    assert holder.fence is not None
    assert lease.fence > holder.fence
    assert lock.status().counters.wakeups == 1
    lease.release()


class _CountingRider:
    """A rider that counts its tries in Redis: each try's reply is the count so far."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.read_replies: list[object] = []

    def queue(self, pipe: redis.client.Pipeline) -> None:
        pipe.incr(self.key)

    def read(self, reply: object) -> None:
        self.read_replies.append(reply)


def test_a_rider_goes_with_every_try_and_its_last_reply_is_the_grants(
    make_lock: MakeLock, pool: ThreadPoolExecutor, client: redis.Redis
) -> None:
    lock = make_lock()
    lock.acquire("shared", timeout=0).release()  # the scripts loaded: no try is sent twice
    alone = _CountingRider("rider:alone")
    lock.acquire("shared", timeout=0, rider=alone).release()
    assert alone.read_replies == [1]  # granted at once: one try, in the grant's round trip

    holder = lock.acquire("exclusive")
    rider = _CountingRider("rider:waiting")
    waiting = pool.submit(lock.acquire, "exclusive", 30, rider=rider)
    wait_for(queued(lock, 1), what="the waiter to queue")
    holder.release()
    lease = waiting.result(timeout=30)
    # Oracle: Redis counted one INCR per try, and the reply read last is the last try's: the
    # try that was granted.
    tries = int(client.get("rider:waiting") or 0)
    assert tries >= 2
    assert rider.read_replies == list(range(1, tries + 1))
    lease.release()


def test_queued_writers_drain_with_one_wakeup_per_hand_off(
    make_lock: MakeLock, pool: ThreadPoolExecutor
) -> None:
    lock = make_lock(recheck_s=5.0)
    writers = 8

    def take_and_give_back() -> Lease:
        lease = lock.acquire("exclusive", timeout=20)
        lease.release()
        return lease

    holder = lock.acquire("exclusive")
    futures = [pool.submit(take_and_give_back) for _ in range(writers)]
    wait_for(queued(lock, writers), what="every writer to queue")
    holder.release()
    leases = [f.result(timeout=10) for f in futures]

    counters = lock.status().counters
    assert counters.wakeups == writers
    assert sum(lease.signals for lease in leases) == writers
    assert counters.grants_exclusive == writers + 1
    fences = sorted(lease.fence or 0 for lease in leases)
    assert len(set(fences)) == writers


def test_a_timeout_leaves_the_queue(make_lock: MakeLock) -> None:
    lock = make_lock(recheck_s=0.1)
    holder = lock.acquire("exclusive")
    started = time.monotonic()
    with pytest.raises(LockTimeout, match="No exclusive grant"):
        lock.acquire("exclusive", timeout=0.3)
    assert time.monotonic() - started >= 0.3
    with pytest.raises(LockTimeout):
        lock.acquire("shared", timeout=0)
    status = lock.status()
    assert status.queue == ()
    assert status.counters.cancels == 1  # timeout=0 never queued
    holder.release()


def test_a_timed_out_head_writer_wakes_the_readers_behind_it(
    make_lock: MakeLock, pool: ThreadPoolExecutor
) -> None:
    lock = make_lock(recheck_s=5.0)
    reader = lock.acquire("shared")
    writer = pool.submit(lock.acquire, "exclusive", 0.6)
    wait_for(queued(lock, 1), what="the writer to queue")
    late_reader = pool.submit(lock.acquire, "shared", 10)
    wait_for(queued(lock, 2), what="the late reader to queue behind the writer")

    with pytest.raises(LockTimeout):
        writer.result(timeout=3)
    given_up_at = time.monotonic()
    lease = late_reader.result(timeout=2)

    assert time.monotonic() - given_up_at < 2.0  # far below the 5 s re-check bound
    assert lease.signals == 1
    assert {h.token for h in lock.status().holders} == {reader.token, lease.token}


def test_a_lost_wake_signal_still_ends_in_a_grant_within_the_recheck_bound(
    make_lock: MakeLock, pool: ThreadPoolExecutor, redis_url: str
) -> None:
    recheck = 0.5
    lock = make_lock(recheck_s=recheck)
    holder = lock.acquire("exclusive", keep_alive=False)
    waiting: Future[Lease] = pool.submit(lock.acquire, "exclusive", 10, token="waiter-1")
    probe = _client(redis_url)
    wait_for(
        lambda: probe.info("clients")["blocked_clients"] == 1, what="the waiter to block on BLPOP"
    )

    # Release and delete the signal in one transaction: the blocked waiter never sees it.
    release = probe.register_script(script_source("release"))
    with probe.pipeline(transaction=True) as pipe:
        args: list[str | int] = [
            "fair",
            lock.keys.wake_prefix,
            lock.waiter_ttl_ms,
            holder.token,
            "release",
        ]
        release(keys=lock.keys.script_keys(), args=args, client=pipe)
        pipe.delete(lock.keys.wake("waiter-1"))
        assert pipe.execute() == [1, 1]
    released_at = time.monotonic()

    lease = waiting.result(timeout=recheck + 2.0)
    assert time.monotonic() - released_at <= recheck + 0.3
    assert lease.signals == 0  # granted by the re-check, not by a signal
    assert lock.status().counters.wakeups == 1
    probe.close()


def test_acquiring_again_with_the_same_token_is_idempotent(make_lock: MakeLock) -> None:
    lock = make_lock()
    first = lock.acquire("exclusive", token="call-7")
    again = lock.acquire("exclusive", token="call-7", keep_alive=False)
    assert again.fence == first.fence
    assert lock.status().counters.grants_exclusive == 1
    with pytest.raises(LockError, match="other mode"):
        lock.acquire("shared", token="call-7", timeout=1)
    assert first.release()


# -- leases -------------------------------------------------------------------------------


def test_the_heartbeat_keeps_a_lease_alive_across_several_lease_periods(
    make_lock: MakeLock, keeper: LeaseKeeper
) -> None:
    lease_ms = 300
    lock = make_lock(lease_ms=lease_ms, recheck_s=0.1)
    rival = make_lock(lease_ms=lease_ms, recheck_s=0.1)
    lease = lock.acquire("exclusive")
    assert keeper.lease_count == 1

    periods_over = time.monotonic() + 5 * lease_ms / 1000
    while time.monotonic() < periods_over:
        with pytest.raises(LockTimeout):
            rival.acquire("exclusive", timeout=0)
        assert lease.held
        time.sleep(0.05)

    assert lease.check_fence()
    counters = lock.status().counters
    assert (counters.expired_holders, counters.lost_leases) == (0, 0)
    assert lease.release() is True
    assert keeper.lease_count == 0


def test_without_keep_alive_a_lease_ends_and_is_not_revived(make_lock: MakeLock) -> None:
    lock = make_lock(lease_ms=300, recheck_s=0.1)
    lease = lock.acquire("exclusive", keep_alive=False)
    wait_for(lambda: lock.status().holders == (), what="the lease to expire")
    assert lease.lost
    assert lease.renew() is False
    assert lease.release() is False
    assert lock.status().holders == ()


def test_loss_is_loud_when_the_lease_is_force_released(
    make_lock: MakeLock, keeper: LeaseKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    lock = make_lock(lease_ms=600, recheck_s=0.2)
    lease = lock.acquire("exclusive")
    seen: list[Lease] = []
    lease.on_lost(seen.append)

    with caplog.at_level(logging.WARNING, logger="executor.lock"):
        assert lock.force_release(lease.token) is True
        assert lease.lost_event.wait(3.0), "the holder never noticed"

    assert seen == [lease]
    assert lease.lost
    assert not lease.held
    assert lease.lost_reason is not None
    assert "gone" in lease.lost_reason
    assert any("Lost the exclusive lease" in r.message for r in caplog.records)
    # flush() returns once Redis has been told (the shared keeper does it at exit).
    assert keeper.flush(timeout=5.0)
    assert keeper.pending_reports == 0
    counters = lock.status().counters
    assert (counters.forced_releases, counters.lost_leases) == (1, 1)
    with pytest.raises(FenceError, match="lost the exclusive lock"):
        lease.assert_fenced()
    assert lease.release() is False
    late: list[Lease] = []
    lease.on_lost(late.append)  # registered after the loss: called at once
    assert late == [lease]


def test_loss_is_loud_when_redis_stops(keeper: LeaseKeeper) -> None:
    with RedisServer() as server:
        client = server.client(socket_timeout=0.3, retries=0)
        lock = RWLock(client, lease_ms=600, recheck_s=0.1, keeper=keeper)
        lease = lock.acquire("exclusive")
        lost = threading.Event()
        lease.on_lost(lambda _: lost.set())
        stopped_at = time.monotonic()
        server.stop()

        assert lost.wait(3.0), "the holder never noticed"
        # Not before the lease could have ended, not long after.
        assert 0.3 <= time.monotonic() - stopped_at <= 1.5
        assert lease.lost_reason is not None
        assert "unreachable" in lease.lost_reason
        with pytest.raises(FenceError):
            lease.assert_fenced()
        client.close()


def test_a_hung_redis_loses_the_lease_and_the_loss_is_counted_when_it_answers(
    keeper: LeaseKeeper,
) -> None:
    with RedisServer() as server:
        lock = RWLock.from_url(server.url, lease_ms=600, recheck_s=0.1, keeper=keeper)
        lease = lock.acquire("exclusive")
        server.pause()
        paused_at = time.monotonic()
        try:
            assert lease.lost_event.wait(3.0), "the holder never noticed"
            # from_url's timeouts let the keeper notice about when the lease runs out.
            assert time.monotonic() - paused_at <= 1.2
        finally:
            server.resume()
        wait_for(lambda: keeper.pending_reports == 0, what="the loss to be reported")
        counters = lock.status().counters
        assert counters.lost_leases == 1
        assert lock.status().holders == ()
        lock.close()


def test_a_lock_from_a_url_waits_and_hands_off(
    redis_url: str, keeper: LeaseKeeper, pool: ThreadPoolExecutor
) -> None:
    lock = RWLock.from_url(redis_url, scope="from-url", recheck_s=3.0, keeper=keeper)
    holder = lock.acquire_exclusive()
    waiting = pool.submit(lock.acquire_shared, 10)
    wait_for(queued(lock, 1), what="the reader to queue")
    holder.release()
    lease = waiting.result(timeout=2.0)
    assert lease.signals == 1
    assert lease.release()
    lock.close()


def test_a_lock_from_a_url_gives_up_connecting_within_a_sixth_of_the_lease(
    redis_url: str, keeper: LeaseKeeper
) -> None:
    # redis-py's own connect timeout (5 s) would hold a renewal on a link that drops packets
    # silently past a 3 s lease: the loss would be declared seconds late (found with a host
    # cut off in a network namespace).
    lock = RWLock.from_url(redis_url, lease_ms=3000, keeper=keeper)
    try:
        for client in (lock.redis, lock.blocking_redis):
            assert client.connection_pool.connection_kwargs["socket_connect_timeout"] == 0.5
        assert lock.redis.connection_pool.connection_kwargs["socket_timeout"] == 0.5
    finally:
        lock.close()


def test_the_fence_guards_a_tool_context(make_lock: MakeLock, tmp_path: Path) -> None:
    lock = make_lock()
    lease = lock.acquire("exclusive")
    ctx = ToolContext(workspace=Workspace(tmp_path), fence=lease.assert_fenced)
    ctx.check_fence()  # held: passes
    lock.force_release(lease.token)
    with pytest.raises(FenceError, match="The write was not committed"):
        ctx.check_fence()
    assert lease.lost


def test_a_shared_lease_may_not_commit_a_write(make_lock: MakeLock) -> None:
    lock = make_lock()
    with lock.acquire("shared") as lease, pytest.raises(FenceError, match="shared"):
        lease.assert_fenced()


def test_one_keeper_thread_renews_every_lease(make_lock: MakeLock, keeper: LeaseKeeper) -> None:
    leases = [make_lock(scope=f"s{i}").acquire("exclusive") for i in range(3)]
    leases.append(make_lock(scope="s3").acquire("shared"))
    assert keeper.lease_count == 4
    threads = [t for t in threading.enumerate() if t.name == keeper.name]
    assert len(threads) == 1
    for lease in leases:
        lease.release()
    assert keeper.lease_count == 0


def test_the_default_keeper_is_one_per_process(redis_url: str) -> None:
    client = _client(redis_url)
    assert RWLock(client).keeper is LeaseKeeper.shared()
    assert LeaseKeeper.shared() is LeaseKeeper.shared()
    client.close()


# -- errors -------------------------------------------------------------------------------


def test_an_unreachable_redis_raises_lock_unavailable(keeper: LeaseKeeper) -> None:
    server = RedisServer().start()
    url = server.url
    server.stop()
    client = _client(url)
    lock = RWLock(client, recheck_s=0.1, keeper=keeper)
    with pytest.raises(LockUnavailable, match="Could not reach Redis"):
        lock.acquire("exclusive", timeout=0.3)
    client.close()


def test_bad_settings_are_refused(redis_url: str) -> None:
    short = _client(redis_url, socket_timeout=1.0)
    with pytest.raises(ConfigurationError, match="socket_timeout"):
        RWLock(short, recheck_s=1.0)
    client = _client(redis_url)
    with pytest.raises(ConfigurationError, match="waiter_ttl_ms"):
        RWLock(client, recheck_s=1.0, waiter_ttl_ms=1000)
    with pytest.raises(ConfigurationError, match="policy"):
        RWLock(client, policy="unfair")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lock scope"):
        RWLock(client, scope="a{b}")
    lock = RWLock(client)
    with pytest.raises(ValueError, match="lease token"):
        lock.acquire("exclusive", token="has space")
    with pytest.raises(ValueError, match="lock mode"):
        lock.acquire("upgrade")  # type: ignore[arg-type]
    assert lock.status().queue == ()
    short.close()
    client.close()


# -- observability and the CLI ----------------------------------------------------------


def test_status_shows_who_holds_and_who_waits(
    make_lock: MakeLock, pool: ThreadPoolExecutor
) -> None:
    lock = make_lock(lease_ms=5000)
    owner = OwnerInfo.current(worker="worker-3", call_id="call_1", tool="write_file")
    holder = lock.acquire("exclusive", owner=owner)
    waiting = pool.submit(lock.acquire, "shared", 10, owner=OwnerInfo.current(tool="read_file"))
    wait_for(queued(lock, 1), what="the reader to queue")

    status = lock.status()
    [held] = status.holders
    assert (held.token, held.mode, held.fence) == (holder.token, "exclusive", holder.fence)
    assert held.owner == owner
    assert held.owner.pid > 0
    assert held.owner.host
    assert 0 < held.remaining_ms <= 5000
    [waiter] = status.queue
    assert (waiter.mode, waiter.position, waiter.owner.tool) == ("shared", 1, "read_file")
    assert waiter.age_ms >= 0
    holder.release()
    waiting.result(timeout=5).release()
    counters = lock.status().counters
    assert (counters.grants_exclusive, counters.grants_shared, counters.releases) == (1, 1, 2)


def test_cli_status_shows_holders_and_queue(make_lock: MakeLock, redis_url: str) -> None:
    lock = make_lock()
    holder = lock.acquire("exclusive", owner=OwnerInfo.current(tool="edit_file"))
    runner = CliRunner()

    shown = runner.invoke(lock_cli, ["status"], env={"TOOLPOOL_REDIS_URL": redis_url})
    assert shown.exit_code == 0, shown.output
    assert "held exclusive by 1" in shown.output
    assert holder.token in shown.output
    assert "tool=edit_file" in shown.output

    as_json = runner.invoke(lock_cli, ["status", "--redis", redis_url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert data["holders"][0]["fence"] == holder.fence

    other_scope = runner.invoke(lock_cli, ["status", "--redis", redis_url, "--scope", "other"])
    assert "free" in other_scope.output
    holder.release()


def test_cli_release_ends_a_lease_and_its_holder_notices(
    make_lock: MakeLock, redis_url: str
) -> None:
    lock = make_lock(lease_ms=600, recheck_s=0.2, keys=Keys("ops"), scope="ws1")
    lease = lock.acquire("exclusive")
    runner = CliRunner()
    args = ["release", "--redis", redis_url, "--prefix", "ops", "--scope", "ws1"]

    ended = runner.invoke(lock_cli, [*args, "--token", lease.token])
    assert ended.exit_code == 0, ended.output
    assert f"Released token {lease.token}" in ended.output
    assert lease.lost_event.wait(3.0)

    again = runner.invoke(lock_cli, [*args, "--token", lease.token])
    assert again.exit_code == 1
    assert "nothing changed" in again.output


def test_cli_needs_a_redis_url_and_says_when_it_cannot_reach_it(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(lock_cli, ["status"], env={"TOOLPOOL_REDIS_URL": None})
    assert missing.exit_code == 2
    assert "--redis" in missing.output
    gone = f"unix://{tmp_path / 'no.sock'}"
    unreachable = runner.invoke(lock_cli, ["status", "--redis", gone])
    assert unreachable.exit_code == EXIT_REDIS
    assert f"Cannot reach Redis at {gone}: " in unreachable.output
