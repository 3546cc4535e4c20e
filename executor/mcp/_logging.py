"""MCP's ``logging`` capability: the pool's log lines, as ``notifications/message``.

A client gets two kinds of lines, each at or above the level it asked for:

- **its calls' events**, read from the pool's events stream while each call waits: started on
  a worker, waiting for the lock, got the lock, finished, and the faults (worker lost, lock
  lost, run again, put back on the queue). They ride the call's own response (over HTTP its
  SSE stream), with logger ``toolpool.call``.
- **the server's own log records** (loggers ``executor`` and ``workers`` in the server
  process: Redis away and back, an unreadable catalog...), at the levels the server logs
  anyway, on the connection's channel (stdio; over HTTP the GET stream), with the record's
  logger name. Handshake-era clients only: the 2026-07-28 protocol has no channel for them.

How a client asks: on the 2025 handshake, ``logging/setLevel`` (nothing is sent before it);
on the 2026-07-28 protocol, a request's ``_meta`` ``io.modelcontextprotocol/logLevel`` (that
request's events only). ``CallEvents`` follows the stream once for every waiting call that
asked (one blocking read a second, started at the first such call), and hands each call its
own events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, cast, get_args

import anyio
import mcp_types as types
import redis
import redis.asyncio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from executor import _connect as factory
from executor._settings import Settings
from executor.client._outage import required_url
from executor.wire import Event, Keys

log = logging.getLogger(__name__)

Level = types.LoggingLevel
# Severity-ascending, RFC 5424's order, as the protocol lists them.
LEVELS: tuple[Level, ...] = get_args(types.LoggingLevel)
CALL_LOGGER = "toolpool.call"
# The server process's loggers whose records clients may hear.
RELAYED = ("executor", "workers")
# Lines waiting for a slow client: past this many, later ones are dropped (never blocking).
_BUFFER = 256
# One blocking read of the events stream waits at most this long (ms).
_BLOCK_MS = 1000
# The most clients whose level is kept.
MAX_CLIENTS = 1024


def at_least(level: Level, floor: Level) -> bool:
    """Whether a line at ``level`` passes a client's ``floor``."""
    return LEVELS.index(level) >= LEVELS.index(floor)


def python_level(levelno: int) -> Level:
    """A Python log record's level as MCP names it."""
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    if levelno >= logging.INFO:
        return "info"
    return "debug"


def _ms(value: Any) -> str:
    try:
        return f"{float(value):,.0f} ms"
    except (TypeError, ValueError):
        return "? ms"


def describe(event: Event) -> tuple[Level, str] | None:
    """A call's event as a log line: its level and text; None for events a client need not
    hear (approvals its own server made, for instance)."""
    data = event.data
    where = f"worker {event.worker}" + (f" on {event.host}" if event.host else "")
    name = event.event
    if name == "tool_execution_started":
        return "debug", f"{event.tool} started on {where}"
    lock = f"the {data['mode']} lock" if data.get("mode") else "the lock"
    if name == "lock_wait":
        return "info", f"{event.tool} waits for {lock} (another call holds it)"
    if name == "lock_acquired":
        return "debug", f"{event.tool} got {lock}"
    if name == "tool_result":
        status = data.get("status", "?")
        kind = f" ({data['error_type']})" if data.get("error_type") else ""
        cut = ", its result cut" if data.get("truncated") else ""
        level: Level = "info" if status == "ok" else "warning"
        return level, (
            f"{event.tool} finished: {status}{kind} after {_ms(data.get('duration_ms'))}{cut}"
        )
    if name == "lock_lost":
        why = data.get("reason") or "its lease ended"
        return "warning", f"{event.tool} lost the lock: {why}"
    if name == "call_lost":
        why = f": {data['reason']}" if data.get("reason") else ""
        return "error", f"{event.tool}: the worker running it was lost{why}"
    if name == "call_rerun":
        return "warning", f"{event.tool} runs again (its lease was lost mid-run)"
    if name == "job_requeued":
        why = data.get("reason") or "its worker died before it started"
        return "warning", f"{event.tool} was put back on the queue: {why}"
    if name == "call_duplicate":
        return "notice", f"{event.tool} was delivered twice; the second delivery waits"
    if name == "result_dropped":
        return "notice", f"{event.tool}: a second result was dropped, the first one stands"
    if name == "call_refused":
        return "warning", f"{event.tool or 'a call'} was refused by a worker"
    return None


