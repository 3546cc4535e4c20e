"""The lock's Lua scripts, one call at a time, against a real redis-server.

These tests drive ``LockScripts`` directly (no threads, no waiting loop) and inspect the Redis
keys themselves: who holds, who is queued, which wake lists got a signal.
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from executor.lock import LockProtocolError, OwnerInfo, Policy
from executor.lock._scripts import (
    SCRIPT_NAMES,
    AcquireOutcome,
    AcquireReply,
    CancelOutcome,
    LockScripts,
    ReleaseOutcome,
    RenewOutcome,
    decode_outcome,
    script_source,
)
from executor.wire import Keys, LockKeys
from workers._embedded_redis import RedisServer

LONG = 60_000
OWNER = OwnerInfo(worker="w1", host="h", pid=7, call_id="c1", tool="write_file").model_dump_json()


@pytest.fixture
def keys() -> LockKeys:
    return Keys("tp").lock("s1")


def _scripts(client: redis.Redis, keys: LockKeys, policy: Policy = "fair") -> LockScripts:
    return LockScripts(client, keys, policy=policy, wake_ttl_ms=LONG)


@pytest.fixture
def scripts(client: redis.Redis, keys: LockKeys) -> LockScripts:
    return _scripts(client, keys)


def acquire(
    scripts: LockScripts,
    token: str,
    mode: str,
    *,
    lease_ms: int = LONG,
    ttl_ms: int = LONG,
    enqueue: bool = True,
) -> AcquireReply:
    assert mode in ("shared", "exclusive")
    return scripts.acquire(
        token,
        "shared" if mode == "shared" else "exclusive",
        lease_ms=lease_ms,
        waiter_ttl_ms=ttl_ms,
        may_enqueue=enqueue,
        owner_json=OWNER,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def holders(client: redis.Redis, keys: LockKeys) -> set[str]:
    return {_text(t) for t in client.zrange(keys.holders, 0, -1)}


def queue(client: redis.Redis, keys: LockKeys) -> list[str]:
    return [_text(t) for t in client.zrange(keys.queue, 0, -1)]


def signalled(client: redis.Redis, keys: LockKeys, *tokens: str) -> dict[str, int]:
    return {t: int(client.llen(keys.wake(t))) for t in tokens}


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_server_past(client: redis.Redis, moment_ms: float, limit_s: float = 5.0) -> None:
    """Wait until the Redis server clock has passed ``moment_ms``."""
    deadline = time.monotonic() + limit_s
    while server_ms(client) <= moment_ms:
        assert time.monotonic() < deadline, "the server clock did not reach the moment"
        time.sleep(0.01)


def test_exclusive_excludes_exclusive(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    first = acquire(scripts, "a", "exclusive")
    second = acquire(scripts, "b", "exclusive")
    assert first.outcome is AcquireOutcome.GRANTED
    assert second.outcome is AcquireOutcome.QUEUED
    assert second.value == 1
    assert holders(client, keys) == {"a"}
    assert queue(client, keys) == ["b"]


def test_shared_shares_and_carries_no_fence(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    replies = [acquire(scripts, t, "shared") for t in ("r1", "r2", "r3")]
    assert [r.outcome for r in replies] == [AcquireOutcome.GRANTED] * 3
    assert [r.value for r in replies] == [0, 0, 0]
    assert holders(client, keys) == {"r1", "r2", "r3"}


def test_shared_waits_for_an_exclusive_holder_and_exclusive_for_readers(
    scripts: LockScripts,
) -> None:
    assert acquire(scripts, "w", "exclusive").outcome is AcquireOutcome.GRANTED
    assert acquire(scripts, "r", "shared").outcome is AcquireOutcome.QUEUED
    other = _scripts(scripts.client, Keys("tp").lock("s2"))
    assert acquire(other, "r", "shared").outcome is AcquireOutcome.GRANTED
    assert acquire(other, "w", "exclusive").outcome is AcquireOutcome.QUEUED


def test_a_queued_writer_blocks_later_readers(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    assert acquire(scripts, "r1", "shared").outcome is AcquireOutcome.GRANTED
    assert acquire(scripts, "w", "exclusive").outcome is AcquireOutcome.QUEUED
    late = acquire(scripts, "r2", "shared")
    assert late.outcome is AcquireOutcome.QUEUED
    assert late.value == 2
    assert holders(client, keys) == {"r1"}
    assert queue(client, keys) == ["w", "r2"]


def test_read_preferring_lets_later_readers_pass_a_queued_writer(
    client: redis.Redis, keys: LockKeys
) -> None:
    seed_like = _scripts(client, keys, policy="read_preferring")
    assert acquire(seed_like, "r1", "shared").outcome is AcquireOutcome.GRANTED
    assert acquire(seed_like, "w", "exclusive").outcome is AcquireOutcome.QUEUED
    assert acquire(seed_like, "r2", "shared").outcome is AcquireOutcome.GRANTED
    assert holders(client, keys) == {"r1", "r2"}


def test_release_signals_the_head_writer_only(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "x", "exclusive")
    for token in ("w1", "w2", "r1"):
        acquire(scripts, token, "exclusive" if token.startswith("w") else "shared")
    assert signalled(client, keys, "w1", "w2", "r1") == {"w1": 0, "w2": 0, "r1": 0}

    assert scripts.release("x") is ReleaseOutcome.RELEASED

    assert signalled(client, keys, "w1", "w2", "r1") == {"w1": 1, "w2": 0, "r1": 0}
    assert 0 < client.pttl(keys.wake("w1")) <= LONG
    assert scripts.status().counters.wakeups == 1
    assert acquire(scripts, "w1", "exclusive").outcome is AcquireOutcome.GRANTED
    # The grant consumed the waiter's wake list.
    assert client.exists(keys.wake("w1")) == 0


def test_release_signals_the_reader_batch_before_the_first_writer(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "x", "exclusive")
    for token, mode in (("r1", "shared"), ("r2", "shared"), ("w", "exclusive"), ("r3", "shared")):
        assert acquire(scripts, token, mode).outcome is AcquireOutcome.QUEUED
    everyone = ("r1", "r2", "w", "r3")

    scripts.release("x")
    assert signalled(client, keys, *everyone) == {"r1": 1, "r2": 1, "w": 0, "r3": 0}
    assert acquire(scripts, "r1", "shared").outcome is AcquireOutcome.GRANTED
    assert acquire(scripts, "r2", "shared").outcome is AcquireOutcome.GRANTED
    assert acquire(scripts, "r3", "shared").outcome is AcquireOutcome.QUEUED

    scripts.release("r1")  # r2 still reads: nobody can go yet
    assert signalled(client, keys, "w", "r3") == {"w": 0, "r3": 0}
    scripts.release("r2")
    assert signalled(client, keys, "w", "r3") == {"w": 1, "r3": 0}
    assert acquire(scripts, "w", "exclusive").outcome is AcquireOutcome.GRANTED
    scripts.release("w")
    assert signalled(client, keys, "r3") == {"r3": 1}
    assert scripts.status().counters.wakeups == 4


def test_a_waiter_never_holds_two_signals(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "x", "exclusive")
    acquire(scripts, "w1", "exclusive")
    short = acquire(scripts, "w2", "exclusive", ttl_ms=200)
    scripts.release("x")
    assert signalled(client, keys, "w1") == {"w1": 1}

    # w2 dies; pruning it frees nothing new for w1, whose signal is already waiting.
    wait_server_past(client, short.server_time_ms + 200)
    status = scripts.status()
    assert [w.token for w in status.queue] == ["w1"]
    assert status.counters.expired_waiters == 1
    assert signalled(client, keys, "w1") == {"w1": 1}
    assert status.counters.wakeups == 1


def test_acquire_again_with_the_same_token_is_idempotent(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    first = acquire(scripts, "a", "exclusive", lease_ms=1000)
    again = acquire(scripts, "a", "exclusive", lease_ms=LONG)
    assert again.outcome is AcquireOutcome.ALREADY_HELD
    assert again.value == first.value
    # The retried acquire renewed the lease.
    assert client.zscore(keys.holders, "a") == again.server_time_ms + LONG

    queued = acquire(scripts, "b", "exclusive")
    requeued = acquire(scripts, "b", "exclusive")
    assert (queued.outcome, requeued.outcome) == (AcquireOutcome.QUEUED,) * 2
    assert queue(client, keys) == ["b"]
    status = scripts.status()
    assert status.counters.grants_exclusive == 1
    assert status.last_fence == first.value


def test_the_other_mode_with_a_used_token_is_a_conflict(scripts: LockScripts) -> None:
    acquire(scripts, "a", "exclusive")
    acquire(scripts, "b", "shared")
    assert acquire(scripts, "a", "shared").outcome is AcquireOutcome.MODE_CONFLICT
    assert acquire(scripts, "b", "exclusive").outcome is AcquireOutcome.MODE_CONFLICT


def test_try_acquire_does_not_queue(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "a", "exclusive")
    reply = acquire(scripts, "b", "shared", enqueue=False)
    assert reply.outcome is AcquireOutcome.WOULD_WAIT
    assert queue(client, keys) == []


def test_release_by_a_non_holder_changes_nothing(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "a", "exclusive")
    acquire(scripts, "b", "exclusive")
    before = {k: client.dump(k) for k in keys.script_keys() if client.exists(k)}

    assert scripts.release("nobody") is ReleaseOutcome.NOT_HELD
    assert scripts.release("b") is ReleaseOutcome.NOT_HELD  # a waiter is not a holder

    after = {k: client.dump(k) for k in keys.script_keys() if client.exists(k)}
    assert after == before
    assert holders(client, keys) == {"a"}
    assert signalled(client, keys, "b") == {"b": 0}


def test_a_renewal_never_revives_an_expired_lease(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    granted = acquire(scripts, "a", "exclusive", lease_ms=300)
    assert scripts.renew("a", 300) is RenewOutcome.RENEWED
    expiry = client.zscore(keys.holders, "a")
    assert expiry is not None
    wait_server_past(client, expiry)

    assert scripts.renew("a", LONG) is RenewOutcome.LOST
    assert holders(client, keys) == set()
    assert client.hexists(keys.holder_info, "a") == 0
    assert scripts.check_fence("a", granted.value) is False
    counters = scripts.status().counters
    # The renewal does not count the loss: the holder reports it (next test).
    assert (counters.expired_holders, counters.lost_leases) == (1, 0)
    # The lock is free for someone else.
    assert acquire(scripts, "b", "exclusive").outcome is AcquireOutcome.GRANTED


def test_a_reported_loss_drops_the_grant_and_counts_once(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "a", "exclusive")
    acquire(scripts, "b", "exclusive")
    assert scripts.release("a", "lost") is ReleaseOutcome.RELEASED
    assert holders(client, keys) == set()
    assert signalled(client, keys, "b") == {"b": 1}
    # A report retried after a reply that timed out: no second count.
    assert scripts.release("a", "lost") is ReleaseOutcome.NOT_HELD
    assert scripts.status().counters.lost_leases == 1
    assert scripts.release("gone-before-report", "lost") is ReleaseOutcome.NOT_HELD
    assert scripts.status().counters.lost_leases == 2


def test_renewing_a_token_that_never_held_is_lost(scripts: LockScripts) -> None:
    acquire(scripts, "a", "exclusive")
    acquire(scripts, "b", "exclusive")  # queued, not holding
    assert scripts.renew("b", LONG) is RenewOutcome.LOST
    assert scripts.renew("ghost", LONG) is RenewOutcome.LOST


def test_fences_strictly_increase(scripts: LockScripts) -> None:
    fences = []
    for i in range(6):
        reply = acquire(scripts, f"w{i}", "exclusive")
        fences.append(reply.value)
        scripts.release(f"w{i}")
    assert fences == sorted(set(fences))
    assert len(set(fences)) == 6


def test_fences_keep_increasing_after_a_restart_without_persistence() -> None:
    keys = Keys().lock("global")
    with RedisServer() as server:
        client = server.client()
        scripts = _scripts(client, keys)
        before = acquire(scripts, "a", "exclusive").value
        scripts.release("a")

        server.restart()
        client.close()

        assert client.dbsize() == 0  # nothing survived
        after = acquire(scripts, "b", "exclusive")  # EVALSHA falls back to EVAL after restart
        assert after.outcome is AcquireOutcome.GRANTED
        assert after.value > before
        client.close()


def test_check_fence_is_true_only_for_the_current_exclusive_holder(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    fence = acquire(scripts, "a", "exclusive").value
    assert scripts.check_fence("a", fence) is True
    assert scripts.check_fence("a", fence - 1) is False
    assert scripts.check_fence("b", fence) is False
    scripts.release("a")
    assert scripts.check_fence("a", fence) is False
    acquire(scripts, "r", "shared")
    assert scripts.check_fence("r", 0) is False


def test_a_dead_waiter_is_pruned_and_the_next_one_signalled(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "x", "exclusive")
    dead = acquire(scripts, "dead", "exclusive", ttl_ms=300)
    acquire(scripts, "next", "exclusive")
    scripts.release("x")
    assert signalled(client, keys, "dead", "next") == {"dead": 1, "next": 0}

    # "dead" never re-checks; once its deadline passes, any script prunes it.
    wait_server_past(client, dead.server_time_ms + 300)
    assert acquire(scripts, "next", "exclusive").outcome is AcquireOutcome.GRANTED
    assert client.exists(keys.wake("dead")) == 0
    assert queue(client, keys) == []
    assert scripts.status().counters.expired_waiters == 1


def test_pruning_a_dead_head_signals_whoever_can_go(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "x", "exclusive")
    dead = acquire(scripts, "dead", "exclusive", ttl_ms=300)
    acquire(scripts, "r1", "shared")
    acquire(scripts, "r2", "shared")
    scripts.release("x")
    assert signalled(client, keys, "dead", "r1", "r2") == {"dead": 1, "r1": 0, "r2": 0}

    wait_server_past(client, dead.server_time_ms + 300)
    scripts.status()  # any script prunes first
    assert signalled(client, keys, "r1", "r2") == {"r1": 1, "r2": 1}


def test_an_expired_holder_is_pruned_and_the_head_signalled(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    held = acquire(scripts, "x", "exclusive", lease_ms=300)
    acquire(scripts, "w", "exclusive")
    wait_server_past(client, held.server_time_ms + 300)
    scripts.status()
    assert signalled(client, keys, "w") == {"w": 1}
    assert scripts.status().counters.expired_holders == 1


def test_a_waiter_cancelling_at_the_head_signals_the_readers_behind_it(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "r0", "shared")
    acquire(scripts, "w", "exclusive")
    acquire(scripts, "r1", "shared")
    acquire(scripts, "r2", "shared")
    assert signalled(client, keys, "r1", "r2") == {"r1": 0, "r2": 0}

    assert scripts.cancel("w") is CancelOutcome.LEFT_QUEUE

    assert signalled(client, keys, "r1", "r2") == {"r1": 1, "r2": 1}
    assert acquire(scripts, "r1", "shared").outcome is AcquireOutcome.GRANTED
    assert scripts.status().counters.cancels == 1


def test_cancel_drops_a_grant_whose_reply_was_lost(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "a", "exclusive")
    acquire(scripts, "b", "exclusive")
    assert scripts.cancel("a") is CancelOutcome.DROPPED_GRANT
    assert holders(client, keys) == set()
    assert signalled(client, keys, "b") == {"b": 1}
    assert scripts.cancel("a") is CancelOutcome.ABSENT


def test_force_release_ends_a_holder_or_removes_a_waiter(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "a", "exclusive")
    acquire(scripts, "b", "exclusive")
    acquire(scripts, "c", "exclusive")
    assert scripts.release("c", "force") is ReleaseOutcome.WAITER_REMOVED
    assert scripts.release("a", "force") is ReleaseOutcome.RELEASED
    assert signalled(client, keys, "b") == {"b": 1}
    assert scripts.status().counters.forced_releases == 2


def test_status_reports_holders_queue_and_counters(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    granted = acquire(scripts, "a", "exclusive", lease_ms=5000)
    acquire(scripts, "r", "shared")
    acquire(scripts, "w", "exclusive")

    status = scripts.status()
    assert status.scope == "s1"
    assert status.mode == "exclusive"
    [holder] = status.holders
    assert (holder.token, holder.mode, holder.fence) == ("a", "exclusive", granted.value)
    assert holder.owner == OwnerInfo.model_validate_json(OWNER)
    assert 0 < holder.remaining_ms <= 5000
    assert holder.acquired_at_ms == granted.server_time_ms
    assert [(w.token, w.mode, w.position) for w in status.queue] == [
        ("r", "shared", 1),
        ("w", "exclusive", 2),
    ]
    assert all(w.age_ms >= 0 and w.owner.tool == "write_file" for w in status.queue)
    assert status.counters.grants_exclusive == 1
    assert status.counters.grants_shared == 0


def test_every_key_of_a_scope_shares_one_hash_slot(
    client: redis.Redis, keys: LockKeys, scripts: LockScripts
) -> None:
    acquire(scripts, "x", "exclusive")
    acquire(scripts, "w", "exclusive")
    scripts.release("x")  # creates w's wake list
    scripts.release("x", "lost")  # creates x's lost mark
    names = [_text(k) for k in client.scan_iter(count=1000)]
    assert keys.wake("w") in names
    assert keys.lost_prefix + "x" in names
    assert len(names) >= 8
    assert all(n.startswith("{tp:lock:s1}:") for n in names)
    assert len({key_slot(n.encode()) for n in names}) == 1


def test_scripts_ship_in_the_package_with_their_headers() -> None:
    folder = resources.files("executor.lock").joinpath("lua")
    for name in SCRIPT_NAMES:
        text = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
        header = text.split("\n\n", 1)[0]
        assert header.startswith(f"-- {name}:")
        assert "KEYS" in header
        assert "ARGV" in header
        assert "Returns" in text
        assert script_source(name).endswith(text)


def test_an_unknown_reply_code_raises() -> None:
    with pytest.raises(LockProtocolError, match="returned 9"):
        decode_outcome(AcquireOutcome, "acquire", 9)
    assert decode_outcome(AcquireOutcome, "acquire", b"1") is AcquireOutcome.GRANTED


def test_a_script_refuses_an_unknown_mode_or_policy(client: redis.Redis, keys: LockKeys) -> None:
    raw = client.register_script(script_source("acquire"))
    base: list[str | int] = [keys.wake_prefix, LONG, "t", "exclusive", LONG, LONG, "1", OWNER]
    with pytest.raises(redis.ResponseError, match="unknown policy"):
        raw(keys=keys.script_keys(), args=["fairish", *base])
    base[3] = "upgrade"
    with pytest.raises(redis.ResponseError, match="unknown mode"):
        raw(keys=keys.script_keys(), args=["fair", *base])
