"""``toolpool mcp`` as a real process, driven by the official MCP client SDK.

The server runs as ``python -m executor.cli mcp`` over stdio (the client starts it) and over
streamable HTTP (started here, found by the line it prints once it listens); two real worker
processes serve the nine built-in tools behind it. Each test drives the client with
``anyio.run`` from a plain sync test, inside a deadline, so a hung server fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
import redis
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from executor import Sessions, Settings
from executor.wire import Keys, ToolResult
from tests.support.mcp import (
    ROOT,
    TOOLPOOL,
    http_server,
    http_session,
    mcp_env,
    start_builtin_pool,
    stdio_session,
)
from tests.support.pids import ancestors, processes_with, sleep_marker, survivors
from tests.support.procs import MakeWorkers, Workers
from tests.support.waiting import PATIENCE_S, wait_for
from workers import builtin_registry
from workers.tools._shell_settings import BashSettings

pytestmark = pytest.mark.proof  # MCP server processes in front of real worker processes

# The built-in tools: the nine of the requirements and a session's five background-process tools.
BUILTIN = {
    "get_weather",
    "calculator",
    "read_file",
    "write_file",
    "list_directory",
    "edit_file",
    "glob",
    "grep",
    "bash",
    "process_start",
    "process_output",
    "process_input",
    "process_stop",
    "process_list",
}
READ_ONLY = {
    "read_file",
    "list_directory",
    "glob",
    "grep",
    "get_weather",
    "calculator",
    "process_output",
    "process_list",
}
DESTRUCTIVE = BUILTIN - READ_ONLY
# The whole of one test's conversation with the server; only a broken server reaches it.
SCENARIO_S = 180.0
# ``... [588000 characters, 99000 lines dropped; full output: ...] ...`` (see ``marker``).
_MARKER = re.compile(r"\n\n\.\.\. \[(\d+) characters?, (\d+) lines? dropped[^\]]*\] \.\.\.\n\n")

# How the client connects: "auto" finds the newest protocol both speak (2026-07-28, request by
# request); "legacy" is the initialize handshake (2025-era protocol) most MCP hosts use today.
MODES = ["auto", "legacy"]

Scenario = Callable[[], Awaitable[None]]


# -- the pool and the server processes ----------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def pool(redis_url: str, workspace: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    """Two workers serving the nine built-in tools; their logs printed at teardown (pytest
    shows them when the test failed)."""
    workers = start_builtin_pool(make_workers, redis_url, workspace)
    yield workers
    print(workers.diagnosis())


def run(scenario: Scenario) -> None:
    """Run an async scenario from a sync test, failing it past ``SCENARIO_S``."""

    async def bounded() -> None:
        with anyio.fail_after(SCENARIO_S):
            await scenario()

    anyio.run(bounded)


async def wait_until(condition: Callable[[], object], what: str) -> None:
    """Poll ``condition`` without blocking the event loop; fail after ``PATIENCE_S``."""
    with anyio.move_on_after(PATIENCE_S):
        while not await anyio.to_thread.run_sync(condition):
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {PATIENCE_S:g} s waiting for {what}")


def stored_results(redis_url: str, tool: str) -> list[ToolResult]:
    """The results the pool stored for ``tool``'s calls (those its answers came from)."""
    client = redis.Redis.from_url(redis_url)
    try:
        found = [
            ToolResult.model_validate_json(client.get(key) or b"{}")
            for key in client.scan_iter(Keys(Settings().redis.key_prefix).result("*"))
        ]
    finally:
        client.close()
    return [result for result in found if result.name == tool]


def text_of(result: types.CallToolResult) -> str:
    """The one text item of a result (the spec: exactly one, the ToolResult's content)."""
    assert len(result.content) == 1, result.content
    (item,) = result.content
    assert isinstance(item, types.TextContent), item
    return item.text


def ok_text(result: types.CallToolResult) -> str:
    """The text of a result that must not be an error."""
    text = text_of(result)
    assert result.is_error is False, text
    return text


def error_text(result: types.CallToolResult) -> str:
    """The text of a result that must be an error."""
    text = text_of(result)
    assert result.is_error is True, text
    return text


