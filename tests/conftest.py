"""Fixtures shared by the whole suite.

Process-heavy proofs carry ``@pytest.mark.proof`` (a module: ``pytestmark``), so that
``scripts/test --fast`` (``-m "not proof"``) leaves them out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import Settings, Tool, ToolCall, ToolRegistry, ToolResult
from executor._settings import SettingsGroup
from executor.contract import Workspace
from tests.support.procs import MakeWorkers, Workers
from tests.support.sandbox import require_sandbox
from workers._embedded_redis import RedisServer
from workers.pipeline._runner import CallEnvironment, run_call
from workers.processes._ending import end_under

RunTool = Callable[..., ToolResult]


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """An empty workspace folder of its own for each test."""
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


@pytest.fixture
def settings() -> Settings:
    """Default settings; tests that need others build their own with ``with_changes``."""
    return Settings()


@pytest.fixture(params=["off", "required"])
def sandbox_mode(request: pytest.FixtureRequest) -> str:
    """Each bash sandbox mode in turn: unconfined, then sandboxed (skipped, saying why, where
    bubblewrap is missing or the kernel refuses it)."""
    mode: str = request.param
    if mode == "required":
        require_sandbox()
    return mode


@pytest.fixture
def run_tool(workspace: Workspace, settings: Settings) -> RunTool:
    """Run one tool through the real runner (validation, time limit, truncation).

    ``run_tool(read_file, path="a.txt")``; pass ``_settings=`` to override settings, or to
    give the tool its own (``_settings=BashSettings(...)``).
    """

    def run(
        tool: Tool, _settings: Settings | SettingsGroup | None = None, **arguments: Any
    ) -> ToolResult:
        chosen = settings if _settings is None else _settings
        if isinstance(chosen, SettingsGroup):
            chosen = settings.with_tools(chosen)
        env = CallEnvironment(workspace=workspace, settings=chosen)
        return run_call(ToolCall(name=tool.name, arguments=arguments), ToolRegistry([tool]), env)

    return run


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server for the session: unix socket plus a free TCP port, never 6379.

    Tests that stop, pause or restart a server start their own ``RedisServer`` instead.
    """
    with RedisServer(tcp=True) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL, emptied first (FLUSHALL of our own server, nothing else)."""
    client = redis_server.client()
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A connection to the session's Redis (emptied for this test)."""
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


@pytest.fixture
def make_workers(tmp_path: Path) -> Iterator[MakeWorkers]:
    """``make_workers(settings)``: a ``Workers`` group, every process stopped at the end."""
    made: list[Workers] = []

    def make(settings: Settings) -> Workers:
        made.append(Workers(settings, tmp_path / f"workers-{len(made)}"))
        return made[-1]

    yield make
    for group in made:
        group.stop_all()
    # Test workers are no pool, so nothing ends the background processes and session
    # networks they started (a pool does): end those of this test's sessions.
    if made:
        end_under(tmp_path, "the test ended")


@pytest.fixture
def server_log(tmp_path: Path) -> Iterator[Path]:
    """Where the MCP server writes its stderr; printed at teardown, for a failed test."""
    log = tmp_path / "mcp-server.log"
    yield log
    if log.exists():
        print(f"--- MCP server stderr ---\n{log.read_text(errors='replace')[-5000:]}")
