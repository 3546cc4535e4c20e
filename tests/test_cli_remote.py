"""The command line against a real Redis and a real worker process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from executor.cli import main
from executor.cli._common import EXIT_FAILED, EXIT_REDIS
from executor.wire import Keys, read_catalog
from tests.support.waiting import wait_for

pytestmark = pytest.mark.proof  # the command line against a real worker process

WORKER = """
import sys
from executor import Settings
from workers import builtin_registry
from workers.pool._process import run_worker
settings = Settings.from_env()
run_worker(settings.redis.url, settings, builtin_registry(), name=sys.argv[1])
"""


# The built-in tools and one whose calls set their own time limit, published with a default
# and a maximum (as ``pause``'s schema: "default": 5, "maximum": 120).
WORKER_WITH_PAUSE = """
import sys, time
from typing import Annotated
from pydantic import Field
from executor import Settings
from workers import builtin_registry
from workers.pool._process import run_worker
registry = builtin_registry()

@registry.tool(timeout=200, timeout_argument="seconds")
def pause(seconds: Annotated[float, Field(gt=0, le=120)] = 5) -> str:
    \"\"\"Wait a while.\"\"\"
    return "paused"

settings = Settings.from_env()
run_worker(settings.redis.url, settings, registry, name=sys.argv[1])
"""


@contextmanager
def serving(redis_url: str, workspace: Path, script: str = WORKER) -> Iterator[dict[str, str]]:
    """A worker process serving ``workspace``; yields the environment the CLI needs."""
    env = {"TOOLPOOL_REDIS_URL": redis_url, "TOOLPOOL_WORKSPACE": str(workspace)}
    worker = subprocess.Popen(
        [sys.executable, "-c", script, "cli-worker"], env={**os.environ, **env}
    )
    client = redis.Redis.from_url(redis_url)
    try:
        # The CLI refuses calls while no worker serves the queue: wait for its catalog.
        wait_for(
            lambda: read_catalog(client, Keys(), "toolpool.default").workers == 1,
            "the worker's catalog",
        )
        yield env
    finally:
        client.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "hello.txt").write_text("hello\nworld\n")
    return folder


@pytest.fixture
def served(redis_url: str, workspace: Path) -> Iterator[dict[str, str]]:
    """A worker process serving a workspace; yields the environment the CLI needs."""
    with serving(redis_url, workspace) as env:
        yield env


BUILTIN = [
    "bash",
    "calculator",
    "edit_file",
    "get_weather",
    "glob",
    "grep",
    "list_directory",
    "process_input",
    "process_list",
    "process_output",
    "process_start",
    "process_stop",
    "read_file",
    "write_file",
]


def test_tools_table_lists_the_live_tools_flags_and_limits(served: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["tools"], env=served)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("queue toolpool.default: 1 live worker, catalog ")
    assert lines[1].split()[:5] == ["TOOL", "MODE", "READ-ONLY", "MAX", "CHARS"]
    rows = {line.split()[0]: line.split()[1:4] for line in lines[2:]}
    assert list(rows) == BUILTIN
    assert rows["read_file"] == ["shared", "yes", "500"]
    assert rows["bash"] == ["exclusive", "no", "3000"]


def test_tools_export_formats(served: dict[str, str]) -> None:
    for fmt, key in (("openai", "function"), ("anthropic", "input_schema"), ("mcp", "inputSchema")):
        result = CliRunner().invoke(main, ["tools", "--format", fmt], env=served)
        assert result.exit_code == 0, result.output
        exported = json.loads(result.output)
        assert len(exported) == 14
        assert all(key in item for item in exported)


def test_call_goes_through_the_worker(served: dict[str, str]) -> None:
    args = ["call", "read_file", "--args", '{"path": "hello.txt"}']
    result = CliRunner().invoke(main, [*args, "--id", "r1"], env=served)
    assert result.exit_code == 0, result.output
    # The text the model reads, with its own newlines, then what it was.
    text, line = result.stdout.split("\n-- ", 1)
    assert text == "hello\nworld"
    assert re.fullmatch(r"ok  read_file  r1  \d+ ms  turn [0-9a-f]{32}\n", line), line
    as_json = CliRunner().invoke(main, [*args, "--id", "r2", "--json"], env=served)
    assert as_json.exit_code == 0, as_json.output
    record = json.loads(as_json.stdout)
    assert (record["content"], record["call_id"]) == ("hello\nworld\n", "r2")
    assert re.fullmatch(r"[0-9a-f]{32}", record["turn_id"])
    assert record["turn_id"] != line.split("turn ")[1].strip()


def test_call_that_answers_an_error_exits_1_and_says_so(served: dict[str, str]) -> None:
    result = CliRunner().invoke(
        main, ["call", "read_file", "--args", '{"path": "nope.txt"}', "--id", "e1"], env=served
    )
    assert result.exit_code == EXIT_FAILED, result.output
    assert "-- error (tool_error)  read_file  e1" in result.stdout
    assert result.stderr == "toolpool call: the call answered an error (e1: tool_error)\n"


def test_run_reads_json_lines_of_any_api_shape_and_answers_in_order(
    served: dict[str, str],
) -> None:
    lines = "\n".join(
        [
            json.dumps({"id": "a", "name": "calculator", "arguments": {"expression": "6*7"}}),
            json.dumps(
                {
                    "id": "b",
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"command": "seq 1 20000"}),
                    },
                }
            ),
            json.dumps(
                {
                    "type": "tool_use",
                    "id": "c",
                    "name": "read_file",
                    "input": {"path": "missing.txt"},
                }
            ),
        ]
    )
    result = CliRunner().invoke(main, ["run", "-"], input=lines, env=served)
    # One call answered an error: the turn's exit code and stderr say so, as `call`'s do.
    assert result.exit_code == EXIT_FAILED, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["call_id"] for a in answers] == ["a", "b", "c"]
    # The turn's id, on stderr first and in every result, is the one the timeline takes.
    turn = answers[0]["turn_id"]
    assert {a["turn_id"] for a in answers} == {turn}
    assert result.stderr == (
        f"turn {turn}  (toolpool timeline {turn})\n"
        "toolpool run: 1 of 3 calls answered an error (c: tool_error)\n"
    )
    timeline = CliRunner().invoke(main, ["timeline", turn], env=served)
    assert timeline.exit_code == 0, timeline.output
    assert "<svg" in timeline.stdout
    assert answers[0]["content"] == "6*7 = 42"
    assert answers[1]["truncated"] is True
    assert "full output: toolpool output b" in answers[1]["content"]
    assert answers[2]["error_type"] == "tool_error"

    full = CliRunner().invoke(main, ["output", "b"], env=served)
    assert full.exit_code == 0
    assert full.output.splitlines()[-1] == "20000"
    assert "exit code: 0" in full.output


def test_run_takes_a_json_array_and_logs_jsonl(served: dict[str, str], tmp_path: Path) -> None:
    calls = [{"id": f"g{i}", "name": "glob", "arguments": {"pattern": "*.txt"}} for i in range(3)]
    log = tmp_path / "agent.jsonl"
    result = CliRunner().invoke(
        main, ["run", "-", "--jsonl", str(log)], input=json.dumps(calls), env=served
    )
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 3
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert {e["call_id"] for e in events} == {"g0", "g1", "g2"}
    assert {e["event"] for e in events} >= {"tool_execution_started", "tool_result"}


def test_status_events_and_lock_status(served: dict[str, str]) -> None:
    runner = CliRunner()
    assert (
        runner.invoke(
            main,
            ["call", "calculator", "--args", '{"expression": "1+1"}', "--id", "s1"],
            env=served,
        ).exit_code
        == 0
    )
    status = runner.invoke(main, ["status", "--json"], env=served)
    assert status.exit_code == 0, status.output
    report = json.loads(status.output)
    assert [w["name"] for w in report["workers"]] == ["cli-worker"]
    assert report["queue"]["queued"] == 0
    assert report["lock"]["holders"] == []

    events = runner.invoke(main, ["events", "--json", "--call", "s1"], env=served)
    names = [json.loads(line)["event"] for line in events.output.splitlines()]
    assert names == ["lock_acquired", "tool_execution_started", "lock_released", "tool_result"]

    lock = runner.invoke(main, ["lock", "status"], env=served)
    assert lock.exit_code == 0, lock.output
    assert "free" in lock.output


def test_output_of_an_unknown_call_is_a_clear_error(served: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["output", "nope"], env=served)
    assert result.exit_code == 1
    assert "No full output is kept for 'nope'" in result.output


def test_unreachable_redis_is_a_clear_error() -> None:
    result = CliRunner().invoke(
        main,
        ["call", "calculator", "--args", '{"expression": "1"}', "--timeout", "2"],
        env={"TOOLPOOL_REDIS_URL": "redis://127.0.0.1:1/0"},
    )
    assert result.exit_code == EXIT_REDIS
    assert "Cannot reach Redis at redis://127.0.0.1:1/0: " in result.output
    assert "Check the URL (--redis or TOOLPOOL_REDIS_URL)" in result.output


def test_error_messages_never_show_the_redis_password() -> None:
    env = {"TOOLPOOL_REDIS_URL": "redis://:hunter2secret@127.0.0.1:1/0"}
    runner = CliRunner()
    for args in (
        ["call", "calculator", "--args", '{"expression": "1"}', "--timeout", "2"],
        ["status"],
        ["events"],
        ["lock", "status"],
    ):
        result = runner.invoke(main, args, env=env)
        assert result.exit_code == EXIT_REDIS, (args, result.output)
        assert "redis://:***@127.0.0.1:1/0" in result.output, (args, result.output)
        assert "hunter2secret" not in result.output, args


# -- a turn's bad calls are answered; a time limit a call may set; waiting for a worker ---------


def test_run_answers_arguments_that_are_not_json_and_runs_the_rest(
    served: dict[str, str],
) -> None:
    calls = [
        {
            "id": "cut",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "hel'},
        },
        {"id": "arr", "name": "read_file", "arguments": "[1,2]"},
        {"id": "ok", "name": "read_file", "arguments": {"path": "hello.txt"}},
    ]
    result = CliRunner().invoke(main, ["run", "-"], input=json.dumps(calls), env=served)
    assert result.exit_code == EXIT_FAILED, result.output
    cut, arr, ok = (json.loads(line) for line in result.stdout.splitlines())
    assert (cut["call_id"], cut["error_type"]) == ("cut", "invalid_arguments")
    assert cut["content"] == (
        "Invalid arguments for tool 'read_file':\n- arguments are not valid JSON: "
        "Unterminated string starting at: line 1 column 10 (char 9)\n"
        "Fix the arguments and call the tool again."
    )
    assert "arguments must be a JSON object, not an array" in arr["content"]
    assert (ok["status"], ok["content"]) == ("ok", "hello\nworld\n")


def test_tools_table_shows_a_settable_time_limit_by_default_and_maximum(
    redis_url: str, workspace: Path
) -> None:
    with serving(redis_url, workspace, WORKER_WITH_PAUSE) as env:
        result = CliRunner().invoke(main, ["tools"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = re.split(r"\s{2,}", lines[1])
    column = header.index("TIME LIMIT")
    limits = {row[0]: row[column] for row in (re.split(r"\s{2,}", line) for line in lines[2:])}
    assert limits["pause"] == "5s (seconds argument, up to 120s)"
    assert limits["read_file"] == "30s"
    # bash: 600 s is the most a call may ask for, not the limit a call gets. (What it shows
    # first depends on whether its schema publishes the default: see test_cli.py.)
    assert "up to 600s" in limits["bash"]
    assert "timeout argument" in limits["bash"]
    assert not limits["bash"].startswith("600s")


def _smembers_calls(client: redis.Redis) -> int:
    stats: dict[str, dict[str, int]] = client.info("commandstats")
    return int(stats.get("cmdstat_smembers", {}).get("calls", 0))


def test_call_with_wait_for_workers_waits_for_one(redis_url: str, workspace: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    read_before = _smembers_calls(client)
    command = [
        sys.executable,
        "-m",
        "executor.cli",
        "call",
        "calculator",
        "--args",
        '{"expression": "6*7"}',
        "--wait-for-workers",
        "120",
    ]
    cli = subprocess.Popen(
        command,
        env={**os.environ, "TOOLPOOL_REDIS_URL": redis_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Two reads of the catalog: the first found no worker, so the call is waiting.
        wait_for(
            lambda: _smembers_calls(client) >= read_before + 2 or cli.poll() is not None,
            "the call to look for a worker twice",
            timeout=60,
        )
        assert cli.poll() is None, cli.communicate()
        assert client.llen("rq:queue:toolpool.default") == 0
        with serving(redis_url, workspace):
            out, err = cli.communicate(timeout=120)
    finally:
        client.close()
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode == 0, err
    assert out.startswith("6*7 = 42\n-- ok  calculator  "), out