# -- over stdio -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_lists_the_built_in_tools_with_their_schemas_and_hints(
    mode: str, redis_url: str, pool: Workers, server_log: Path
) -> None:
    expected = {tool.name: tool for tool in builtin_registry()}
    listed: list[types.Tool] = []
    versions: list[str] = []

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log, mode) as client:
            versions.append(client.protocol_version)
            listed.extend((await client.list_tools()).tools)

    run(scenario)
    era = MODERN_PROTOCOL_VERSIONS if mode == "auto" else HANDSHAKE_PROTOCOL_VERSIONS
    assert versions[0] in era, versions
    assert sorted(t.name for t in listed) == sorted(BUILTIN) == sorted(expected)
    for tool in listed:
        assert tool.input_schema == expected[tool.name].parameters, tool.name
        assert tool.description == expected[tool.name].description, tool.name
        assert tool.annotations is not None, tool.name
        assert tool.annotations.read_only_hint is (tool.name in READ_ONLY), tool.name
        assert tool.annotations.destructive_hint is (tool.name in DESTRUCTIVE), tool.name


def test_settings_from_the_environment_alone(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    answers: list[str] = []

    async def scenario() -> None:
        # No --redis, no --prefix: TOOLPOOL_REDIS_URL and TOOLPOOL_KEY_PREFIX say where.
        async with stdio_session(
            None, server_log, TOOLPOOL_REDIS_URL=redis_url, TOOLPOOL_KEY_PREFIX="toolpool"
        ) as client:
            answers.append(ok_text(await client.call_tool("calculator", {"expression": "6*7"})))

    run(scenario)
    assert answers == ["6*7 = 42"]


def test_calls_each_builtin_tool_on_the_pool(
    redis_url: str, pool: Workers, workspace: Path, server_log: Path
) -> None:
    texts: dict[str, str] = {}
    weather: list[types.CallToolResult] = []

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log) as client:
            calls: list[tuple[str, dict[str, Any]]] = [
                ("write_file", {"path": "notes/a.txt", "content": "alpha\nbeta\n"}),
                ("read_file", {"path": "notes/a.txt"}),
                ("edit_file", {"path": "notes/a.txt", "old_string": "beta", "new_string": "gamma"}),
                ("list_directory", {"path": "notes"}),
                ("glob", {"pattern": "**/*.txt"}),
                ("grep", {"pattern": "gamma"}),
                ("bash", {"command": "echo hi from $((6 * 7))"}),
                ("calculator", {"expression": "6*7"}),
            ]
            for name, arguments in calls:
                texts[name] = ok_text(await client.call_tool(name, arguments))
            weather.append(await client.call_tool("get_weather", {"city": "Berlin"}))

    run(scenario)
    assert texts == {
        "write_file": "Successfully wrote 11 bytes to notes/a.txt",
        "read_file": "alpha\nbeta\n",
        "edit_file": "Replaced 1 occurrence in notes/a.txt.",
        "list_directory": "a.txt",
        "glob": "notes/a.txt",
        "grep": "notes/a.txt:2: gamma",
        "bash": "exit code: 0\nstdout:\nhi from 42",
        "calculator": "6*7 = 42",
    }
    # The workers did the writing, in the pool's workspace.
    assert (workspace / "notes" / "a.txt").read_text() == "alpha\ngamma\n"
    # Offline: the weather service's address refuses; the model is told so, as an error.
    message = error_text(weather[0])
    assert message.startswith("The weather service at 127.0.0.1:9 is unreachable"), message


def test_error_results_are_marked_as_errors(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    texts: dict[str, str] = {}

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log) as client:
            missing = await client.call_tool("read_file", {"path": "missing.txt"})
            texts["missing"] = error_text(missing)
            texts["division"] = error_text(
                await client.call_tool("calculator", {"expression": "1/0"})
            )
            texts["unknown"] = error_text(await client.call_tool("no_such_tool", {}))
            texts["bad arguments"] = error_text(
                await client.call_tool("calculator", {"expresion": "1+1"})
            )
            # Errors end calls, not the session.
            texts["after"] = ok_text(await client.call_tool("calculator", {"expression": "2+2"}))

    run(scenario)
    assert texts["missing"].startswith("File not found: missing.txt"), texts
    assert texts["division"] == "Division by zero in the expression.", texts
    assert texts["unknown"].startswith("Unknown tool 'no_such_tool'. Available tools: "), texts
    assert texts["bad arguments"].startswith("Invalid arguments for tool 'calculator':"), texts
    assert "- expression: Field required" in texts["bad arguments"], texts
    assert texts["after"] == "2+2 = 4"


