"""Lock: hold the call's guard while its tool runs; on a worker, a lease on the lock.

``lock`` is the step: it enters the call's guard once the arguments are valid and leaves it
when the tool is done. Only a failure to enter it (no lock within the wait) means the tool did
not run. ``LeaseGuard`` is the worker's guard: the distributed lock, shared for
concurrency-safe tools and exclusive for the rest, granted past the commit barrier and kept
only by the delivery that holds the call's claim (``CallState.confirm_claim``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis
from redis.client import Pipeline

from executor import FenceError, Settings, ToolpoolError
from executor import _texts as texts
from executor.lock import EXCLUSIVE, SHARED, Lease, LockError, LockTimeout, OwnerInfo, RWLock
from executor.wire import ErrorType, EventLog, ToolResult
from workers.pipeline._chain import CallState, Closing, Held, Proceed
from workers.pipeline._emit import brief
from workers.pipeline._lock_loss import LockLoss
from workers.pipeline._truncate import finish

log = logging.getLogger(__name__)


def lock(state: CallState, proceed: Proceed) -> ToolResult:
    """Step: run the rest under ``state.guard`` (if any); ``lock_unavailable`` if not had."""
    guard = state.guard
    if guard is None:
        return proceed(state)
    tool = state.checked_tool()
    stack = contextlib.ExitStack()
    try:
        held = stack.enter_context(guard(state))
    except ToolpoolError as exc:
        # Only a failure to enter the guard means the tool did not run.
        return finish(
            state.call,
            tool,
            state.settings,
            state.started,
            ErrorType.LOCK_UNAVAILABLE,
            texts.lock_not_granted(tool.name, str(exc)),
        )
    state.held = held
    try:
        return proceed(state)
    finally:
        try:
            stack.close()
        except Exception:
            # The tool has run; failing to leave the guard must not change its answer.
            log.exception("toolpool: leaving the guard of call %s failed", state.call.id)


class LeaseGuard:
    """The worker's guard: take a lease, pass the commit barrier, announce, give it back.

    ``barrier`` is the ``CommitBarrier`` (``workers.pipeline._barrier``) of the call's
    workspace; it is passed between the grant and its announcement, and a barrier that fails
    gives the lease back unannounced: the call did not run. A call in a session takes the lock
    of the session's scope (``state.scope``), any other call ``rwlock``'s.
    """

    def __init__(
        self,
        rwlock: RWLock,
        events: EventLog,
        settings: Settings,
        *,
        worker_name: str,
        barrier: Callable[[Path], None],
        lock_loss: LockLoss,
    ) -> None:
        self._locks = LockScopes(rwlock)
        self._events = events
        self._wait_s = settings.worker.lock_wait_timeout
        self._worker = worker_name
        self._barrier = barrier
        self._lock_loss = lock_loss

    @contextlib.contextmanager
    def hold(self, state: CallState) -> Iterator[Held]:
        """Hold the lock for ``state``'s run; a ``ToolpoolError`` if it cannot be had."""
        call, tool, turn_id = state.call, state.checked_tool(), state.turn_id
        mode = SHARED if tool.is_concurrency_safe else EXCLUSIVE
        owner = OwnerInfo.current(worker=self._worker, call_id=call.id, tool=tool.name)
        rwlock = self._locks(state.scope)
        # The claim's check rides on the grant's round trip (and its WAIT).
        rider = state.confirm_claim
        started = time.monotonic()
        try:
            lease = rwlock.acquire(mode, timeout=0, owner=owner, rider=rider)
        except LockTimeout:
            self._events.emit(
                "lock_wait", call_id=call.id, turn_id=turn_id, tool=tool.name, mode=mode
            )
            lease = rwlock.acquire(mode, timeout=self._wait_s, owner=owner, rider=rider)
        try:
            self._barrier(state.workspace.root)
            if rider is not None:
                # Under the grant: of two deliveries of one call, only the claim's holder runs.
                rider.confirm(state)
        except BaseException:
            with contextlib.suppress(redis.RedisError, LockError):
                lease.release()
            raise
        waited_ms = round((time.monotonic() - started) * 1000, 3)
        lease.on_lost(self._lock_loss.on_lost(state, mode))
        self._events.defer(
            "lock_acquired",
            call_id=call.id,
            turn_id=turn_id,
            tool=tool.name,
            mode=mode,
            fence=lease.fence,
            waited_ms=waited_ms,
        )
        self._events.defer(
            "tool_execution_started",
            call_id=call.id,
            turn_id=turn_id,
            tool=tool.name,
            arguments=brief(call.arguments),
        )
        if state.closing is None:
            self._events.flush()
        else:
            # Stamped now, sent by the run step once the tool takes a while, or with the
            # answer (the store's round trip): a quick call saves a round trip.
            state.announce = self._events.flush
        try:
            yield _LeaseHeld(lease)
        finally:
            # Stamped before the release is sent: the event's ts comes after it, when the next
            # holder may already have the lock, so only this time bounds the hold from inside.
            released_at = time.time()
            released = False
            if state.closing is not None and not lease.lost:
                # Sent with the result, in the store step's one round trip. Not lost now means
                # provably held now (the lease's local deadline), so the event can say so.
                again = functools.partial(self._release_again, lease)
                state.closing.append(Closing(queue=self._releasing(state, lease), instead=again))
                released = True
            else:
                released = self._release(lease)
            self._events.defer(
                "lock_released",
                call_id=call.id,
                turn_id=turn_id,
                tool=tool.name,
                mode=mode,
                fence=lease.fence,
                held=released,
                released_at=released_at,
            )

    def _release(self, lease: Lease) -> bool:
        try:
            return lease.release()
        except (redis.RedisError, LockError) as exc:
            # The call has run: a release that fails must not turn its result into "did
            # not run". The lease ends by itself when it expires.
            log.warning("toolpool: could not release lease %s: %s", lease.token, exc)
            return False

    def _release_again(self, lease: Lease) -> None:
        if not lease.released:
            self._release(lease)
            return
        try:
            lease.release_again()
        except (redis.RedisError, LockError) as exc:
            log.warning("toolpool: could not release lease %s: %s", lease.token, exc)

    def _releasing(
        self, state: CallState, lease: Lease
    ) -> Callable[[Pipeline], Callable[[object], None]]:
        def queue(pipe: Pipeline) -> Callable[[object], None]:
            read = lease.release_into(pipe)

            def done(reply: object) -> None:
                try:
                    held = read(reply)
                except (redis.RedisError, LockError) as exc:
                    log.warning("toolpool: could not release lease %s: %s", lease.token, exc)
                    return
                if not held:  # an operator's forced release came first
                    self._events.emit(
                        "lock_lost",
                        call_id=state.call.id,
                        turn_id=state.turn_id,
                        tool=state.call.name,
                        reason="the release found the lease already ended (released by force)",
                        after_release=True,
                    )

            return done

        return queue


