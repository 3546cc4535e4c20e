"""The SSE events kept for resuming a stream (``executor.mcp._replay``), without a server."""

from __future__ import annotations

import anyio
import mcp_types as types
from mcp.server.streamable_http import EventMessage

from executor import Settings
from executor.mcp import http_app
from executor.mcp._replay import SessionEvents


def _note(n: int) -> types.JSONRPCMessage:
    return types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": n})


def _replayed(store: SessionEvents, after: str) -> tuple[str | None, list[tuple[str, object]]]:
    sent: list[tuple[str, object]] = []

    async def send(event: EventMessage) -> None:
        assert event.event_id is not None
        sent.append((event.event_id, event.message))

    async def replay() -> str | None:
        return await store.replay_events_after(after, send)

    return anyio.run(replay), sent


def test_a_resume_gets_its_streams_later_events_only_without_priming_ones() -> None:
    store = SessionEvents()

    async def fill() -> list[str]:
        return [
            await store.store_event("2", None),  # the priming event of stream 2
            await store.store_event("2", _note(1)),
            await store.store_event("3", _note(2)),  # another request's stream
            await store.store_event("2", None),  # a resumed stream's new priming event
            await store.store_event("2", _note(3)),
        ]

    ids = anyio.run(fill)
    assert len(set(ids)) == len(ids)
    stream, sent = _replayed(store, ids[0])
    assert stream == "2"
    assert sent == [(ids[1], _note(1)), (ids[4], _note(3))]
    assert _replayed(store, ids[1])[1] == [(ids[4], _note(3))]


def test_an_event_id_not_kept_resumes_nothing() -> None:
    store = SessionEvents(kept=2)

    async def fill() -> list[str]:
        return [await store.store_event("1", _note(n)) for n in range(3)]

    ids = anyio.run(fill)
    assert _replayed(store, ids[0]) == (None, [])  # dropped: only the last two are kept
    assert _replayed(store, "not-an-id") == (None, [])
    assert _replayed(store, ids[1]) == ("1", [(ids[2], _note(2))])


def test_each_mcp_session_gets_a_store_of_its_own() -> None:
    # Stream ids are request ids, which every session numbers alike: one shared store would
    # replay one client's results to another.
    _, pool = http_app(Settings(redis_url="redis://127.0.0.1:1/0"))
    try:
        manager = pool.server.session_manager
        first = manager._admit_session(None)
        second = manager._admit_session(None)
        assert first is not None
        assert second is not None
        stores = {id(first._event_store), id(second._event_store)}
        assert len(stores) == 2
        assert all(isinstance(t._event_store, SessionEvents) for t in (first, second))
    finally:
        pool.close()