def test_a_long_result_comes_back_cut_with_the_marker(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    results: list[types.CallToolResult] = []

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log) as client:
            results.append(await client.call_tool("bash", {"command": "seq 1 100000"}))

    run(scenario)
    text = ok_text(results[0])
    found = _MARKER.search(text)
    assert found is not None, text[:500]
    head, tail = text[: found.start()], text[found.end() :]
    assert head.startswith("exit code: 0\nstdout:\n1\n2\n3\n"), head[:100]
    assert tail.endswith("\n99999\n100000"), tail[-100:]
    # seq's 588,895 characters and 100,000 lines, but for the few thousand shown.
    dropped_chars, dropped_lines = int(found.group(1)), int(found.group(2))
    assert 580_000 < dropped_chars < 588_895, found.group(0)
    assert 99_000 < dropped_lines < 100_000, found.group(0)
    assert len(head) + len(tail) + dropped_chars == len("exit code: 0\nstdout:\n") + 588_894


# -- over HTTP --------------------------------------------------------------------------------


@pytest.mark.parametrize("token_in_env", [False, True], ids=["--token", "TOOLPOOL_MCP_TOKEN"])
def test_http_with_a_token_refuses_requests_without_it(
    token_in_env: bool, redis_url: str, pool: Workers, server_log: Path
) -> None:
    token = "s3cret-token-for-the-test"
    statuses: dict[str, int] = {}
    listed: list[str] = []
    answers: list[str] = []

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    async def scenario(url: str) -> None:
        async with httpx2.AsyncClient(timeout=PATIENCE_S) as http:
            for label, extra in (
                ("none", {}),
                ("wrong", {"Authorization": "Bearer nope"}),
                ("not bearer", {"Authorization": token}),
            ):
                response = await http.post(
                    url, content=json.dumps(initialize), headers={**accept, **extra}
                )
                statuses[label] = response.status_code
        async with http_session(url, token) as client:
            listed.extend(t.name for t in (await client.list_tools()).tools)
            answers.append(ok_text(await client.call_tool("calculator", {"expression": "6*7"})))

    with http_server(redis_url, server_log, token=token, token_in_env=token_in_env) as url:
        run(lambda: scenario(url))
    assert statuses == {"none": 401, "wrong": 401, "not bearer": 401}
    assert sorted(listed) == sorted(BUILTIN)
    assert answers == ["6*7 = 42"]


def test_two_http_clients_at_once_each_write_and_read_their_file(
    redis_url: str, pool: Workers, workspace: Path, server_log: Path
) -> None:
    read_back: dict[str, str] = {}

    async def scenario(url: str) -> None:
        connected = 0
        ready = anyio.Event()

        async def converse(name: str) -> None:
            nonlocal connected
            content = f"{name}'s own text\n" * 10  # within read_file's 500 characters
            async with http_session(url) as client:
                connected += 1
                if connected == 2:
                    ready.set()
                # Both sessions are open before either calls: they overlap on the server.
                await ready.wait()
                wrote = ok_text(
                    await client.call_tool(
                        "write_file", {"path": f"{name}.txt", "content": content}
                    )
                )
                assert wrote == f"Successfully wrote {len(content)} bytes to {name}.txt"
                read_back[name] = ok_text(
                    await client.call_tool("read_file", {"path": f"{name}.txt"})
                )

        async with anyio.create_task_group() as group:
            for name in ("first", "second"):
                group.start_soon(converse, name)

    with http_server(redis_url, server_log) as url:
        run(lambda: scenario(url))
    for name in ("first", "second"):
        assert read_back[name] == f"{name}'s own text\n" * 10
        assert (workspace / f"{name}.txt").read_text() == f"{name}'s own text\n" * 10


