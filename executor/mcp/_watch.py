"""Telling MCP clients that the pool's tools changed (``notifications/tools/list_changed``).

``ToolsWatch`` reads which tool sets the pool's live workers publish once every ``WATCH_S``
(1 s) and, when that changed, tells every connected client once:

- a client on the 2026-07-28 protocol hears it on the ``subscriptions/listen`` stream it opened
  for ``toolsListChanged`` (the SDK's ``ListenHandler``, fed from the watch's bus);
- a client on the handshake protocol (2025 era) hears it on its connection's own channel from
  the moment it sent ``notifications/initialized``: the pipe over stdio, the GET stream it
  opened over HTTP (a client without one has nowhere to hear it).

The tools change when a worker with a tool set not served yet joins, or the last worker with a
tool set leaves; another worker like those already there changes nothing. The delay: a worker
that starts, or stops (it withdraws its entry), is noticed within ``WATCH_S``; one killed
outright within ``WATCH_S`` after its entry expires (``ENTRY_TTL_S``: 15 s), so up to 16 s.
The catalog has no start or stop events to wait on (the events stream carries calls and the
lock only), so the watch polls, cheaply: each worker's entry is read once, when its name first
appears; after that a read asks Redis only which workers are listed and still alive.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
import redis
from anyio.abc import TaskStatus
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ServerEvent,
    ToolsListChanged,
)
from pydantic import ValidationError

from executor._settings import Settings
from executor.client._outage import connect, required_url
from executor.wire import Keys, WorkerCatalog

log = logging.getLogger(__name__)

# How often the catalog is read: the delay before a started or stopped worker is announced.
WATCH_S = 1.0
# At most this many handshake-era connections are told at once (as many listen streams too).
MAX_CONNECTIONS = 1024

# A published tool set: (the host's session queue, or ""; takes pool calls; catalog version).
ToolSet = tuple[str, bool, str]


class PoolToolSets:
    """The tool sets the live workers of one pool queue publish, read cheaply enough to do it
    every second: an entry is read once, when its worker's name first appears, since a worker
    publishes one tool set for its whole life."""

    def __init__(self, client: redis.Redis, keys: Keys, queue: str) -> None:
        self._client = client
        self._keys = keys
        self._queue = queue
        # Each live worker's tool set (None: the worker serves another queue).
        self._known: dict[str, ToolSet | None] = {}

    def read(self) -> frozenset[ToolSet]:
        """The distinct tool sets live now; two round trips to Redis."""
        names = {
            n.decode() if isinstance(n, bytes) else str(n)
            for n in self._client.smembers(self._keys.catalog_index)
        }
        known = sorted(names & self._known.keys())
        new = sorted(names - self._known.keys())
        with self._client.pipeline(transaction=False) as pipe:
            for name in known:
                pipe.exists(self._keys.catalog(name))
            for name in new:
                pipe.get(self._keys.catalog(name))
            replies = pipe.execute()
        live: dict[str, ToolSet | None] = {}
        for name, alive in zip(known, replies[: len(known)], strict=True):
            if alive:  # a name whose entry expired (a killed worker) is gone
                live[name] = self._known[name]
        for name, raw in zip(new, replies[len(known) :], strict=True):
            if raw is not None:
                live[name] = self._tool_set(name, raw)
        self._known = live
        return frozenset(found for found in live.values() if found is not None)

    def _tool_set(self, name: str, raw: bytes) -> ToolSet | None:
        try:
            entry = WorkerCatalog.model_validate_json(raw)
        except ValidationError as exc:
            log.warning("toolpool mcp: ignoring the unreadable catalog of worker %s: %s", name, exc)
            return None
        if entry.queue != self._queue:
            return None
        return (entry.host_queue, entry.pool_calls, entry.version)


class ToolsWatch:
    """One MCP server's watch on its pool's tools: ``running()`` for the server's lifetime,
    ``listen`` as its ``subscriptions/listen`` handler, ``tell_connection`` for each
    handshake-era connection."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus, max_subscriptions=MAX_CONNECTIONS)
        self._connections = 0
        self._failing = False

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Watch while inside: the first read is done on entry (a change from then on is
        announced); on exit the listen streams end gracefully and the watch stops."""
        client = connect(required_url(None, self._settings))
        keys = Keys(self._settings.redis.key_prefix)
        sets = PoolToolSets(client, keys, keys.queue_name(self._settings.client.queue))
        try:
            async with anyio.create_task_group() as group:
                await group.start(self._watch, sets)
                try:
                    yield
                finally:
                    self.end_streams()
                    group.cancel_scope.cancel()
        finally:
            client.close()

    def end_streams(self) -> None:
        """End every open listen stream gracefully (the client sees the stream's result): a
        server shutting down must, as the streams never end by themselves."""
        self.listen.close()

    async def tell_connection(self, session: ServerSession) -> None:
        """Send ``notifications/tools/list_changed`` on ``session``'s connection after each
        change, until the connection closes (which cancels this)."""
        if self._connections >= MAX_CONNECTIONS:
            log.warning(
                "toolpool mcp: %d connections are told of tool changes already; this one is not",
                MAX_CONNECTIONS,
            )
            return
        # One pending change is enough: the client reads the whole list again anyway.
        send, receive = anyio.create_memory_object_stream[None](1)

        def deliver(event: ServerEvent) -> None:
            if isinstance(event, ToolsListChanged):
                with suppress(anyio.WouldBlock, anyio.BrokenResourceError):
                    send.send_nowait(None)

        self._connections += 1
        unsubscribe = self.bus.subscribe(deliver)
        try:
            async with receive:
                async for _ in receive:
                    await session.send_tool_list_changed()
        finally:
            unsubscribe()
            send.close()
            self._connections -= 1

    async def _watch(
        self, sets: PoolToolSets, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        last = await self._read(sets)
        task_status.started()
        while True:
            await anyio.sleep(WATCH_S)
            now = await self._read(sets)
            if now is None:
                continue
            if last is not None and now != last:
                await self.bus.publish(ToolsListChanged())
            last = now

    async def _read(self, sets: PoolToolSets) -> frozenset[ToolSet] | None:
        """The tool sets now; None (warned once per outage) while Redis cannot be read."""
        try:
            found = await anyio.to_thread.run_sync(sets.read)
        except redis.RedisError as exc:
            if not self._failing:
                log.warning(
                    "toolpool mcp: cannot read the workers' catalog, so tool changes "
                    "are not announced until Redis answers again: %s",
                    exc,
                )
            self._failing = True
            return None
        self._failing = False
        return found
