"""Lock loss, in one place: what a lease lost while its call runs does to the call.

A lease is lost when its worker can no longer prove it holds the lock (it was paused, or cut
off from Redis, past the lease). Then, in this order:

1. ``LockLoss.on_lost`` (the lease guard registers it at the grant): the call's cancel flag is
   set, so the tool stops, and a ``lock_lost`` event is recorded.
2. ``restate`` (a step, right outside ``lock``: it sees the answer once the lock is left): a
   call whose tool never started "did not run"; a call whose side effect did not pass the
   fence is answered ``lock_lost``, since another call may have changed what it saw or did.
3. ``LockLoss.rerun`` (a worker's step, right inside ``store``): a read-only call answered
   ``lock_lost`` runs once more, under a new lease, in the same job; never twice.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from executor import _texts as texts
from executor.lock import Lease
from executor.wire import ErrorType, EventLog, Keys, ToolResult
from workers.pipeline._chain import CallState, Proceed
from workers.pipeline._truncate import finish

# Results that a lease lost while the call ran turns into lock_lost: success, and the error a
# tool raises when the loss sets the call's cancel flag.
_RESTATED_WHEN_LOST = (None, ErrorType.TOOL_ERROR)


def restate(state: CallState, proceed: Proceed) -> ToolResult:
    """Step: the answer of a call whose guard was lost while it ran, said as what it is."""
    result = proceed(state)
    held = state.held
    if held is None:
        return result
    tool = state.checked_tool()
    if held.lost and result.error_type is ErrorType.CANCELLED:
        # The loss set the cancel flag before the tool started (its worker was paused or cut
        # off right after the grant): it did not run, and nobody cancelled it.
        return finish(
            state.call,
            tool,
            state.settings,
            state.started,
            ErrorType.LOCK_UNAVAILABLE,
            texts.lease_ended_before_start(tool.name),
        )
    # A tool error may come from the loss itself (it cancels the call); the other errors
    # already say what happened, and a crash is a bug whose trace matters more.
    if held.lost and not held.committed and result.error_type in _RESTATED_WHEN_LOST:
        # Under a lost lease another call may have changed what this one saw or did. A tool
        # whose commit passed the fence (write_file, edit_file) landed under the lock: its
        # success stands.
        ended_with = result.content if result.is_error else None
        return finish(
            state.call,
            tool,
            state.settings,
            state.started,
            ErrorType.LOCK_LOST,
            texts.lock_lost(tool.name, tool.is_read_only, ended_with),
        )
    return result


class LockLoss:
    """The worker's side of a lost lease: stop the call, record it, run a read once more."""

    def __init__(self, client: redis.Redis, keys: Keys, events: EventLog) -> None:
        self._client = client
        self._keys = keys
        self._events = events

    def on_lost(self, state: CallState, mode: str) -> Callable[[Lease], None]:
        """The callback for the lease of ``state``'s run: cancel the run, record the loss."""
        call, tool = state.call, state.checked_tool()
        cancelled, turn_id = state.cancelled, state.turn_id

        def lost(held: Lease) -> None:
            cancelled.set()
            # Queued, not written: this runs on the keeper thread, which renews every lease of
            # the process and must not wait on a Redis that may be out of reach. The call's
            # emit step writes it, before the result.
            self._events.defer(
                "lock_lost",
                call_id=call.id,
                turn_id=turn_id,
                tool=tool.name,
                mode=mode,
                fence=held.fence,
                reason=held.lost_reason,
            )

        return lost

    def rerun(self, state: CallState, proceed: Proceed) -> ToolResult:
        """Step: a read-only call answered ``lock_lost`` runs once more, under a new lease.

        A read-only call changed nothing, so running it again is safe and gives the model a
        consistent answer instead of "call it again". The rerun's answer stands, whatever it is.
        """
        result = proceed(state)
        if not self._rerun_allowed(state, result):
            return result
        call = state.call
        self._events.emit(
            "call_rerun",
            call_id=call.id,
            turn_id=state.turn_id,
            tool=call.name,
            reason=result.error_type,
        )
        return proceed(state.again())

    def _rerun_allowed(self, state: CallState, result: ToolResult) -> bool:
        """Whether a read-only call that lost its lease may run once more (never twice)."""
        if result.error_type is not ErrorType.LOCK_LOST:
            return False
        name, registry = state.call.name, state.registry
        if name not in registry or not registry.get(name).is_read_only:
            return False
        try:
            return not self._client.exists(self._keys.turn_cancel(state.turn_id))
        except redis.RedisError:
            return False  # Redis is away: the lock could not be had again anyway