def test_two_clients_exclusive_calls_take_turns_on_the_lock(
    redis_url: str, pool: Workers, workspace: Path, server_log: Path
) -> None:
    # Two workers are free, but bash is exclusive: one command runs its whole course before
    # the other starts, whatever the timing.
    command = "echo start-{0} >> trace; sleep 0.3; echo end-{0} >> trace"

    async def scenario(url: str) -> None:
        async def client(name: str) -> None:
            async with http_session(url) as session:
                ok_text(await session.call_tool("bash", {"command": command.format(name)}))

        async with anyio.create_task_group() as group:
            for name in ("a", "b"):
                group.start_soon(client, name)

    with http_server(redis_url, server_log) as url:
        run(lambda: scenario(url))
    trace = (workspace / "trace").read_text().split()
    assert trace in (
        ["start-a", "end-a", "start-b", "end-b"],
        ["start-b", "end-b", "start-a", "end-a"],
    ), trace


def test_exclusive_calls_of_clients_in_different_sessions_run_together(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, server_log: Path
) -> None:
    # Each command waits until the other has started: only two sessions' lock scopes let
    # both run at once. Run one after the other, the first would wait out its time limit.
    _sessions_pool(redis_url, tmp_path, make_workers, 2)
    meet = tmp_path / "meet"
    meet.mkdir()
    command = (
        "touch {meet}/{me}; n=0; until [ -e {meet}/{other} ]; do n=$((n+1)); "
        "[ $n -gt 1200 ] && exit 3; sleep 0.05; done; echo met"
    )
    texts: dict[str, str] = {}

    async def scenario(url: str) -> None:
        async def client(me: str, other: str) -> None:
            async with http_session(url, mode="legacy") as session:
                result = await session.call_tool(
                    "bash",
                    {"command": command.format(meet=meet, me=me, other=other), "timeout": 120},
                )
                texts[me] = text_of(result)

        async with anyio.create_task_group() as group:
            group.start_soon(client, "a", "b")
            group.start_soon(client, "b", "a")

    with http_server(redis_url, server_log, options=["--session-per-client"]) as url:
        run(lambda: scenario(url))
    assert texts == {"a": "exit code: 0\nstdout:\nmet", "b": "exit code: 0\nstdout:\nmet"}


# -- cancellation -----------------------------------------------------------------------------


@asynccontextmanager
async def connected(transport: str, mode: str, redis_url: str, log: Path) -> AsyncIterator[Client]:
    """A client over ``transport`` ("stdio" or "http"), the server started for it."""
    if transport == "stdio":
        async with stdio_session(redis_url, log, mode) as client:
            yield client
        return
    with http_server(redis_url, log) as url:
        async with http_session(url, mode=mode) as client:
            yield client


# A 2026-07-28 client cancels over HTTP by closing the request's stream; a handshake-era
# client sends notifications/cancelled (over stdio, both eras send that notification).
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_cancelling_a_running_call_ends_its_process(
    transport: str, mode: str, redis_url: str, pool: Workers, server_log: Path
) -> None:
    marker = sleep_marker()  # a 300 s sleep: only the cancellation can end it in time
    worker_pids = {w.pid for w in pool.started}
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with connected(transport, mode, redis_url, server_log) as client:

            async def call() -> None:
                outcome["result"] = await client.call_tool(
                    "bash", {"command": f"sleep {marker}", "timeout": 500}
                )

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await wait_until(lambda: processes_with(marker), "the call's sleep to start")
                # bash may exec the sleep or run it as its child: either holds the marker.
                outcome["on a worker"] = all(
                    worker_pids & set(ancestors(pid)) for pid in processes_with(marker)
                )
                group.cancel_scope.cancel()  # the client's cancel of its request
            left = await anyio.to_thread.run_sync(survivors, marker, PATIENCE_S)
            # Checked here: the next bash would wait for the lock the sleep still holds.
            assert left == [], f"the cancelled call's sleep still runs: {left}"
            # The session goes on, and the cancelled bash let go of the pool's write lock.
            outcome["after"] = ok_text(await client.call_tool("bash", {"command": "echo after"}))

    try:
        run(scenario)
    finally:
        for pid in processes_with(marker):  # a failed cancellation leaves its sleep: ours to end
            os.kill(pid, signal.SIGKILL)
    assert outcome["on a worker"], "the sleep did not run in a worker process"
    assert "result" not in outcome, outcome["result"]
    assert outcome["after"] == "exit code: 0\nstdout:\nafter"
    # The pool's own record of the call: cancelled by its client, not a tool's failure.
    kinds = sorted(
        r.error_type.value if r.error_type else "ok" for r in stored_results(redis_url, "bash")
    )
    assert kinds == ["cancelled", "ok"], kinds


