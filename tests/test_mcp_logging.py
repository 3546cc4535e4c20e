"""MCP ``logging``: a client that set a level hears its calls' events and the server's own
log records, at that level and above; driven by the official MCP client SDK, connected in
process to a ``PoolServer`` in front of real worker processes."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from executor import Settings
from executor.mcp import PoolServer
from executor.mcp._logging import CallEvents
from tests.support.mcp import start_builtin_pool
from tests.support.procs import MakeWorkers, Workers
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.proof  # worker processes behind the server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    return folder


@pytest.fixture
def pool(redis_url: str, workspace: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    workers = start_builtin_pool(make_workers, redis_url, workspace, count=1)
    yield workers
    print(workers.diagnosis())


class Heard:
    def __init__(self) -> None:
        self.lines: list[types.LoggingMessageNotificationParams] = []
        self.changed = anyio.Event()

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.lines.append(params)
        self.changed.set()

    def texts(self, logger: str = "toolpool.call") -> list[tuple[str, str]]:
        return [
            (line.level, line.data["message"] if isinstance(line.data, dict) else line.data)
            for line in self.lines
            if line.logger == logger
        ]

    async def until(self, wanted: str) -> None:
        with anyio.fail_after(PATIENCE_S):
            while not any(wanted in str(line.data) for line in self.lines):
                self.changed = anyio.Event()
                await self.changed.wait()


def run(scenario: object) -> None:
    anyio.run(scenario)  # type: ignore[arg-type]


async def _set_level(client: Client, level: types.LoggingLevel) -> None:
    with warnings.catch_warnings():  # deprecated by the 2026 protocol, the 2025 way to ask
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.set_logging_level(level)


def test_a_handshake_client_hears_its_calls_at_its_level(redis_url: str, pool: Workers) -> None:
    server = PoolServer(Settings(redis_url=redis_url))
    heard = Heard()

    async def scenario() -> None:
        async with Client(server.server, mode="legacy", logging_callback=heard) as client:
            caps = client.server_capabilities
            assert caps is not None
            assert caps.logging is not None, caps
            # Before any level is set, nothing.
            await client.call_tool("read_file", {"path": "a.txt"})
            assert heard.lines == []

            await _set_level(client, "debug")
            result = await client.call_tool("read_file", {"path": "a.txt"})
            assert result.is_error is False
            await heard.until("finished")
            texts = heard.texts()
            assert ("debug", "read_file got the shared lock") in texts, texts
            assert any(
                level == "debug" and "read_file started on worker" in text for level, text in texts
            ), texts
            assert texts[-1][0] == "info"
            assert "read_file finished: ok after" in texts[-1][1]
            finished = heard.lines[-1].data
            assert isinstance(finished, dict)
            assert finished["event"] == "tool_result", finished

            heard.lines.clear()
            await _set_level(client, "warning")
            await client.call_tool("read_file", {"path": "a.txt"})  # ok: info, filtered
            missing = await client.call_tool("read_file", {"path": "missing.txt"})
            assert missing.is_error is True
            await heard.until("finished: error")
            assert heard.texts() == [
                ("warning", heard.texts()[0][1]),
            ], heard.texts()
            assert "read_file finished: error (tool_error)" in heard.texts()[0][1]

            # The server's own records reach a client that set a level, on its connection.
            logging.getLogger("executor.client.probe").error("Redis is away (a probe)")
            await heard.until("Redis is away (a probe)")
            assert heard.texts("executor.client.probe") == [("error", "Redis is away (a probe)")]

    try:
        run(scenario)
    finally:
        server.close()


def test_a_2026_client_hears_the_lines_its_request_asked_for(redis_url: str, pool: Workers) -> None:
    server = PoolServer(Settings(redis_url=redis_url))
    heard = Heard()

    async def scenario() -> None:
        async with Client(server.server, mode="auto", logging_callback=heard) as client:
            await client.call_tool("read_file", {"path": "a.txt"})
            assert heard.lines == []  # this request asked for none
        async with Client(
            server.server, mode="auto", logging_callback=heard, log_level="info"
        ) as client:
            result = await client.call_tool("read_file", {"path": "a.txt"})
            assert result.is_error is False
            await heard.until("finished")
            # info and above: the start (debug) is left out.
            assert [level for level, _ in heard.texts()] == ["info"], heard.texts()

    try:
        run(scenario)
    finally:
        server.close()


def test_a_call_answered_before_the_follower_read_its_events_still_gets_its_lines(
    redis_url: str, pool: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy server: the follower of the events stream reads nothing until the call's result
    # is in and the server asks it to catch up. Its lines come all the same (they were lost
    # when the server only waited for a call whose first event it had already read).
    asked = anyio.Event()
    run_follower, catch_up = CallEvents._run, CallEvents.caught_up

    async def held_back(self: CallEvents, client: Any, since: str) -> None:
        await asked.wait()
        await run_follower(self, client, since)

    async def asking(self: CallEvents) -> None:
        asked.set()
        await catch_up(self)

    monkeypatch.setattr(CallEvents, "_run", held_back)
    monkeypatch.setattr(CallEvents, "caught_up", asking)
    server = PoolServer(Settings(redis_url=redis_url))
    heard = Heard()

    async def scenario() -> None:
        async with Client(server.server, mode="legacy", logging_callback=heard) as client:
            await _set_level(client, "info")
            result = await client.call_tool("read_file", {"path": "a.txt"})
            assert result.is_error is False
            assert asked.is_set()
            await heard.until("read_file finished: ok")

    try:
        run(scenario)
    finally:
        server.close()
