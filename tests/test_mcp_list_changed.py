"""``toolpool mcp`` tells its clients when the pool's tools change.

One worker serves the nine built-in tools; a client of the real MCP SDK connects and lists
them. A second worker joins with the test tools as well (``echo``, ``slow_read``...): the
client is told (``notifications/tools/list_changed``) and lists them. That worker stops: the
client is told again, and the test tools are gone. Over stdio and streamable HTTP, in both
protocol eras: a 2026-07-28 client hears it on the ``subscriptions/listen`` stream it opened, a
handshake-era client on its connection (over HTTP, on the GET stream it opened: waited for
here, since a notification sent before the client listens reaches nobody).

Every wait is on the client's own notification, inside a deadline; nothing sleeps.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.support import dist_tools
from tests.support.mcp import ROOT, http_command, http_server, mcp_env, start_builtin_pool
from tests.support.ports import free_port
from tests.support.procs import DIST_TOOLS, MakeWorkers, Workers, stop_process
from tests.support.waiting import PATIENCE_S
from tests.test_mcp import BUILTIN, MODES, run

pytestmark = pytest.mark.proof  # MCP server processes in front of real worker processes

# What the second worker adds to the nine built-in tools.
TEST_TOOLS = {tool.name for tool in dist_tools.registry()} - BUILTIN


class Told:
    """How many times a client was told the tools changed; ``reach(n)`` waits for the n-th."""

    def __init__(self) -> None:
        self.count = 0
        self._more = anyio.Event()

    def heard(self) -> None:
        self.count += 1
        self._more.set()

    async def reach(self, count: int, what: str) -> None:
        with anyio.move_on_after(PATIENCE_S):
            while self.count < count:
                await self._more.wait()
                self._more = anyio.Event()
            return
        raise AssertionError(f"no tools/list_changed within {PATIENCE_S:g} s after {what}")

    def handler(self, mode: str) -> MessageHandlerFnT | None:
        """The client's ``message_handler``: a handshake-era client hears changes there; a
        2026-07-28 one on its listen stream (see ``hearing``: they are teed here too)."""
        if mode != "legacy":
            return None

        async def on_message(message: IncomingMessage) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                self.heard()

        return on_message


@pytest.fixture
def workers(redis_url: str, tmp_path: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    """One worker serving the nine built-in tools, published; the group the second joins."""
    folder = tmp_path / "ws"
    folder.mkdir()
    group = start_builtin_pool(make_workers, redis_url, folder, count=1)
    yield group
    print(group.diagnosis())


@asynccontextmanager
async def stdio_client_of(
    redis_url: str, log: Path, mode: str, told: Told
) -> AsyncIterator[Client]:
    """A client of a ``toolpool mcp`` process it started, over stdio."""
    args = ["-m", "executor.cli", "mcp", "--redis", redis_url]
    params = StdioServerParameters(command=sys.executable, args=args, env=mcp_env(), cwd=ROOT)
    with log.open("a") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode=mode,
            message_handler=told.handler(mode),
            read_timeout_seconds=PATIENCE_S * 2,
        ) as client:
            yield client


@asynccontextmanager
async def http_client_of(url: str, mode: str, told: Told) -> AsyncIterator[Client]:
    """A client of a running HTTP server; a handshake-era one once its GET stream is open."""
    get_stream_open = anyio.Event()

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "GET" and response.status_code == 200:
            get_stream_open.set()

    timeout = httpx2.Timeout(PATIENCE_S, read=PATIENCE_S * 4)
    async with httpx2.AsyncClient(timeout=timeout, event_hooks={"response": [on_response]}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport,
            mode=mode,
            message_handler=told.handler(mode),
            read_timeout_seconds=PATIENCE_S * 2,
        ) as client:
            if mode == "legacy":
                with anyio.fail_after(PATIENCE_S):
                    await get_stream_open.wait()
            yield client


@asynccontextmanager
async def hearing(client: Client, mode: str, told: Told) -> AsyncIterator[None]:
    """While inside, ``told`` counts the changes ``client`` is told of: a 2026-07-28 client on
    the listen stream opened here, a handshake-era one through its message handler."""
    if mode == "legacy":
        yield
        return
    async with client.listen(tools_list_changed=True) as subscription:
        assert subscription.honored.tools_list_changed is True

        async def hear() -> None:
            async for event in subscription:
                if isinstance(event, ToolsListChanged):
                    told.heard()

        async with anyio.create_task_group() as group:
            group.start_soon(hear)
            yield
            group.cancel_scope.cancel()


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def join_and_leave(workers: Workers, clients: list[tuple[Client, Told]]) -> None:
    """The second worker joins, then stops; each client told each time, and its list follows."""
    for client, _ in clients:
        assert await tool_names(client) == BUILTIN
    (second,) = await anyio.to_thread.run_sync(lambda: workers.start(1, registry=DIST_TOOLS))
    for client, told in clients:
        await told.reach(1, "a worker with more tools joined")
        assert await tool_names(client) == BUILTIN | TEST_TOOLS
    await anyio.to_thread.run_sync(stop_process, second.process)
    for client, told in clients:
        await told.reach(2, "the last worker with the test tools stopped")
        assert await tool_names(client) == BUILTIN
        assert told.count == 2  # once per change


def check_declared(client: Client, mode: str) -> None:
    """``client`` speaks the era ``mode`` asks for, and the server declared listChanged."""
    era = MODERN_PROTOCOL_VERSIONS if mode == "auto" else HANDSHAKE_PROTOCOL_VERSIONS
    assert client.protocol_version in era, client.protocol_version
    tools = client.server_capabilities.tools
    assert tools is not None, client.server_capabilities
    assert tools.list_changed is True, client.server_capabilities


@pytest.mark.parametrize("mode", MODES)
def test_a_stdio_client_is_told_when_workers_change_the_tools(
    mode: str, redis_url: str, workers: Workers, server_log: Path
) -> None:
    told = Told()

    async def scenario() -> None:
        async with stdio_client_of(redis_url, server_log, mode, told) as client:
            check_declared(client, mode)
            async with hearing(client, mode, told):
                await join_and_leave(workers, [(client, told)])

    run(scenario)


@pytest.mark.parametrize("mode", MODES)
def test_an_http_client_is_told_when_workers_change_the_tools(
    mode: str, redis_url: str, workers: Workers, server_log: Path
) -> None:
    told = Told()

    async def scenario(url: str) -> None:
        async with http_client_of(url, mode, told) as client:
            check_declared(client, mode)
            async with hearing(client, mode, told):
                await join_and_leave(workers, [(client, told)])

    with http_server(redis_url, server_log) as url:
        run(lambda: scenario(url))


def test_every_http_client_is_told_whatever_its_era(
    redis_url: str, workers: Workers, server_log: Path
) -> None:
    # Two clients of one server at once, one of each era: one change, each told once.
    modern, legacy = Told(), Told()

    async def scenario(url: str) -> None:
        async with (
            http_client_of(url, "auto", modern) as first,
            http_client_of(url, "legacy", legacy) as second,
            hearing(first, "auto", modern),
        ):
            await join_and_leave(workers, [(first, modern), (second, legacy)])

    with http_server(redis_url, server_log) as url:
        run(lambda: scenario(url))


def test_the_http_server_stops_while_a_client_listens(
    redis_url: str, workers: Workers, server_log: Path
) -> None:
    # uvicorn waits for every response in progress before it stops; a listen stream is one
    # that never ends by itself, so the server must end it (gracefully) when told to stop.
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = http_command(redis_url, port)
    with server_log.open("ab") as stderr:
        server = subprocess.Popen(
            argv,
            env=mcp_env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    ended: list[str] = []

    async def scenario() -> None:
        assert server.stdout is not None
        line = await anyio.to_thread.run_sync(server.stdout.readline)
        assert line.strip() == f"toolpool mcp: serving on {url}", line
        async with (
            http_client_of(url, "auto", Told()) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            server.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(lambda: server.wait(timeout=PATIENCE_S))
            # The stream ended with its result: the loop ends, no SubscriptionLost.
            async for event in subscription:
                ended.append(f"unexpected {event}")
            ended.append("gracefully")

    try:
        run(scenario)
    finally:
        stop_process(server)
        assert server.stdout is not None
        server.stdout.close()
    assert ended == ["gracefully"]