def test_a_waiting_call_reports_progress_to_a_client_that_asked(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    heard: list[tuple[float, str | None]] = []
    texts: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log) as client:
            result = await client.call_tool(
                "bash", {"command": "sleep 2.5; echo done"}, progress_callback=on_progress
            )
            texts.append(ok_text(result))

    run(scenario)
    assert texts == ["exit code: 0\nstdout:\ndone"]
    # One a second while it ran: at least two in 2.5 s, numbered, saying how long.
    assert len(heard) >= 2, heard
    assert [progress for progress, _ in heard] == list(range(1, len(heard) + 1))
    assert all(message and "waiting on the pool for" in message for _, message in heard)


def _sessions_pool(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, workers: int
) -> tuple[Settings, Path]:
    """Workers that serve sessions only (in tmp_path/sessions); the settings, the root."""
    sessions_root = tmp_path / "sessions"
    sessions_root.mkdir()
    settings = Settings(
        redis_url=redis_url,
        sessions_root=sessions_root,
        workspace=sessions_root,
        serve_pool_calls=False,
        tools=[BashSettings(sandbox="off")],
    )
    make_workers(settings).start(workers, registry="workers:builtin_registry")
    return settings, Path(os.path.realpath(sessions_root))


def test_with_a_session_every_call_runs_in_its_folder(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, server_log: Path
) -> None:
    settings, root = _sessions_pool(redis_url, tmp_path, make_workers, 1)
    with Sessions(settings=settings) as admin:
        admin.create("agent-1", timeout=PATIENCE_S)
    texts: list[str] = []

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log, "auto", "--session", "agent-1") as client:
            await client.call_tool("write_file", {"path": "notes.md", "content": "mine"})
            texts.append(ok_text(await client.call_tool("bash", {"command": "pwd"})))

    run(scenario)
    folder = root / "agent-1"
    assert (folder / "notes.md").read_text() == "mine"
    assert texts == [f"exit code: 0\nstdout:\n{folder}"]


def test_a_client_with_a_session_drives_a_background_repl(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, server_log: Path
) -> None:
    """Oracle: over the real MCP client, the REPL answers 42 in the third call from a variable
    set in the second; an interpreter per call would answer a NameError."""
    settings, _ = _sessions_pool(redis_url, tmp_path, make_workers, 1)
    with Sessions(settings=settings) as admin:
        admin.create("agent-1", timeout=PATIENCE_S)
    texts: list[str] = []

    async def scenario() -> None:
        async with stdio_session(redis_url, server_log, "auto", "--session", "agent-1") as client:
            started = await client.call_tool("process_start", {"command": "python3 -q", "wait": 5})
            texts.append(ok_text(started))
            set_x = {"process": "p1", "text": "x = 41"}
            texts.append(ok_text(await client.call_tool("process_input", set_x)))
            read_x = {"process": "p1", "text": "print(x + 1)", "wait": 10}
            texts.append(ok_text(await client.call_tool("process_input", read_x)))
            stop = {"process": "p1", "signal": "KILL"}
            texts.append(ok_text(await client.call_tool("process_stop", stop)))

    run(scenario)
    assert texts[0].startswith("Started background process p1"), texts[0]
    assert "\n42\n" in texts[2], texts[2]
    assert "p1 is stopped" in texts[3], texts[3]


def test_each_client_gets_a_session_of_its_own(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, server_log: Path
) -> None:
    _, root = _sessions_pool(redis_url, tmp_path, make_workers, 2)
    wheres: dict[str, str] = {}
    reads: dict[str, str] = {}
    both_wrote = anyio.Event()
    wrote = 0

    async def client_of(name: str) -> None:
        nonlocal wrote
        async with stdio_session(redis_url, server_log, "auto", "--session-per-client") as client:
            # The same file name in both: each must keep its own.
            await client.call_tool("write_file", {"path": "note.md", "content": name})
            wrote += 1
            if wrote == 2:
                both_wrote.set()
            await both_wrote.wait()
            reads[name] = ok_text(await client.call_tool("read_file", {"path": "note.md"}))
            wheres[name] = ok_text(await client.call_tool("bash", {"command": "pwd"}))

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(client_of, "first")
            group.start_soon(client_of, "second")

    run(scenario)
    assert reads == {"first": "first", "second": "second"}
    folders = {name: where.rsplit("\n", 1)[-1] for name, where in wheres.items()}
    assert folders["first"] != folders["second"]
    for name, folder in folders.items():
        assert Path(folder).parent == root
        assert Path(folder, "note.md").read_text() == name


