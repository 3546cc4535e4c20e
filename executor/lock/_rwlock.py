"""A fair reader/writer lock shared by every process that uses one Redis and one scope.

How a waiter waits: it runs acquire.lua; if queued, it blocks on its own wake list (BLPOP)
for at most ``recheck_s`` and then runs acquire.lua again. Releases signal only the waiters
that can go, so a hand-off costs one wake-up; the bounded wait is the safety net that turns a
lost signal into a delay of at most ``recheck_s``, never a hang. Each re-check also refreshes
the waiter's liveness deadline (``waiter_ttl_ms``): a waiter that dies leaves the queue when
that deadline passes, so it cannot block the waiters behind it.

Policies: ``"fair"`` (the default) is FIFO with reader batching: a reader waits only for
writers queued ahead of it, and a queued writer blocks every reader that arrives after it.
``"read_preferring"`` is the simple in-process lock's rule (readers enter whenever no writer
*holds*, so a stream of readers starves writers); it exists only so the starvation test and
the benchmark can show the difference. Every client of one scope must use the same policy.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid

import redis

from executor._connect import connect, lock_roles
from executor._errors import ConfigurationError, LockError, LockTimeout, LockUnavailable
from executor.lock._keeper import LeaseKeeper
from executor.lock._lease import Lease
from executor.lock._models import EXCLUSIVE, FAIR, SHARED, LockStatus, Mode, OwnerInfo, Policy
from executor.lock._scripts import AcquireOutcome, AcquireReply, LockScripts, ReleaseOutcome
from executor.wire import DEFAULT_SCOPE, Acks, Keys, Rider

_TOKEN = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
# Pause between attempts while Redis does not answer an acquire.
_UNREACHABLE_PAUSE_S = 0.05


def new_token() -> str:
    """A fresh lease token."""
    return uuid.uuid4().hex


class RWLock:
    """One scope's distributed reader/writer lock.

    Two connections matter. ``redis_client`` runs the scripts, renewals included: its socket
    timeout and retries should end well within a third of ``lease_ms``, or a Redis that hangs
    delays the detection of a lost lease. ``blocking_client`` (default: the same client) waits
    for wake-ups with BLPOP, so its socket timeout must exceed ``recheck_s`` (redis-py 8
    defaults to 5 s). ``RWLock.from_url`` builds both right.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        scope: str = DEFAULT_SCOPE,
        *,
        keys: Keys | None = None,
        lease_ms: int = 10_000,
        recheck_s: float = 1.0,
        waiter_ttl_ms: int | None = None,
        policy: Policy = FAIR,
        keeper: LeaseKeeper | None = None,
        blocking_client: redis.Redis | None = None,
        acks: Acks | None = None,
    ) -> None:
        if policy not in ("fair", "read_preferring"):
            raise ConfigurationError(
                f"Unknown lock policy {policy!r}: use 'fair' or 'read_preferring'."
            )
        if lease_ms < 50:
            raise ConfigurationError(f"lease_ms must be at least 50, got {lease_ms}.")
        if recheck_s <= 0:
            raise ConfigurationError(f"recheck_s must be positive, got {recheck_s}.")
        recheck_ms = int(recheck_s * 1000)
        if waiter_ttl_ms is None:
            waiter_ttl_ms = max(2000, 3 * recheck_ms)
        if waiter_ttl_ms < 2 * recheck_ms:
            raise ConfigurationError(
                f"waiter_ttl_ms ({waiter_ttl_ms}) must be at least twice recheck_s "
                f"({recheck_ms} ms), or live waiters would be pruned between re-checks."
            )
        blocking_client = blocking_client or redis_client
        timeout = blocking_client.connection_pool.connection_kwargs.get("socket_timeout")
        # BLPOP answers after recheck_s; the margin covers the round trip.
        if isinstance(timeout, (int, float)) and timeout < recheck_s + 0.1:
            raise ConfigurationError(
                f"The Redis client's socket_timeout ({timeout} s) would cut a {recheck_s} s "
                "wait for a wake-up; build it with socket_timeout=None or a larger value."
            )
        self.redis = redis_client
        self.blocking_redis = blocking_client
        self._owned_clients: tuple[redis.Redis, ...] = ()
        self._key_space = keys or Keys()
        self.keys = self._key_space.lock(scope)
        self.scope = scope
        self.policy: Policy = policy
        self.lease_ms = lease_ms
        self.recheck_s = recheck_s
        self.waiter_ttl_ms = waiter_ttl_ms
        self.keeper = keeper or LeaseKeeper.shared()
        timeout = redis_client.connection_pool.connection_kwargs.get("socket_timeout")
        self.acks = (acks or Acks()).within(timeout if isinstance(timeout, (int, float)) else None)
        self.scripts = LockScripts(
            redis_client, self.keys, policy=policy, wake_ttl_ms=waiter_ttl_ms, acks=self.acks
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        scope: str = DEFAULT_SCOPE,
        *,
        keys: Keys | None = None,
        lease_ms: int = 10_000,
        recheck_s: float = 1.0,
        waiter_ttl_ms: int | None = None,
        policy: Policy = FAIR,
        keeper: LeaseKeeper | None = None,
        acks: Acks | None = None,
    ) -> RWLock:
        """A lock with clients of its own for ``url``, with timeouts that suit it.

        Scripts and renewals: a socket and connect timeout of a sixth of the lease (0.05-2 s)
        and one immediate retry; wake-up waits: a socket timeout above ``recheck_s``
        (``executor._connect.lock_roles`` says why).
        """
        scripts, wakeups = lock_roles(lease_ms, recheck_s)
        client = connect(url, role=scripts)
        blocking = connect(url, role=wakeups)
        lock = cls(
            client,
            scope,
            keys=keys,
            lease_ms=lease_ms,
            recheck_s=recheck_s,
            waiter_ttl_ms=waiter_ttl_ms,
            policy=policy,
            keeper=keeper,
            blocking_client=blocking,
            acks=acks,
        )
        lock._owned_clients = (client, blocking)
        return lock

    def close(self) -> None:
        """Close the clients ``from_url`` built (clients passed in are the caller's to close)."""
        for client in self._owned_clients:
            client.close()
        self._owned_clients = ()

    def for_scope(self, scope: str) -> RWLock:
        """The lock of another scope, with this one's clients, settings and keeper.

        Closing it closes nothing: the clients stay this lock's.
        """
        return RWLock(
            self.redis,
            scope,
            keys=self._key_space,
            lease_ms=self.lease_ms,
            recheck_s=self.recheck_s,
            waiter_ttl_ms=self.waiter_ttl_ms,
            policy=self.policy,
            keeper=self.keeper,
            blocking_client=self.blocking_redis,
            acks=self.acks,
        )

    def __repr__(self) -> str:
        return f"RWLock(scope={self.scope!r}, policy={self.policy!r}, lease_ms={self.lease_ms})"

    # -- acquiring -----------------------------------------------------------------------

    def acquire(
        self,
        mode: Mode,
        timeout: float | None = None,
        *,
        owner: OwnerInfo | None = None,
        token: str | None = None,
        keep_alive: bool = True,
        rider: Rider | None = None,
    ) -> Lease:
        """Wait for the lock in ``mode`` ("shared" or "exclusive") and return the ``Lease``.

        ``timeout``: seconds to wait (None: no limit; 0: only try, never queue). On timeout
        the waiter leaves the queue, wakes whoever it blocked, and ``LockTimeout`` is raised.
        ``token``: pass the token of an earlier attempt whose reply was lost; acquiring again
        with it is idempotent. ``keep_alive``: renew the lease from the keeper thread (False:
        the lease ends after ``lease_ms`` unless ``Lease.renew()`` is called). ``rider``: a
        command sent with every try, in its round trip; its last reply read is the grant's.
        """
        if mode not in (SHARED, EXCLUSIVE):
            raise ValueError(f"Unknown lock mode {mode!r}: use 'shared' or 'exclusive'.")
        token = token or new_token()
        if not _TOKEN.fullmatch(token):
            raise ValueError(f"Invalid lease token {token!r}: use 1-200 of [A-Za-z0-9_.-].")
        owner_json = (owner or OwnerInfo.current()).model_dump_json()
        started = time.monotonic()
        deadline = None if timeout is None else started + max(0.0, timeout)
        try:
            reply, sent, signals = self._wait(token, mode, owner_json, started, deadline, rider)
        except BaseException:
            # A timeout, an interrupt or an unreachable Redis: leave no queue entry behind.
            self._give_up(token)
            raise
        if reply.outcome is AcquireOutcome.MODE_CONFLICT:
            # Not given up: the token's existing grant or queue place belongs to its caller.
            raise LockError(
                f"Lease token {token} already holds or waits for the lock on scope "
                f"{self.scope!r} in the other mode; use a new token."
            )
        lease = Lease(
            scripts=self.scripts,
            keeper=self.keeper,
            token=token,
            mode=mode,
            fence=reply.value if mode == EXCLUSIVE else None,
            lease_ms=self.lease_ms,
            sent_at=sent,
            server_granted_ms=reply.server_time_ms,
            waited_s=time.monotonic() - started,
            signals=signals,
        )
        if keep_alive:
            self.keeper.add(lease)
        return lease

    def acquire_shared(
        self,
        timeout: float | None = None,
        *,
        owner: OwnerInfo | None = None,
        token: str | None = None,
        keep_alive: bool = True,
    ) -> Lease:
        """``acquire("shared", ...)``: for concurrency-safe tools."""
        return self.acquire(SHARED, timeout, owner=owner, token=token, keep_alive=keep_alive)

    def acquire_exclusive(
        self,
        timeout: float | None = None,
        *,
        owner: OwnerInfo | None = None,
        token: str | None = None,
        keep_alive: bool = True,
    ) -> Lease:
        """``acquire("exclusive", ...)``: for every tool that is not concurrency-safe."""
        return self.acquire(EXCLUSIVE, timeout, owner=owner, token=token, keep_alive=keep_alive)

    def _wait(
        self,
        token: str,
        mode: Mode,
        owner_json: str,
        started: float,
        deadline: float | None,
        rider: Rider | None,
    ) -> tuple[AcquireReply, float, int]:
        signals = 0
        unreachable_since: float | None = None
        wake_key = self.keys.wake(token)
        while True:
            sent = time.monotonic()
            try:
                reply = self.scripts.acquire(
                    token,
                    mode,
                    lease_ms=self.lease_ms,
                    waiter_ttl_ms=self.waiter_ttl_ms,
                    may_enqueue=deadline is None or deadline > started,
                    owner_json=owner_json,
                    rider=rider,
                )
                if reply.granted or reply.outcome is AcquireOutcome.MODE_CONFLICT:
                    return reply, sent, signals
                if reply.outcome is AcquireOutcome.STALE:
                    # This token's grant is from before a failover and its reply never came:
                    # never used, so drop it and ask again in this epoch.
                    self.scripts.cancel(token)
                    continue
                unreachable_since = None
                remaining = float("inf") if deadline is None else deadline - time.monotonic()
                if reply.outcome is AcquireOutcome.WOULD_WAIT or remaining <= 0:
                    where = (
                        f" (position {reply.value} in the queue)"
                        if reply.outcome is AcquireOutcome.QUEUED
                        else ""
                    )
                    raise LockTimeout(
                        f"No {mode} grant of the lock on scope {self.scope!r} within "
                        f"{time.monotonic() - started:.3f} s{where}."
                    )
                # BLPOP's timeout 0 would mean "forever"; keep a small floor.
                wait = max(0.01, min(self.recheck_s, remaining))
                if self.blocking_redis.blpop([wake_key], timeout=wait) is not None:
                    signals += 1
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                now = time.monotonic()
                unreachable_since = unreachable_since or sent
                out_of_time = deadline is not None and now >= deadline
                if out_of_time or now - unreachable_since > self.waiter_ttl_ms / 1000:
                    raise LockUnavailable(
                        f"Could not reach Redis to take the {mode} lock on scope "
                        f"{self.scope!r}: {exc}"
                    ) from exc
                time.sleep(_UNREACHABLE_PAUSE_S)

    def _give_up(self, token: str) -> None:
        # If Redis does not answer, the waiter's deadline removes it anyway, and a grant whose
        # reply was lost expires with its lease.
        with contextlib.suppress(redis.RedisError):
            self.scripts.cancel(token)

    # -- operating -----------------------------------------------------------------------

    def status(self) -> LockStatus:
        """Holders, queue and counters of this scope, in one consistent read."""
        return self.scripts.status()

    def force_release(self, token: str) -> bool:
        """End ``token``'s hold (or remove it from the queue), for an operator.

        True if the token held the lock or waited for it. Its holder finds out at its next
        renewal or fence check, and declares the lease lost.
        """
        return self.scripts.release(token, "force") is not ReleaseOutcome.NOT_HELD

    def check_fence(self, token: str, fence: int) -> bool:
        """Whether ``token`` holds the lock exclusively with ``fence`` and an unexpired lease."""
        return self.scripts.check_fence(token, fence)