def event_line(event: Event, text: str) -> dict[str, Any]:
    """What a call's log line carries: the text, then the event itself for a program."""
    line: dict[str, Any] = {"message": text, "event": event.event, "call_id": event.call_id}
    for key in ("tool", "worker", "host"):
        if value := getattr(event, key):
            line[key] = value
    line.update({k: v for k, v in event.data.items() if v is not None})
    return line


def message(level: Level, data: Any, logger: str) -> types.LoggingMessageNotification:
    return types.LoggingMessageNotification(
        params=types.LoggingMessageNotificationParams(level=level, data=data, logger=logger)
    )


def _floor_of(meta: Any) -> Level | None:
    requested = (meta or {}).get(types.LOG_LEVEL_META_KEY)
    return cast(Level, requested) if requested in LEVELS else None


class ClientLevels:
    """The level each handshake-era client set with ``logging/setLevel``, and its connection
    (to hear the server's own records): what the server sends to whom."""

    def __init__(self) -> None:
        self._levels: dict[str, Level] = {}
        # A request's session object of each client that set a level (its connection's
        # channel): the newest MAX_CLIENTS, so clients long gone do not pile up.
        self._connections: dict[str, ServerSession] = {}

    def set(self, client: str, session: ServerSession, level: Level) -> None:
        self._levels.pop(client, None)
        self._connections.pop(client, None)
        self._levels[client] = level
        self._connections[client] = session
        while len(self._connections) > MAX_CLIENTS:
            oldest = next(iter(self._connections))
            del self._connections[oldest], self._levels[oldest]

    def floor(self, ctx: ServerRequestContext[Any], client: str) -> Level | None:
        """The lowest level this request's client hears for it; None: nothing."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return _floor_of(ctx.meta)
        return self._levels.get(client)

    def connections(self) -> list[tuple[ServerSession, Level]]:
        return [(session, self._levels[client]) for client, session in self._connections.items()]


class RecordRelay(logging.Handler):
    """Hands the server's own log records to an async task on the server's loop (from any
    thread: the calls wait in threads), which sends each to the connections whose level it
    passes. Never blocks: a record met with a full buffer is dropped."""

    def __init__(self, levels: ClientLevels) -> None:
        super().__init__(logging.DEBUG)
        self._levels = levels
        self._loop: asyncio.AbstractEventLoop | None = None
        self._send: MemoryObjectSendStream[logging.LogRecord] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        loop, send = self._loop, self._send
        if loop is None or send is None or record.name == __name__:
            return  # not running, or our own line (which would echo forever)
        with suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._offer, send, record)

    @staticmethod
    def _offer(send: MemoryObjectSendStream[logging.LogRecord], record: logging.LogRecord) -> None:
        with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            send.send_nowait(record)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Relay while inside (the server's lifespan)."""
        send, receive = anyio.create_memory_object_stream[logging.LogRecord](_BUFFER)
        self._loop, self._send = asyncio.get_running_loop(), send
        loggers = [logging.getLogger(name) for name in RELAYED]
        for logger in loggers:
            logger.addHandler(self)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._deliver, receive)
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        finally:
            for logger in loggers:
                logger.removeHandler(self)
            self._loop = self._send = None
            send.close()
            receive.close()

    async def _deliver(self, receive: MemoryObjectReceiveStream[logging.LogRecord]) -> None:
        async with receive:
            async for record in receive:
                level = python_level(record.levelno)
                text = record.getMessage()
                for session, floor in self._levels.connections():
                    if at_least(level, floor):
                        with suppress(Exception):  # one dead connection must not stop the rest
                            await session.send_notification(message(level, text, record.name))


