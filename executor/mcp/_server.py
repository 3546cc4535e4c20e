"""The pool as an MCP server: its live tools listed, each ``tools/call`` run as a turn on it.

Built on the official ``mcp`` SDK's low-level server. ``tools/list`` reads the live workers'
catalog on every request (a tool a worker stops serving disappears), with the MCP hints from
each tool's flags: ``readOnlyHint`` for read-only tools, ``destructiveHint`` for the others.
``tools/call`` submits a one-call turn and waits for its result in a thread, so parallel calls
from one client run in parallel (and run together on the pool when their tools are
concurrency-safe); the result's text is the ``ToolResult``'s content, truncation note
included, and ``isError`` is set for error results. A client's cancellation cancels the turn
on the pool. While a call waits, the client gets progress notifications, if it asked for them.
When the pool's tools change (a worker with other tools joins, the last one serving a tool
leaves), clients that can hear it get ``notifications/tools/list_changed`` (``ToolsWatch``), and
the server declares ``tools.listChanged`` in both protocol eras.

The workspace's files are its read-only resources (``resources/list``, paged, and
``resources/read``, each answered with ``list_directory`` and ``read_file`` calls on the pool:
``_resources``), and it declares ``logging``: a client that set a level hears its calls' events
and the server's own log records (``_logging``).

The orchestrator's ``Executor`` is not shared between threads: each call borrows one from a
small pool (``ExecutorPool``) and gives it back.
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST

from executor._errors import ToolpoolError
from executor._settings import Settings
from executor.client import Executor, Sessions, Turn
from executor.client._async import ExecutorPool
from executor.client._executor import in_call_order, take_fresh
from executor.contract import ToolInfo
from executor.mcp import _resources
from executor.mcp._logging import (
    CallEvents,
    ClientLevels,
    Level,
    RecordRelay,
    send_call_lines,
)
from executor.mcp._policy import ServerPolicy
from executor.mcp._resources import Resources
from executor.mcp._watch import ToolsWatch
from executor.wire import ToolCall, ToolResult

NAME = "toolpool"
_T = TypeVar("_T")
# How often a waiting call tells the client it is still waiting (if it asked for progress).
_PROGRESS_S = 1.0
# After a call's result, how long its last event (written with the result) may take to be
# read off the events stream and sent, for a client that hears the call's log lines.
_LAST_LINES_S = 2.0
# How often a call's waiting thread checks whether its call was cancelled: a thread that waits
# on keeps the process from exiting after the server stops.
_STOP_CHECK_S = 0.25
# How long ``close`` waits for the calls' threads to cancel their calls on the pool.
_CLOSE_S = 5.0
_DROPPED = (
    "This {tool} call was cancelled: its client closed the request's stream and did not resume it."
)
_STOPPING = (
    "The MCP server stopped while this {tool} call ran: the call was cancelled. "
    "Call it again once the server is back."
)


def mcp_tool(info: ToolInfo) -> types.Tool:
    """A tool as MCP lists it: schema, description and the hints its flags give."""
    return types.Tool(
        name=info.name,
        description=info.description,
        input_schema=info.parameters,
        annotations=types.ToolAnnotations(
            read_only_hint=info.is_read_only,
            destructive_hint=not info.is_read_only,
        ),
    )


def mcp_result(result: ToolResult) -> types.CallToolResult:
    """A ``ToolResult`` as MCP answers it: its text, and ``isError`` for an error result."""
    return types.CallToolResult(
        content=[types.TextContent(text=result.content)], is_error=result.is_error
    )


class _ListChangedServer(Server[Any]):
    """The SDK's low-level server, declaring ``tools.listChanged`` in the handshake whoever
    builds the handshake's options: the streamable-HTTP session manager builds its own, with
    none passed. (At 2026-07-28 the SDK derives the flag from the listen handler.)"""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class PoolServer:
    """The MCP server of one pool: every call in one named ``session``, in a session of its
    own for each client connection (``session_per_client``: made at the connection's first
    request, deleted after the settings' idle time without calls), or in no session."""

    def __init__(
        self,
        settings: Settings,
        *,
        session: str | None = None,
        session_per_client: bool = False,
        policy: ServerPolicy | None = None,
        resources_page: int = _resources.PAGE_SIZE,
    ) -> None:
        if session is not None and session_per_client:
            raise ValueError("name one session, or ask for one per client; not both")
        self.settings = settings
        self.session = session
        self.session_per_client = session_per_client
        self.policy = policy or ServerPolicy()
        self._client_sessions: dict[str, str] = {}
        self._creating = anyio.Lock()
        self._in_flight: set[anyio.CancelScope] = set()
        # The calls in flight of HTTP sessions, by (MCP session id, request id): cancelled
        # when their client drops the request's stream (a client that aborts sends no cancel).
        self._droppable: dict[tuple[str, str], Callable[[], None]] = {}
        self._threads = threading.Condition()
        self._stops: set[threading.Event] = set()
        rules = self.policy
        self.executors = ExecutorPool(
            lambda: Executor(settings=settings, session=session, check=rules.refusal)
        )
        self.watch = ToolsWatch(settings)
        self.levels = ClientLevels()
        self.calls = CallEvents(settings)
        self.relay = RecordRelay(self.levels)
        self.resources_page = resources_page
        resources: dict[str, Any] = {}
        if self._offers_resources():
            resources = {
                "on_list_resources": self._list_resources,
                "on_list_resource_templates": self._list_resource_templates,
                "on_read_resource": self._read_resource,
            }
        with warnings.catch_warnings():
            # Logging is deprecated by the 2026-07-28 protocol (a request's _meta asks for
            # lines instead), but the 2025 handshake's clients set their level this way.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server: Server[Any] = _ListChangedServer(
                NAME,
                version=_version(),
                instructions="Tools run on a toolpool worker pool: reads run together, writes "
                "and shell commands one at a time; long results come back cut, with a note.",
                lifespan=self._lifespan,
                on_list_tools=self._list_tools,
                on_call_tool=self._call_tool,
                on_subscriptions_listen=self.watch.listen,
                on_set_logging_level=self._set_level,
                **resources,
            )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._client_ready
        )

    def close(self) -> None:
        """Stop the calls' waiting threads (each cancels its call on the pool), give them
        ``_CLOSE_S`` to do so, then close the executors."""
        with self._threads:
            for stop in self._stops:
                stop.set()
            self._threads.wait_for(lambda: not self._stops, timeout=_CLOSE_S)
        self.executors.close()

    @contextmanager
    def _waiting(self, stop: threading.Event) -> Iterator[None]:
        """A call's thread while it runs: ``close`` stops it and waits for it to end."""
        with self._threads:
            self._stops.add(stop)
        try:
            yield
        finally:
            with self._threads:
                self._stops.discard(stop)
                self._threads.notify_all()

    @asynccontextmanager
    async def _lifespan(self, server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """The server's life (stdio: the connection's; HTTP: the app's): the tools watched,
        the calls' events followed for clients that want their log lines, the server's own
        log records relayed."""
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.watch.running())
            await stack.enter_async_context(self.calls.running())
            await stack.enter_async_context(self.relay.running())
            yield {}

    async def _client_ready(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams
    ) -> None:
        """A handshake-era client finished its handshake: tell it of tool changes while its
        connection lives (the SDK runs this as a task of the connection's, cancelled at its
        end)."""
        await self.watch.tell_connection(ctx.session)

    async def _session_of(self, ctx: ServerRequestContext[Any]) -> str | None:
        """The session this connection's calls run in (made now, for its first request)."""
        if not self.session_per_client:
            return self.session
        client = _client_of(ctx)
        async with self._creating:
            name = self._client_sessions.get(client)
            if name is None:
                name = f"mcp-{uuid.uuid4().hex[:12]}"
                await anyio.to_thread.run_sync(self._create_session, name)
                self._client_sessions[client] = name
            return name

    def _create_session(self, name: str) -> None:
        with Sessions(settings=self.settings) as sessions:
            sessions.create(name)

    async def _request_session(self, ctx: ServerRequestContext[Any]) -> str | None:
        """``_session_of`` for a request answered with a JSON-RPC error: a request that cannot
        be given a session is refused saying why (``-32600``), not ``Internal server error``."""
        try:
            return await self._session_of(ctx)
        except ToolpoolError as exc:
            raise MCPError(INVALID_REQUEST, str(exc)) from None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = await self._request_session(ctx)
        infos = await _answered(lambda: self._tools(session))
        return types.ListToolsResult(tools=[mcp_tool(info) for info in infos])

    def _tools(self, session: str | None) -> list[ToolInfo]:
        with self.executors.borrow() as executor:
            return [info for info in executor.tools(session=session) if self.policy.offers(info)]

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call = ToolCall(name=params.name, arguments=params.arguments or {})
        stop = threading.Event()
        floor = self.levels.floor(ctx, _log_client(ctx))

        def run_turn(session: str | None) -> list[ToolResult]:
            # Submit, collect and cancel on one thread, with one executor (an executor serves
            # one thread): one hop from the loop per call, and a cancel that is sure to be
            # sent whenever the loop gives the call up.
            with self._waiting(stop), self.executors.borrow() as executor:
                turn = executor.submit([call], session=session)
                return _collect(executor, turn, stop)

        why = [_STOPPING]
        key = (_log_client(ctx), str(ctx.request_id))

        def dropped() -> None:
            why[0] = _DROPPED
            stopping.cancel()

        with anyio.CancelScope() as stopping:
            self._in_flight.add(stopping)
            if key[0] and key[0] != "stdio":
                self._droppable[key] = dropped
            try:
                session = await self._session_of(ctx)
                async with self._call_lines(ctx, call.id, floor):
                    results = await self._wait(ctx, lambda: run_turn(session))
                return mcp_result(results[0])
            except ToolpoolError as exc:
                # Refused before it reached the pool (no worker, an unknown session...).
                return types.CallToolResult(
                    content=[types.TextContent(text=str(exc))], is_error=True
                )
            except anyio.get_cancelled_exc_class():
                # The client cancelled the request, or the server stops: the waiting thread
                # cancels the call on the pool too.
                stop.set()
                raise
            finally:
                self._in_flight.discard(stopping)
                if self._droppable.get(key) is dropped:
                    del self._droppable[key]
        # Only the server's stop or a dropped stream cancels ``stopping`` itself: the answer
        # says why (a resumed stream still gets it).
        return types.CallToolResult(
            content=[types.TextContent(text=why[0].format(tool=call.name))], is_error=True
        )

    def drop_request(self, client: str, request_id: str) -> None:
        """The client of MCP session ``client`` dropped the stream of its request
        ``request_id`` and did not resume it: cancel that call, as a cancel would."""
        cancel = self._droppable.get((client, request_id))
        if cancel is not None:
            cancel()

    def cancel_calls(self) -> None:
        """Cancel every call in flight, on the pool too (the server stops): each is answered
        an error result saying so, which ends its response."""
        for scope in list(self._in_flight):
            scope.cancel()

    @asynccontextmanager
    async def _call_lines(
        self, ctx: ServerRequestContext[Any], call_id: str, floor: Level | None
    ) -> AsyncIterator[None]:
        """While inside, the call's events go to the client as log lines at ``floor`` and
        above, on the call's own response (nothing without a floor)."""
        if floor is None:
            yield
            return
        related = None if ctx.request_id is None else str(ctx.request_id)

        async def send(line: types.LoggingMessageNotification) -> None:
            await ctx.session.send_notification(line, related_request_id=related)

        async with self.calls.watching(call_id) as events, anyio.create_task_group() as group:
            ended = anyio.Event()
            started = anyio.Event()

            async def forward() -> None:
                await send_call_lines(events, floor, send, started=started)
                ended.set()

            group.start_soon(forward)
            try:
                yield
                # Its last event is written with its result: wait for it to be read. A call
                # whose first event the follower has not read yet (a busy server) waits until
                # the follower has read what the stream holds now, its events if it has any.
                with anyio.move_on_after(_LAST_LINES_S):
                    if not started.is_set():
                        await self.calls.caught_up()
                    if started.is_set():
                        await ended.wait()
            finally:
                group.cancel_scope.cancel()

    async def _set_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """A handshake-era client's ``logging/setLevel``: its lines from now on."""
        self.levels.set(_log_client(ctx), ctx.session, params.level)
        return types.EmptyResult()

    def _offers_resources(self) -> bool:
        """Whether the policy lets clients call the tools resources are read with."""
        rules = self.policy
        return all(
            (rules.allow is None or name in rules.allow) and name not in rules.deny
            for name in _resources.NEEDED
        )

    async def _resources(self, ctx: ServerRequestContext[Any]) -> Resources:
        """The resources as this request's client sees them: its session's workspace."""
        session = await self._request_session(ctx)

        def run(call: ToolCall) -> ToolResult:
            with self.executors.borrow() as executor:
                return executor.run([call], session=session)[0]

        return Resources(run, page_size=self.resources_page)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        resources = await self._resources(ctx)
        cursor = None if params is None else params.cursor
        return await _answered(lambda: resources.list_page(cursor))

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[_resources.template()])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        _resources.path_of(params.uri)  # a URI not ours is refused before any call
        resources = await self._resources(ctx)
        return await _answered(lambda: resources.read(params.uri))

    async def _wait(
        self, ctx: ServerRequestContext[Any], work: Callable[[], list[ToolResult]]
    ) -> list[ToolResult]:
        """Run the turn on a thread; meanwhile, progress for a client that asked for it."""
        token = (ctx.meta or {}).get("progress_token")
        if token is None:  # no progress asked for: no task beside the wait
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        done = anyio.Event()
        started = time.monotonic()

        async def progress() -> None:
            beat = 0
            while not done.is_set():
                with anyio.move_on_after(_PROGRESS_S):
                    await done.wait()
                if done.is_set():
                    return
                beat += 1
                waited = time.monotonic() - started
                await ctx.session.send_progress_notification(
                    token,
                    beat,
                    None,
                    f"waiting on the pool for {waited:.0f} s",
                    related_request_id=None if ctx.request_id is None else str(ctx.request_id),
                )

        async with anyio.create_task_group() as group:
            group.start_soon(progress)
            try:
                results: list[ToolResult] = await anyio.to_thread.run_sync(
                    work, abandon_on_cancel=True
                )
            finally:
                done.set()
        return results


