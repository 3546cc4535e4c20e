"""The server's policy (``toolpool mcp --allow-tool/--deny-tool/--read-only/--check/--approve``),
the same for MCP clients and for ``/turns``, on real workers.

A withheld tool is not listed and a call to it is refused; a check hook's reason refuses a
call (and, in a turn, the calls after it); an approval hook refuses what it does not approve,
read-only tools aside; a hook that raises refuses the call, naming its error; a hook that does
not load stops the command before it serves.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from click.testing import CliRunner

from executor.cli import main
from tests.support.mcp import http_server, http_session, start_builtin_pool, stdio_session
from tests.support.procs import MakeWorkers, Workers
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.proof  # MCP server processes in front of real worker processes

READ_ONLY = [
    "calculator",
    "get_weather",
    "glob",
    "grep",
    "list_directory",
    "process_list",
    "process_output",
    "read_file",
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    (folder / "secret.txt").write_text("hunter2\n")
    return folder


@pytest.fixture
def pool(redis_url: str, workspace: Path, make_workers: MakeWorkers) -> Workers:
    return start_builtin_pool(make_workers, redis_url, workspace)


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent), block
    return block.text


def _call(call_id: str, name: str, **arguments: object) -> dict[str, object]:
    return {"id": call_id, "name": name, "arguments": arguments}


def test_a_denied_tool_and_a_check_hold_for_mcp_clients_and_turns(
    redis_url: str, pool: Workers, server_log: Path, workspace: Path
) -> None:
    options = ["--deny-tool", "bash", "--check", "tests.support.policy:no_secrets"]
    with http_server(redis_url, server_log, options=options) as url:

        async def mcp_client() -> tuple[list[str], list[types.CallToolResult]]:
            async with http_session(url) as client:
                listed = [tool.name for tool in (await client.list_tools()).tools]
                calls = [
                    await client.call_tool("bash", {"command": "echo hi"}),
                    await client.call_tool("read_file", {"path": "secret.txt"}),
                    await client.call_tool("read_file", {"path": "a.txt"}),
                ]
            return listed, calls

        listed, (denied, secret, fine) = anyio.run(mcp_client)
        with httpx2.Client(base_url=url.removesuffix("/mcp"), timeout=PATIENCE_S * 2) as http:
            turn = http.post(
                "/turns",
                json=[
                    _call("r", "read_file", path="a.txt"),
                    _call("s", "read_file", path="secret.txt"),
                    _call("w", "write_file", path="b.txt", content="after the refusal"),
                ],
            ).json()

    assert "bash" not in listed
    assert "read_file" in listed
    assert denied.is_error
    assert "does not offer 'bash'" in _text(denied)
    assert secret.is_error
    assert "read_file may not touch secrets" in _text(secret)
    assert "hunter2" not in _text(secret)
    assert _text(fine) == "alpha\n"

    first, refused, after = turn["results"]
    assert first["content"] == "alpha\n"
    assert refused["error_type"] == "rejected"
    assert "read_file may not touch secrets" in refused["content"]
    # As for any turn: a refused call stops it, and nothing after it runs.
    assert after["error_type"] == "rejected"
    assert "the turn stopped at call s" in after["content"]
    assert not (workspace / "b.txt").exists()


def test_read_only_offers_and_runs_only_read_only_tools(
    redis_url: str, pool: Workers, server_log: Path, workspace: Path
) -> None:
    async def scenario() -> tuple[list[str], types.CallToolResult]:
        async with stdio_session(redis_url, server_log, "auto", "--read-only") as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            write = await client.call_tool("write_file", {"path": "w.txt", "content": "x"})
        return listed, write

    listed, write = anyio.run(scenario)

    assert listed == READ_ONLY
    assert write.is_error
    assert "does not offer 'write_file'" in _text(write)
    assert not (workspace / "w.txt").exists()


def test_an_approval_hook_refuses_writes_and_lets_reads_through(
    redis_url: str, pool: Workers, server_log: Path, workspace: Path
) -> None:
    async def scenario() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with stdio_session(
            redis_url, server_log, "auto", "--approve", "tests.support.policy:approve_nothing"
        ) as client:
            write = await client.call_tool("write_file", {"path": "w.txt", "content": "x"})
            read = await client.call_tool("read_file", {"path": "a.txt"})
        return write, read

    write, read = anyio.run(scenario)

    assert write.is_error
    assert "approval hook refused it" in _text(write)
    assert not (workspace / "w.txt").exists()
    assert _text(read) == "alpha\n"


def test_a_hook_that_raises_refuses_the_call_and_the_server_serves_on(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    async def scenario() -> tuple[types.CallToolResult, list[str]]:
        async with stdio_session(
            redis_url, server_log, "auto", "--check", "tests.support.policy:broken"
        ) as client:
            refused = await client.call_tool("calculator", {"expression": "1+1"})
            listed = [tool.name for tool in (await client.list_tools()).tools]
        return refused, listed

    refused, listed = anyio.run(scenario)

    assert refused.is_error
    text = _text(refused)
    assert 'policy hook failed (KeyError: "the hook\'s own bug")' in text
    assert "calculator" in listed


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--check", "no_such_module_here:check"], "Cannot import 'no_such_module_here'"),
        (["--check", "tests.support.policy:nope"], "has no attribute 'nope'"),
        (["--approve", "tests.support.policy:NOT_A_FUNCTION"], "is str, not a function"),
        (["--check", "no-colon"], "must look like 'package.module:attribute'"),
        (["--allow-tool", "bash", "--deny-tool", "bash"], "both allowed and denied: bash"),
    ],
)
def test_a_policy_that_cannot_be_built_stops_the_command(options: list[str], says: str) -> None:
    # Checked before Redis is looked for: no server is needed to be told.
    result = CliRunner().invoke(main, ["mcp", "--redis", "redis://127.0.0.1:9/0", *options])

    assert result.exit_code == 2, result.output
    assert says in result.output