class CallEvents:
    """The events stream, followed once for every waiting call whose client asked for log
    lines: ``watching(call_id)`` before the call is submitted, its events until it ends."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._keys = Keys(settings.redis.key_prefix)
        self._group: TaskGroup | None = None
        self._client: redis.asyncio.Redis | None = None
        self._following = False
        self._starting = anyio.Lock()
        self._calls: dict[str, MemoryObjectSendStream[Event]] = {}
        self._failing = False
        # The last entry the follower has handed on, and an event set each time it moves.
        self._position = (0, 0)
        self._moved = anyio.Event()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Able to follow while inside (the server's lifespan); the follower starts with the
        first call that asks."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        finally:
            self._group = None
            self._following = False
            if self._client is not None:
                await self._client.aclose()
                self._client = None

    @asynccontextmanager
    async def watching(self, call_id: str) -> AsyncIterator[MemoryObjectReceiveStream[Event]]:
        """The events of call ``call_id`` while inside; enter before the call is submitted."""
        await self._follow()
        send, receive = anyio.create_memory_object_stream[Event](_BUFFER)
        self._calls[call_id] = send
        try:
            yield receive
        finally:
            self._calls.pop(call_id, None)
            send.close()
            receive.close()

    async def _follow(self) -> None:
        """Start the follower, from the stream's last entry now: a call submitted after this
        returns has all its events after that entry."""
        async with self._starting:
            if self._following or self._group is None:
                return
            client = self._client = factory.connect_async(
                required_url(None, self._settings), role=factory.FOLLOWER
            )
            try:
                last = await client.xrevrange(self._keys.events, count=1)
            except redis.RedisError as exc:
                self._warn(exc)
                return  # this call goes without its lines; the next one tries again
            since = _decode(last[0][0]) if last else "0-0"
            self._position = _entry(since)
            self._following = True
            self._group.start_soon(self._run, client, since)

    async def caught_up(self) -> None:
        """Return once the follower has handed on every entry the stream holds now: a call
        answered now has then had all its events handed on (its last is written with its
        result), or had none (answered before it reached a worker)."""
        client = self._client
        if client is None or not self._following:
            return
        try:
            last = await client.xrevrange(self._keys.events, count=1)
        except redis.RedisError as exc:
            self._warn(exc)
            return
        target = _entry(_decode(last[0][0])) if last else (0, 0)
        while self._following and self._position < target:
            await self._moved.wait()

    async def _run(self, client: redis.asyncio.Redis, since: str) -> None:
        while True:
            try:
                reply: list[tuple[Any, list[tuple[Any, dict[Any, Any]]]]] = await client.xread(  # type: ignore[assignment]
                    {self._keys.events: since}, block=_BLOCK_MS, count=100
                )
            except redis.RedisError as exc:
                self._warn(exc)
                await anyio.sleep(_BLOCK_MS / 1000)
                continue
            self._failing = False
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    since = _decode(entry_id)
                    self._hand(fields)
            if reply:
                self._position = _entry(since)
                moved, self._moved = self._moved, anyio.Event()
                moved.set()

    def _hand(self, fields: dict[Any, Any]) -> None:
        raw = fields.get(b"event") or fields.get("event")
        if raw is None:
            return
        try:
            event = Event.model_validate_json(raw)
        except ValueError:
            return
        send = self._calls.get(event.call_id)
        if send is not None:
            with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.send_nowait(event)

    def _warn(self, exc: Exception) -> None:
        if not self._failing:
            log.warning(
                "toolpool mcp: cannot read the pool's events, so calls' log lines are not "
                "sent until Redis answers again: %s",
                exc,
            )
        self._failing = True


# A call's last event: none comes after it.
_LAST = frozenset({"tool_result", "call_lost"})


async def send_call_lines(
    events: MemoryObjectReceiveStream[Event],
    floor: Level,
    send: Callable[[types.LoggingMessageNotification], Awaitable[None]],
    *,
    started: anyio.Event,
) -> None:
    """Send each of a call's events that passes ``floor``, until its last one; ``started``
    is set at its first (a call answered without reaching a worker has none)."""
    async for event in events:
        started.set()
        described = describe(event)
        if described is not None and at_least(described[0], floor):
            level, text = described
            await send(message(level, event_line(event, text), CALL_LOGGER))
        if event.event in _LAST:
            return


def _entry(entry_id: str) -> tuple[int, int]:
    """A stream entry's id as a pair that sorts as Redis orders them."""
    millis, _, sequence = entry_id.partition("-")
    return int(millis), int(sequence or 0)


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
