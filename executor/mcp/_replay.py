"""SSE resumability over streamable HTTP: every event a session's streams carry has an id,
and a client that lost a stream asks for the rest of it with ``Last-Event-ID``.

Each MCP session keeps its own events (``SessionEvents``): the SDK names a request's stream by
the request's id, which every session numbers from 1, so one store shared by all sessions
would replay one client's results to another. Events are kept in memory, the last
``EVENTS_KEPT`` of each session; the SDK sends the ``retry`` field (``RETRY_MS``) and the
priming event to clients of protocol 2025-11-25 and later.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import mcp_types as types
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

# A session's events kept for a resume: a lost stream's events since the loss (a call's
# progress beats, its log lines, its result) are far fewer.
EVENTS_KEPT = 1000
# How long a client waits before it resumes a lost stream (the SSE ``retry`` field).
RETRY_MS = 1000


class SessionEvents(EventStore):
    """One MCP session's SSE events, the last ``kept``, for resuming a stream."""

    def __init__(self, kept: int = EVENTS_KEPT) -> None:
        self._kept = kept
        self._next = 0
        self._events: OrderedDict[int, tuple[StreamId, types.JSONRPCMessage | None]] = OrderedDict()

    async def store_event(
        self, stream_id: StreamId, message: types.JSONRPCMessage | None
    ) -> EventId:
        self._next += 1
        self._events[self._next] = (stream_id, message)
        while len(self._events) > self._kept:
            self._events.popitem(last=False)
        return str(self._next)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the events of ``last_event_id``'s stream that came after it; that stream's
        id, or None for an id not (or no longer) kept."""
        try:
            last = int(last_event_id)
        except ValueError:
            return None
        if last not in self._events:
            return None
        stream = self._events[last][0]
        later = [
            (event_id, message)
            for event_id, (stream_id, message) in self._events.items()
            if event_id > last and stream_id == stream and message is not None
        ]
        for event_id, message in later:
            await send_callback(EventMessage(message, str(event_id)))
        return stream


def give_each_session_its_events(manager: StreamableHTTPSessionManager) -> None:
    """Make ``manager`` hand each new session a ``SessionEvents`` of its own (it hands every
    session the one store it was given, read as each session is admitted)."""
    admit = manager._admit_session

    def admit_with_own_events(requestor: Any) -> Any:
        manager.event_store = SessionEvents()
        return admit(requestor)

    setattr(manager, "_admit_session", admit_with_own_events)  # noqa: B010
