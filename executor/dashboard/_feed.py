"""What every viewer of the dashboard is sent, read from Redis once for all of them.

One thread follows the events stream, a read every ``GATHER_S`` at most while the pool is busy,
each read's events sent on as one message; one task reads the pool's snapshot once a second.
Each viewer has a queue of its own that both feed: a viewer that falls behind loses its oldest
messages, never slows the pool or the other viewers. Redis' load is the same for one viewer
as for a hundred.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis

from executor._connect import FOLLOWER, READER, connect
from executor._pool_state import RECENT_EVENTS, newest_events, sessions, snapshot
from executor._settings import Settings
from executor.wire import Event, Keys, ProcessRecord, follow_event_batches
from executor.wire._events import READ_COUNT

log = logging.getLogger(__name__)

# How often the snapshot (workers, lock, queue, sessions) is read and sent.
SNAPSHOT_S = 1.0
# Messages a viewer may fall behind by before its oldest are dropped.
VIEWER_BACKLOG = 1000
# How long the events gather between reads: what the page may lag behind the pool.
GATHER_S = 0.1
# Ended background processes shown per session, the newest: Redis keeps every one until the
# session ends, and the snapshot is sent each second.
ENDED_SHOWN = 10


class Feed:
    """The events and snapshots of one pool, fanned out to the dashboard's viewers."""

    def __init__(self, url: str, settings: Settings, on_event: Callable[[Event], None]) -> None:
        self._url = url
        self._settings = settings
        self._on_event = on_event
        self._viewers: set[asyncio.Queue[str]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._client = connect(url, role=READER)
        self.state: dict[str, Any] = {}
        # The newest events, kept as they come: the snapshot's recent calls and failures are
        # made from them, not read again each second.
        self._recent: collections.deque[Event] = collections.deque(maxlen=RECENT_EVENTS)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Feed]:
        """Follow the pool while the app runs."""
        self._loop = asyncio.get_running_loop()
        follower = threading.Thread(
            target=self._follow, name="toolpool-dashboard-events", daemon=True
        )
        follower.start()
        reading = asyncio.create_task(self._read_snapshots())
        try:
            yield self
        finally:
            self._stop.set()
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            await asyncio.to_thread(follower.join, 5.0)
            self._client.close()

    @contextlib.asynccontextmanager
    async def viewer(self) -> AsyncIterator[asyncio.Queue[str]]:
        """A queue of server-sent-event messages for one viewer, the current state first."""
        queue: asyncio.Queue[str] = asyncio.Queue(VIEWER_BACKLOG)
        if self.state:
            queue.put_nowait(_message("state", self.state))
        self._viewers.add(queue)
        try:
            yield queue
        finally:
            self._viewers.discard(queue)

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    def _send(self, message: str) -> None:
        for queue in list(self._viewers):
            if queue.full():  # a viewer that fell behind loses its oldest message
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(message)

    async def _read_snapshots(self) -> None:
        while True:
            try:
                self.state = await asyncio.to_thread(self._snapshot)
                self._send(_message("state", self.state))
            except redis.RedisError as exc:
                log.warning("toolpool dashboard: cannot read the pool: %s", exc)
                self._send(_message("trouble", {"error": f"Redis: {exc}"}))
            await asyncio.sleep(SNAPSHOT_S)

    def _snapshot(self) -> dict[str, Any]:
        state = snapshot(self._client, self._settings, recent=100, events=list(self._recent))
        state["sessions"] = sessions(self._client, self._settings)
        state["processes"] = self._processes(state["sessions"])
        state["viewers"] = self.viewers
        return state

    def _processes(self, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The sessions' background processes, by session then start: all that run, and the
        newest ``ENDED_SHOWN`` ended ones of each; each session's counts put on its row."""
        keys = Keys(self._settings.redis.key_prefix)
        with self._client.pipeline(transaction=False) as pipe:  # one round trip for all
            for session in found:
                pipe.hgetall(keys.session_processes(session["name"]))
            answers = pipe.execute()
        shown: list[dict[str, Any]] = []
        for session, raw in zip(found, answers, strict=True):
            records = sorted(
                (ProcessRecord.model_validate_json(value) for value in raw.values()),
                key=lambda record: (record.started_at, record.id),
            )
            running = [r for r in records if r.state in ("starting", "running")]
            ended = [r for r in records if r.state not in ("starting", "running")]
            session["processes_running"] = len(running)
            session["processes_ended"] = len(ended)
            kept = {r.id for r in running} | {r.id for r in ended[-ENDED_SHOWN:]}
            shown.extend(_process_row(r) for r in records if r.id in kept)
        return shown

    def _follow(self) -> None:
        """The events, as they come, to every viewer (on the loop's thread)."""
        client = connect(self._url, role=FOLLOWER)
        keys = Keys(self._settings.redis.key_prefix)
        since = "$"
        try:
            with contextlib.suppress(redis.RedisError):  # else the history starts empty
                history = newest_events(client, keys)
                self._recent.extend(event for _, event in history)
                since = history[-1][0] if history else since  # no event missed in between
            while not self._stop.is_set():
                try:
                    batches = follow_event_batches(
                        client, keys, since=since, block_ms=500, stop=self._stop
                    )
                    for batch in batches:
                        since = batch[-1][0]
                        for _, event in batch:
                            self._on_event(event)
                            self._recent.append(event)
                        # A read's events as one message to each viewer: one wake-up of the
                        # loop and one write per viewer, not one per event.
                        self._deliver(
                            "".join(
                                f"event: event\ndata: {event.model_dump_json()}\n\n"
                                for _, event in batch
                            )
                        )
                        if len(batch) < READ_COUNT:
                            # Let the next events gather in Redis: a busy pool's events reach
                            # the page in a few reads a second, not one read each.
                            self._stop.wait(GATHER_S)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    log.warning("toolpool dashboard: events unreadable, retrying: %s", exc)
                    self._stop.wait(1.0)
        finally:
            client.close()

    def _deliver(self, message: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._send, message)


def _process_row(record: ProcessRecord) -> dict[str, Any]:
    """A process as the page shows it; its age from this clock, not the browser's."""
    return {
        "session": record.session,
        "id": record.id,
        "host": record.host,
        "state": record.state,
        "pid": record.pid,
        "age_s": round(record.age_s, 1),
        "ending": record.ending(),
        # While it runs: as of the session's last process call or the host's last sweep.
        "output_bytes": record.output_bytes,
        "command": record.command,
    }


def _message(kind: str, data: Any) -> str:
    """One server-sent event."""
    return f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n"
