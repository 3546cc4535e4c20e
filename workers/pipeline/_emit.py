"""Emit: the call's ``tool_result`` event, queued to go in with its result.

The store step writes the queued events and then the result in one round trip, so whoever
reads the result finds the call's events too. The lock's events (``lock_wait``,
``lock_acquired``, ``tool_execution_started``, ``lock_released``, ``lock_lost``) are stamped
where they happen, by the lease guard; the opening two are sent once the tool has run a moment
(``workers.pipeline._run.ANNOUNCE_AFTER_S``) or else with this one, as ``lock_released`` is.
"""

from __future__ import annotations

from typing import Any

from executor import truncate
from executor.wire import EventLog, ToolResult
from workers.pipeline._chain import CallState, Proceed

# Longest string argument an event carries (the call itself keeps the whole).
_EVENT_ARGUMENT_CHARS = 2000


class Emit:
    """Step: queue what the call answered, after every event the call queued."""

    def __init__(self, events: EventLog) -> None:
        self._events = events

    def __call__(self, state: CallState, proceed: Proceed) -> ToolResult:
        result = proceed(state)
        call = state.call
        self._events.defer(
            "tool_result",
            call_id=call.id,
            turn_id=state.turn_id,
            tool=call.name,
            duration_ms=result.duration_ms,
            status=result.status.value,
            error_type=result.error_type.value if result.error_type else None,
            truncated=result.truncated,
        )
        return result


def brief(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments for an event: long strings cut, so a 10 MB write does not fill the stream."""
    return {
        name: truncate(value, _EVENT_ARGUMENT_CHARS).text if isinstance(value, str) else value
        for name, value in arguments.items()
    }