def _collect(executor: Executor, turn: Turn, stop: threading.Event) -> list[ToolResult]:
    """``executor.collect(turn)``, until ``stop`` is set: then the turn is cancelled on the
    pool, and what is returned is not read (the caller gave the call up)."""
    limit = executor.settings.client.turn_timeout
    deadline = time.monotonic() + limit
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= _STOP_CHECK_S:
            # The turn's time is up: the collector answers ``timeout`` for what is missing.
            fresh = take_fresh(turn)
            results = executor.collector.wait(turn.plan, deadline, limit, fresh=fresh)
            return in_call_order(turn.plan, results)
        found = executor.poll(turn, wait=_STOP_CHECK_S)
        if all(result is not None for result in found):
            return [result for result in found if result is not None]
    executor.cancel(turn)
    return []


async def _answered(work: Callable[[], _T]) -> _T:
    """``work`` run on a thread; a pool that cannot be reached (no worker, Redis away) is
    the request's error, saying so."""
    try:
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except ToolpoolError as exc:
        raise MCPError(INTERNAL_ERROR, str(exc)) from None


def _log_client(ctx: ServerRequestContext[Any]) -> str:
    """Whose log level a request's lines follow: over HTTP its MCP session id (none: the
    requests without one share a level), over stdio the one client."""
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return "stdio"
    return str(headers.get("mcp-session-id") or "")


def _client_of(ctx: ServerRequestContext[Any]) -> str:
    """Which client connection a request comes from: over HTTP, its MCP session id; over
    stdio the process serves one client only. (Under the 2026 protocol a request may come on
    a fresh server session object, so that object does not tell clients apart.)"""
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is None:
        return "stdio"
    client = headers.get("mcp-session-id")
    if not client:
        raise ToolpoolError(
            "This server gives each client a session of its own (--session-per-client), "
            "told apart by the MCP session id (Mcp-Session-Id) a client keeps from its "
            "initialize handshake, and this request has none (a client of the 2026-07-28 "
            "protocol sends none); start the server with --session NAME instead, or connect "
            "with a client that keeps a session."
        )
    return str(client)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolpool")
    except PackageNotFoundError:
        return "0"