def test_over_http_each_client_keeping_a_session_id_gets_a_session_of_its_own(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, server_log: Path
) -> None:
    # One server, clients told apart by their Mcp-Session-Id (2025 handshake clients keep
    # one). A 2026 client sends none: it is told to name a session instead.
    _, root = _sessions_pool(redis_url, tmp_path, make_workers, 2)
    folders: dict[str, str] = {}

    async def client_of(url: str, name: str) -> None:
        async with http_session(url, mode="legacy") as client:
            await client.call_tool("write_file", {"path": "note.md", "content": name})
            where = ok_text(await client.call_tool("bash", {"command": "pwd"}))
            folders[name] = where.rsplit("\n", 1)[-1]
            # A client's later calls stay in its own session.
            assert ok_text(await client.call_tool("read_file", {"path": "note.md"})) == name

    with http_server(redis_url, server_log, options=["--session-per-client"]) as url:

        async def scenario() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(client_of, url, "first")
                group.start_soon(client_of, url, "second")
            async with http_session(url, mode="auto") as modern:
                refused = await modern.call_tool("read_file", {"path": "note.md"})
                assert refused.is_error
                assert "Mcp-Session-Id" in text_of(refused)
                assert "--session NAME" in text_of(refused)
                # A request answered with no result says the same as a JSON-RPC error.
                with pytest.raises(MCPError) as listing:
                    await modern.list_tools()
                assert listing.value.code == INVALID_REQUEST, listing.value.error
                assert "Mcp-Session-Id" in listing.value.error.message
                assert "--session NAME" in listing.value.error.message

        run(scenario)

    assert folders["first"] != folders["second"]
    for name, folder in folders.items():
        assert Path(folder).parent == root
        assert Path(folder, "note.md").read_text() == name


def test_a_client_that_goes_away_mid_call_leaves_nothing_running(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    # A client that dies: it speaks MCP on the server's stdin, then closes it mid-call, with
    # no cancel sent. The server must end, and the call it had on the pool with it.
    marker = sleep_marker()
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
                "capabilities": {},
                "clientInfo": {"name": "vanishing", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": f"sleep {marker}", "timeout": 500}},
        },
    ]
    with server_log.open("ab") as errlog:
        server = subprocess.Popen(
            [*TOOLPOOL, "mcp", "--redis", redis_url],
            env=mcp_env(),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
    try:
        assert server.stdin is not None
        server.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        server.stdin.flush()
        wait_for(lambda: processes_with(marker), "the call's sleep to start")
        server.stdin.close()  # the client is gone
        assert server.wait(timeout=PATIENCE_S) is not None
        left = survivors(marker, PATIENCE_S)
    finally:
        if server.poll() is None:
            server.kill()
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"the sleep outlived its client: {left}"


def test_a_server_whose_stdout_is_a_file_still_answers(
    redis_url: str, pool: Workers, server_log: Path, tmp_path: Path
) -> None:
    # stdout a regular file, which the event loop cannot watch: the transport reads and writes
    # through the SDK's threads instead of the loop's pipes, and answers the same.
    answers = tmp_path / "answers.jsonl"
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
                "capabilities": {},
                "clientInfo": {"name": "file", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "calculator", "arguments": {"expression": "6*7"}},
        },
    ]
    with server_log.open("ab") as errlog, answers.open("wb") as out:
        server = subprocess.Popen(
            [*TOOLPOOL, "mcp", "--redis", redis_url],
            env=mcp_env(),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=errlog,
        )
    try:
        assert server.stdin is not None
        server.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        server.stdin.flush()
        wait_for(lambda: answers.read_text().count("\n") >= 2, "both answers")
        server.stdin.close()
        assert server.wait(timeout=PATIENCE_S) == 0
    finally:
        if server.poll() is None:
            server.kill()
    replies = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[1]["result"]["content"][0]["text"] == "6*7 = 42"
