"""How the MCP server is reached: stdio for one client, streamable HTTP for many."""

from __future__ import annotations

import hmac
import json
import socket
from collections.abc import Callable
from typing import Any, cast

import anyio
import uvicorn
from mcp.server.stdio import stdio_server

from executor._settings import Settings
from executor.mcp._pipes import std_pipes
from executor.mcp._policy import ServerPolicy
from executor.mcp._replay import RETRY_MS, SessionEvents, give_each_session_its_events
from executor.mcp._server import PoolServer
from executor.mcp._turns import turn_routes

ASGIApp = Callable[..., Any]
PATH = "/mcp"


async def serve_stdio(
    settings: Settings,
    *,
    session: str | None = None,
    session_per_client: bool = False,
    policy: ServerPolicy | None = None,
) -> None:
    """Serve one client on this process's stdin and stdout until it closes them."""
    pool = PoolServer(
        settings, session=session, session_per_client=session_per_client, policy=policy
    )
    try:
        async with std_pipes() as pipes:
            # On the loop's own pipes where it can (no thread hop per message), else the SDK's.
            stdin, stdout = pipes or (None, None)
            async with stdio_server(cast(Any, stdin), cast(Any, stdout)) as (read, write):
                await pool.server.run(read, write, pool.server.create_initialization_options())
    finally:
        pool.close()


def http_app(
    settings: Settings,
    *,
    session: str | None = None,
    session_per_client: bool = False,
    token: str | None = None,
    host: str = "127.0.0.1",
    policy: ServerPolicy | None = None,
) -> tuple[ASGIApp, PoolServer]:
    """The streamable-HTTP ASGI app (MCP at ``/mcp``, whole turns at ``/turns``), behind the
    bearer token if one is set. Its lifespan runs the watch on the pool's tools; a server that
    waits for responses in progress before it stops calls ``pool.watch.end_streams()`` first
    (``serve_http`` does)."""
    pool = PoolServer(
        settings, session=session, session_per_client=session_per_client, policy=policy
    )
    app: ASGIApp = pool.server.streamable_http_app(
        streamable_http_path=PATH,
        host=host,
        custom_starlette_routes=turn_routes(pool),
        event_store=SessionEvents(),
        retry_interval=RETRY_MS,
    )
    give_each_session_its_events(pool.server.session_manager)
    app = _cancel_dropped(app, pool)
    if token:
        app = _require_token(app, token)
    return app, pool


