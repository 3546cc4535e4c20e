"""A wrong Redis URL reads one way in every command: the URL without its password, why, where
the URL came from, and the exit code for an unreachable Redis.

Nothing listens on the port each test takes (``free_port``), so no Redis of anyone else is
touched; the commands run in-process under click's runner.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from executor.cli import main
from executor.cli._common import EXIT_REDIS, EXIT_USAGE
from tests.support.ports import free_port

# Every command that talks to a deployment, with what it needs besides the URL.
COMMANDS: list[list[str]] = [
    ["call", "calculator", "--args", '{"expression": "1"}'],
    ["run", "-"],
    ["output", "call_1"],
    ["tools"],
    ["status"],
    ["events"],
    ["timeline", "T"],
    ["lock", "status"],
    ["lock", "release", "--token", "t"],
    ["session", "create", "s1"],
    ["session", "list"],
    ["session", "show", "s1"],
    ["session", "delete", "s1"],
    ["mcp"],
    ["dashboard", "--port", "0"],
    ["metrics", "--port", "0"],
    ["worker", "--workspace", "{workspace}"],
    ["up", "--workspace", "{workspace}"],
]
RUN_INPUT = '[{"id": "a", "name": "calculator", "arguments": {"expression": "1"}}]'
CHECK = "Check the URL (--redis or TOOLPOOL_REDIS_URL), that Redis runs there and that this"


def _invoke(command: list[str], url: str, tmp_path: Path) -> tuple[int, str]:
    env: dict[str, str | None] = {name: None for name in os.environ if name.startswith("TOOLPOOL_")}
    args = [part.replace("{workspace}", str(tmp_path)) for part in command]
    result = CliRunner().invoke(main, [*args, "--redis", url], env=env, input=RUN_INPUT)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_nothing_listening_reads_one_way_in_every_command(
    command: list[str], tmp_path: Path
) -> None:
    port = free_port()
    code, output = _invoke(command, f"redis://:s3cret@127.0.0.1:{port}/0", tmp_path)
    assert code == EXIT_REDIS, output
    assert f"Error: Cannot reach Redis at redis://:***@127.0.0.1:{port}/0: " in output
    assert CHECK in output
    assert "s3cret" not in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    "command", [["call", "calculator"], ["status"], ["worker", "--workspace", "{workspace}"]]
)
def test_a_host_that_does_not_resolve_reads_the_same(command: list[str], tmp_path: Path) -> None:
    url = "redis://no-such-host.invalid:6379/0"
    code, output = _invoke(command, url, tmp_path)
    assert code == EXIT_REDIS, output
    assert f"Cannot reach Redis at {url}: " in output
    assert CHECK in output


@pytest.mark.parametrize(
    "command", [["call", "calculator"], ["session", "list"], ["up", "--workspace", "{workspace}"]]
)
def test_a_url_of_another_scheme_is_a_usage_error_naming_it(
    command: list[str], tmp_path: Path
) -> None:
    code, output = _invoke(command, "http://:s3cret@h/0", tmp_path)
    assert code == EXIT_USAGE, output
    assert "Invalid Redis URL http://:***@h/0 (--redis or TOOLPOOL_REDIS_URL)" in output
    assert "s3cret" not in output