class LockScopes:
    """The worker's own lock and, built on first use, the lock of each session scope.

    They share the worker lock's connections and lease keeper; the most recently used
    ``keep`` are cached (a lock object is cheap, its scripts are loaded once per connection).
    """

    def __init__(self, base: RWLock, keep: int = 1024) -> None:
        self._base = base
        self._keep = keep
        self._cache: collections.OrderedDict[str, RWLock] = collections.OrderedDict()
        self._guard = threading.Lock()

    def __call__(self, scope: str | None) -> RWLock:
        """The lock of ``scope``; None (or the worker's own scope) is the worker's lock."""
        if scope is None or scope == self._base.scope:
            return self._base
        with self._guard:
            found = self._cache.pop(scope, None) or self._base.for_scope(scope)
            self._cache[scope] = found
            while len(self._cache) > self._keep:
                self._cache.popitem(last=False)
            return found


class _LeaseHeld:
    """The run's view of a lease: a fence to check before side effects, and loss."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self.committed = False

    def check_fence(self) -> None:
        if self._lease.fence is not None:
            self._lease.assert_fenced()
        elif self._lease.lost:
            raise FenceError(texts.shared_lock_lost(str(self._lease.lost_reason)))
        self.committed = True

    @property
    def lost(self) -> bool:
        return self._lease.lost