def _cancel_dropped(app: ASGIApp, pool: PoolServer) -> ASGIApp:
    """Cancel a session's call whose client closes the request's stream before its answer
    (an aborted fetch sends no ``notifications/cancelled``), unless the client can resume
    the stream (protocol 2025-11-25 on): for it a lost stream is no cancel, as the spec says."""

    async def watched(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        client = headers.get(b"mcp-session-id", b"").decode()
        if scope["type"] != "http" or scope.get("method") != "POST" or not client:
            await app(scope, receive, send)
            return
        body = bytearray()
        answered = False

        async def receiving() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            elif message["type"] == "http.disconnect" and not answered:
                request_id = _call_id(bytes(body))
                version = headers.get(b"mcp-protocol-version", b"").decode()
                if request_id is not None and version < RESUMABLE:
                    pool.drop_request(client, request_id)
            return message

        async def sending(message: dict[str, Any]) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered = True
            await send(message)

        await app(scope, receiving, sending)

    return watched


# The first protocol whose clients resume a lost stream (with the priming event's id).
RESUMABLE = "2025-11-25"


def _call_id(body: bytes) -> str | None:
    """The id of the ``tools/call`` request in a POST's body, if it is one."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("method") == "tools/call":
        return None if message.get("id") is None else str(message["id"])
    return None


# What a request without this server's token is told, in the 401's body and its
# ``WWW-Authenticate`` header (hosts show one or the other): what was wrong, and how to pass it.
_SEND = (
    "send the header Authorization: Bearer TOKEN, TOKEN being the value of the server's "
    "TOOLPOOL_MCP_TOKEN (or --token); in an MCP host, add that header to the server's entry"
)
_HOW = f"{_SEND} (this server takes no OAuth)."
_MISSING_TOKEN = f"toolpool mcp needs its bearer token, and this request has none: {_HOW}"
_NOT_BEARER = (
    f"toolpool mcp needs its bearer token, and this request's Authorization header is not "
    f"of the form Bearer TOKEN: {_HOW}"
)
_WRONG_TOKEN = (
    f"toolpool mcp refused the bearer token this request sent, which is not its own: {_HOW}"
)
# OAuth discovery and registration, which a host starts on a 401: answered at once, with the
# same message, where a host that finds no OAuth shows it.
_OAUTH_PATHS = ("/.well-known/", "/register", "/authorize", "/token")
_NO_OAUTH = (
    "toolpool mcp takes no OAuth (no authorization server, no client registration): it "
    f"needs its bearer token; {_SEND}."
)


def _require_token(app: ASGIApp, token: str) -> ASGIApp:
    """Answer 401 to an HTTP request without ``Authorization: Bearer TOKEN``, saying what was
    wrong and how to send it, and 404 to a host's OAuth discovery and registration."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = str(scope.get("path") or "")
            if path.startswith(_OAUTH_PATHS):
                await _refuse(send, 404, "invalid_request", _NO_OAUTH, challenge=False)
                return
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                if not given:
                    await _refuse(send, 401, None, _MISSING_TOKEN)
                elif given[:7].lower() != b"bearer ":
                    await _refuse(send, 401, "invalid_request", _NOT_BEARER)
                else:
                    await _refuse(send, 401, "invalid_token", _WRONG_TOKEN)
                return
        await app(scope, receive, send)

    return guarded


async def _refuse(
    send: Any, status: int, error: str | None, description: str, *, challenge: bool = True
) -> None:
    """An OAuth-style error answer (RFC 6750): ``error`` and ``error_description`` in the JSON
    body and, for a 401, in the ``WWW-Authenticate: Bearer`` challenge (no ``error`` code when
    the request sent no credentials at all, as RFC 6750 says)."""
    body: dict[str, str] = {"error": error or "invalid_request", "error_description": description}
    headers = [(b"content-type", b"application/json")]
    if challenge:
        params = ['realm="toolpool"']
        if error is not None:
            params.append(f'error="{error}"')
        params.append(f'error_description="{description}"')
        headers.append((b"www-authenticate", ("Bearer " + ", ".join(params)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


class _Uvicorn(uvicorn.Server):
    """uvicorn, ending the calls in flight (cancelled on the pool) and the pool's
    ``subscriptions/listen`` streams when it shuts down: it waits for every response in
    progress to end first, and a listen stream never ends by itself, a call only when its
    tool returns."""

    def __init__(self, config: uvicorn.Config, pool: PoolServer) -> None:
        super().__init__(config)
        self._pool = pool

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._pool.cancel_calls()
        self._pool.watch.end_streams()
        await super().shutdown(sockets)


async def serve_http(
    settings: Settings,
    *,
    host: str,
    port: int,
    session: str | None = None,
    session_per_client: bool = False,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
    policy: ServerPolicy | None = None,
) -> None:
    """Serve streamable HTTP on ``host:port`` until cancelled; ``on_ready(url)`` once it
    listens."""
    app, pool = http_app(
        settings,
        session=session,
        session_per_client=session_per_client,
        token=token,
        host=host,
        policy=policy,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = _Uvicorn(config, pool)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve)
            while not server.started:
                if server.should_exit:
                    return
                await anyio.sleep(0.02)
            if on_ready is not None:
                on_ready(f"http://{host}:{port}{PATH}")
    finally:
        pool.close()
