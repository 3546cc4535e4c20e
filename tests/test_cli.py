"""The command line, through click's runner and as a real process."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from executor.cli import main, time_limit_text
from executor.contract import ToolInfo
from executor.wire import EventLog, Keys
from tests.support.procs import python_path_env

# No Redis: what these commands check before they need one is all a test here reaches.
NO_REDIS = {"TOOLPOOL_REDIS_URL": ""}


def test_worker_side_commands_join_through_entry_points() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for command in ("call", "run", "tools", "worker", "up", "demo", "exec"):
        assert f"  {command} " in result.output, command


def test_user_tools_are_added_by_import_string(tmp_path: Path) -> None:
    args = [
        "exec",
        "shout",
        "--args",
        '{"text": "hi"}',
        "--workspace",
        str(tmp_path),
        "--tools",
        "tests.support.sample_tools:registry",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["content"] == "HI"


def test_bad_registry_is_a_clean_error(tmp_path: Path) -> None:
    args = ["exec", "bash", "--workspace", str(tmp_path), "--tools", "nowhere_xyz:registry"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "Error: Cannot import 'nowhere_xyz'" in result.output


def test_exec_prints_the_result(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello\nworld\n")
    args = [
        "exec",
        "read_file",
        "--args",
        '{"path": "hello.txt"}',
        "--workspace",
        str(tmp_path),
        "--id",
        "c-7",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert (payload["call_id"], payload["status"], payload["content"]) == (
        "c-7",
        "ok",
        "hello\nworld\n",
    )


def test_call_failure_exits_one_with_the_error_result(tmp_path: Path) -> None:
    args = ["exec", "read_file", "--args", '{"path": "missing.txt"}', "--workspace", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    payload = json.loads(result.output)
    assert payload["error_type"] == "tool_error"
    assert "File not found" in payload["content"]


def test_call_argument_errors_are_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_json = runner.invoke(main, ["exec", "bash", "--args", "{oops"])
    assert bad_json.exit_code == 2
    assert "--args" in bad_json.output
    assert "not valid JSON" in bad_json.output
    not_object = runner.invoke(main, ["call", "bash", "--args", "[1]"])
    assert "must be a JSON object" in not_object.output
    no_redis = runner.invoke(main, ["call", "bash", "--args", "{}"], env={"TOOLPOOL_REDIS_URL": ""})
    assert no_redis.exit_code == 2
    assert "No Redis URL: pass --redis URL or set TOOLPOOL_REDIS_URL" in no_redis.output


def test_console_script_runs_as_a_real_process(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "executor.cli",
            "exec",
            "bash",
            "--workspace",
            str(tmp_path),
            "--args",
            json.dumps({"command": "echo out; echo err >&2; exit 3"}),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    content = json.loads(completed.stdout)["content"]
    assert "exit code: 3" in content
    assert "out" in content
    assert "err" in content


# -- `toolpool run`: its input, one clear message per mistake -------------------------------


@pytest.mark.parametrize("text", ["", "  \n\n ", "[]", "[\n]"])
def test_run_with_no_calls_is_one_usage_error(text: str) -> None:
    result = CliRunner().invoke(main, ["run", "-"], input=text, env=NO_REDIS)
    assert result.exit_code == 2, result.output
    assert result.output.endswith(
        "Error: No tool calls in the input: give a JSON array of calls, or one call per line.\n"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[{"id": "a", "nme": "read_file"}]',
            "Call 1 is not a tool call: it has no tool name; unexpected key 'nme'.",
        ),
        (
            '[{"id": "a", "name": "glob", "arguments": {}}, {"id": "b", "name": "glob", "x": 1}]',
            "Call 2 is not a tool call: unexpected key 'x'.",
        ),
        (
            '{"id": "a", "name": "glob"}\n{"id": "b", "function": {"arguments": "{}"}}',
            "Call 2 is not a tool call: it has no tool name.",
        ),
        (
            '[{"id": 5, "name": "glob"}]',
            "Call 1 is not a tool call: 'id': Input should be a valid string.",
        ),
        ("[42]", "Call 1 is not a tool call: it is a number, not an object."),
        (
            '{"id": "a", "name": "glob"}\n\n{"id": "b", "name": "glob",\n',
            "The input is not a JSON array or JSON lines: line 3 is not JSON (Expecting",
        ),
        ('[{"id": "a", "name": "glob"}', "The input is not a JSON array or JSON lines: Expecting"),
    ],
)
def test_run_input_mistakes_are_one_plain_message_naming_the_call(text: str, said: str) -> None:
    result = CliRunner().invoke(main, ["run", "-"], input=text, env=NO_REDIS)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith("Error: " + said), result.output
    assert "pydantic" not in result.output
    assert "validation error" not in result.output
    assert "Traceback" not in result.output


def test_run_takes_one_pretty_printed_call() -> None:
    # One call spread over lines is one JSON document, not broken JSON lines: it reaches the
    # next check (here: no Redis URL), not an input error.
    text = json.dumps({"id": "a", "name": "glob", "arguments": {"pattern": "*"}}, indent=2)
    result = CliRunner().invoke(main, ["run", "-"], input=text, env=NO_REDIS)
    assert result.exit_code == 2, result.output
    assert "No Redis URL" in result.output


def test_run_with_one_call_id_twice_is_a_usage_error(redis_url: str) -> None:
    calls = [{"id": "same", "name": "glob", "arguments": {}}] * 2
    result = CliRunner().invoke(
        main, ["run", "-"], input=json.dumps(calls), env={"TOOLPOOL_REDIS_URL": redis_url}
    )
    assert result.exit_code == 2, result.output
    assert "Error: Call id 'same' appears twice in one turn" in result.output


# -- `toolpool call` with no worker on the queue ------------------------------------------------


def test_call_with_no_live_worker_says_so_at_once(redis_url: str, client: redis.Redis) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(
        main,
        ["call", "calculator", "--args", '{"expression": "1+1"}', "--timeout", "600"],
        env={"TOOLPOOL_REDIS_URL": redis_url},
    )
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, result.output
    assert "No live worker serves queue 'toolpool.default', so no call was submitted" in (
        result.output
    )
    assert "--wait-for-workers" in result.output
    # Not the 600 s turn timeout: one read of the catalog, then the answer.
    assert elapsed < 30, elapsed
    assert client.llen("rq:queue:toolpool.default") == 0
    assert not client.keys("toolpool:turn:*")


# -- `toolpool events`: readable times, no None fields --------------------------------------------


def test_events_show_times_as_clock_times_and_leave_out_none(
    redis_url: str, client: redis.Redis
) -> None:
    released_at = 1796037434.13
    EventLog(client, Keys(), worker="w1").emit(
        "lock_released",
        call_id="c1",
        turn_id="t1",
        tool="read_file",
        mode="shared",
        fence=None,
        held=True,
        released_at=released_at,
    )
    env = {"TOOLPOOL_REDIS_URL": redis_url}
    text = CliRunner().invoke(main, ["events"], env=env)
    assert text.exit_code == 0, text.output
    (line,) = text.output.splitlines()
    clock = datetime.datetime.fromtimestamp(released_at).strftime("%H:%M:%S.%f")[:-3]
    assert line.endswith(f"call=c1 turn=t1 w1 mode=shared held=True released_at={clock}"), line
    assert "None" not in line
    assert "fence" not in line
    assert "1796037434" not in line

    raw = CliRunner().invoke(main, ["events", "--json"], env=env)
    data = json.loads(raw.output)["data"]
    assert data == {"mode": "shared", "fence": None, "held": True, "released_at": released_at}


# -- `toolpool tools`: a time limit a call may set -----------------------------------------------


def _info(timeout: float, argument: str | None, schema: dict[str, Any]) -> ToolInfo:
    parameters = {"type": "object", "properties": {argument: schema} if argument else {}}
    return ToolInfo(
        name="t", description="d", parameters=parameters, timeout=timeout, timeout_argument=argument
    )


@pytest.mark.parametrize(
    ("info", "shown"),
    [
        (_info(30, None, {}), "30s"),
        (_info(2.5, None, {}), "2.5s"),
        # bash as it publishes itself with its default and maximum (an optional number)
        (
            _info(
                600,
                "timeout",
                {
                    "anyOf": [
                        {"type": "number", "exclusiveMinimum": 0, "maximum": 600},
                        {"type": "null"},
                    ],
                    "default": 10,
                },
            ),
            "10s (timeout argument, up to 600s)",
        ),
        (
            _info(200, "seconds", {"type": "number", "default": 5, "maximum": 120}),
            "5s (seconds argument, up to 120s)",
        ),
        # no published maximum: the tool's own limit is the most
        (
            _info(600, "timeout", {"type": "number", "default": 10}),
            "10s (timeout argument, up to 600s)",
        ),
        # no published default: say only what is known
        (
            _info(
                600, "timeout", {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None}
            ),
            "up to 600s (set by its timeout argument)",
        ),
    ],
)
def test_time_limit_says_the_default_and_the_maximum(info: ToolInfo, shown: str) -> None:
    assert time_limit_text(info) == shown


def test_the_cli_works_without_the_extras(tmp_path: Path) -> None:
    # Found by a clean clone: the demo's install has no MCP SDK, and `toolpool` itself failed
    # to import. Here no extra's package can be imported, as in that install.
    script = (
        "import sys\n"
        "for name in ('mcp', 'anyio', 'starlette', 'uvicorn', 'prometheus_client', 'cairosvg'):\n"
        "    sys.modules[name] = None\n"
        "from executor.cli import main\n"
        "main()\n"
    )
    env = {k: v for k, v in python_path_env().items() if not k.startswith("TOOLPOOL_")}

    def toolpool(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert toolpool("--help").returncode == 0
    assert "demo" in toolpool("--help").stdout
    # Each says what to install, before it looks for Redis (nothing listens on port 9).
    for command, extra in (("mcp", "mcp"), ("dashboard", "dashboard"), ("metrics", "metrics")):
        refused = toolpool(command, "--redis", "redis://127.0.0.1:9/0")
        assert refused.returncode == 1, (command, refused.stderr)
        assert f"pip install 'toolpool[{extra}]'" in refused.stderr
        assert "Traceback" not in refused.stderr
