"""One grant of the lock: renewed by the process's keeper, released by its holder, loud when lost.

A lease is *lost* when its holder can no longer prove that it holds the lock: a renewal or a
fence check found it gone, or Redis could not be reached before the lease's local deadline
(the time the last successful renewal was *sent*, plus the lease length: a conservative
bound, since the server's lease started no earlier). Loss sets ``lost_event``, runs the
``on_lost`` callbacks, is logged at WARNING and is counted in the scope's ``lost_leases``
(by the keeper, as soon as Redis answers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

import redis
from redis.client import Pipeline

from executor import _texts as texts
from executor._errors import FenceError, LockUnavailable
from executor.lock._models import EXCLUSIVE, Mode
from executor.lock._scripts import LockScripts, ReleaseOutcome, RenewOutcome

if TYPE_CHECKING:
    from executor.lock._keeper import LeaseKeeper

logger = logging.getLogger(__name__)

LostCallback = Callable[["Lease"], None]


class Lease:
    """What the holder of a grant keeps: token, mode, fence, and whether it still holds."""

    def __init__(
        self,
        *,
        scripts: LockScripts,
        keeper: LeaseKeeper,
        token: str,
        mode: Mode,
        fence: int | None,
        lease_ms: int,
        sent_at: float,
        server_granted_ms: int,
        waited_s: float = 0.0,
        signals: int = 0,
    ) -> None:
        self.token = token
        self.mode: Mode = mode
        self.fence = fence
        self.scope = scripts.keys.scope
        self.lease_ms = lease_ms
        #: When the grant happened, on the Redis server clock (shared by every process).
        self.server_granted_ms = server_granted_ms
        #: Seconds between the first acquire request and the grant.
        self.waited_s = waited_s
        #: Wake-up signals consumed while waiting (0: granted at once, or after a re-check).
        self.signals = signals
        #: Why the lease was declared lost, once it is.
        self.lost_reason: str | None = None
        self._scripts = scripts
        self._keeper = keeper
        self._lease_s = lease_ms / 1000.0
        self._retry_s = min(1.0, max(0.05, self._lease_s / 10))
        # _io orders this lease's renewals before its release; _state guards the flags.
        self._io = threading.Lock()
        self._state = threading.RLock()
        # _is_lost flips first; _lost_event is set last, after the report is queued and the
        # callbacks ran, so a thread that waits on the event sees all of it done.
        self._is_lost = False
        self._lost_event = threading.Event()
        self._released = False
        self._callbacks: list[LostCallback] = []
        self._local_deadline = sent_at + self._lease_s
        self._next_renewal = sent_at + self._lease_s / 3
        self._last_error: str | None = None

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._is_lost else "held"
        return (
            f"Lease(scope={self.scope!r}, mode={self.mode!r}, token={self.token!r}, "
            f"fence={self.fence}, {state})"
        )

    # -- state ---------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once the holder can no longer prove it holds the lock (see the module doc)."""
        if self._is_lost:
            return True
        if not self._released and time.monotonic() >= self._local_deadline:
            self._declare_lost(self._ran_out())
            return True
        return False

    @property
    def lost_event(self) -> threading.Event:
        """Set once the lease is lost (after the callbacks ran); wait on it to stop work."""
        return self._lost_event

    @property
    def released(self) -> bool:
        """True once ``release()`` was called."""
        return self._released

    @property
    def held(self) -> bool:
        """Neither released nor lost."""
        return not self._released and not self.lost

    @property
    def remaining_s(self) -> float:
        """Seconds until the local deadline; 0 once it has passed."""
        return max(0.0, self._local_deadline - time.monotonic())

    @property
    def next_renewal_at(self) -> float:
        """When the keeper should renew next (``time.monotonic()`` clock)."""
        return min(self._next_renewal, self._local_deadline)

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` when the lease is lost (at once, if it already is)."""
        with self._state:
            if not self._is_lost:
                self._callbacks.append(callback)
                return
        self._run_callback(callback)

    # -- renewal and release -------------------------------------------------------------

    def renew(self) -> bool:
        """Extend the lease now (the keeper calls this); False once lost or released.

        Raises ``LockUnavailable`` when Redis cannot be reached and the local deadline has not
        passed yet (the keeper retries); past it, the lease is declared lost instead.
        """
        lost_reason = ""
        with self._io:
            with self._state:
                if self._released or self._is_lost:
                    return False
            sent = time.monotonic()
            if sent >= self._local_deadline:
                lost_reason = self._ran_out()
            else:
                try:
                    outcome = self._scripts.renew(self.token, self.lease_ms)
                except Exception as exc:
                    self._next_renewal = min(time.monotonic() + self._retry_s, self._local_deadline)
                    self._last_error = f"{type(exc).__name__}: {exc}"
                    if not isinstance(exc, redis.RedisError):
                        raise
                    if time.monotonic() < self._local_deadline:
                        raise LockUnavailable(
                            f"Could not renew lease {self.token} on lock scope {self.scope!r}: "
                            f"{exc}. Retrying until its local deadline."
                        ) from exc
                    lost_reason = self._ran_out()
                else:
                    if outcome is RenewOutcome.RENEWED:
                        self._last_error = None
                        self._local_deadline = sent + self._lease_s
                        self._next_renewal = sent + self._lease_s / 3
                        return True
                    lost_reason = "a renewal found the lease gone (expired or force-released)"
        self._declare_lost(lost_reason)
        return False

    def release(self) -> bool:
        """Give the lock back; True if the lease was still held (not expired, not revoked)."""
        return self._mark_released() and self.release_again()

    def release_again(self) -> bool:
        """Send the release (once more, for one queued by ``release_into`` that may not have
        reached Redis: releasing twice is harmless); True if this one ended the hold."""
        try:
            outcome = self._scripts.release(self.token, "release")
        except redis.RedisError as exc:
            # The keeper sends it again until Redis takes it; else the lease would block the
            # lock until it ran out (after a failover, a lease from its bump).
            self._keeper.retry_release(self._scripts, self.token)
            raise LockUnavailable(
                f"Could not release lease {self.token} on lock scope {self.scope!r}: {exc}. "
                f"It is sent again until Redis takes it, and the lease ends by itself within "
                f"{self.lease_ms} ms."
            ) from exc
        return outcome is ReleaseOutcome.RELEASED

    def release_into(self, pipe: Pipeline) -> Callable[[object], bool]:
        """Queue the release on ``pipe``, to go with other commands in one round trip; return
        what reads its reply (True if the lease was still held). A reply that is an error
        (a Redis that lost its scripts, or did not answer) releases it here instead."""
        if not self._mark_released():
            return lambda _reply: False
        self._scripts.release_into(pipe, self.token)

        def outcome(reply: object) -> bool:
            if isinstance(reply, BaseException):
                return self.release_again()
            return self._scripts.release_outcome(reply) is ReleaseOutcome.RELEASED

        return outcome

    def _mark_released(self) -> bool:
        """Mark the lease released and stop renewing it; False if it already was."""
        with self._io, self._state:
            if self._released:
                return False
            self._released = True
        self._keeper.discard(self)
        return True

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockUnavailable as error:
            # Raising here would hide the body's own outcome; the lease expires on its own.
            logger.warning("%s", error)

    # -- fencing -------------------------------------------------------------------------

    def check_fence(self) -> bool:
        """One script call: does this exclusive lease still hold the lock with its fence?"""
        if self.mode != EXCLUSIVE or self.fence is None or self._released or self.lost:
            return False
        try:
            valid = self._scripts.check_fence(self.token, self.fence)
        except redis.RedisError as exc:
            raise LockUnavailable(
                f"Could not check the fence of lease {self.token} on lock scope "
                f"{self.scope!r}: {exc}"
            ) from exc
        if not valid:
            self._declare_lost("a fence check found that another holder or nobody holds it")
        return valid

    def assert_fenced(self) -> None:
        """Raise ``FenceError`` unless this exclusive lease provably still holds the lock.

        Call it right before a write becomes visible (the rename of a written temp file).
        """
        if self.mode != EXCLUSIVE:
            raise FenceError(texts.fence_shared())
        try:
            valid = self.check_fence()
        except LockUnavailable:
            raise FenceError(texts.fence_unproven(self.scope)) from None
        if not valid:
            raise FenceError(texts.fence_lost(self.scope))

    # -- loss ----------------------------------------------------------------------------

    def _ran_out(self) -> str:
        if self._last_error is None:
            return "its lease ran out before a renewal was confirmed"
        return f"Redis was unreachable until its lease ran out (last error: {self._last_error})"

    def _declare_lost(self, reason: str) -> None:
        with self._state:
            if self._is_lost or self._released:
                return
            self.lost_reason = reason
            self._is_lost = True
            callbacks = list(self._callbacks)
        logger.warning(
            "Lost the %s lease %s (fence %s) on lock scope %r: %s",
            self.mode,
            self.token,
            self.fence,
            self.scope,
            reason,
        )
        self._keeper.discard(self)
        # Counting the loss (and dropping a grant Redis may still hold) needs Redis: the keeper
        # does it as soon as Redis answers.
        self._keeper.report_lost(self._scripts, self.token)
        for callback in callbacks:
            self._run_callback(callback)
        self._lost_event.set()

    def _run_callback(self, callback: LostCallback) -> None:
        try:
            callback(self)
        except Exception:
            logger.exception("A lost-lease callback of lease %s failed", self.token)
