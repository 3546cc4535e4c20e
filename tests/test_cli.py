"""The command line, through click's runner and as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from executor.cli import main


def test_worker_side_commands_join_through_entry_points() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for command in ("call", "run", "tools", "worker", "up", "demo", "exec"):
        assert f"  {command} " in result.output, command


def test_user_tools_are_added_by_import_string(tmp_path: Path) -> None:
    args = ["exec", "shout", "--args", '{"text": "hi"}', "--workspace", str(tmp_path),
            "--tools", "tests.support.sample_tools:registry"]  # fmt: skip
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
    args = ["exec", "read_file", "--args", '{"path": "hello.txt"}',
            "--workspace", str(tmp_path), "--id", "c-7"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert (payload["call_id"], payload["status"], payload["content"]) == (
        "c-7", "ok", "hello\nworld\n"
    )  # fmt: skip


def test_call_failure_exits_one_with_the_error_result(tmp_path: Path) -> None:
    args = ["exec", "read_file", "--args", '{"path": "missing.txt"}',
            "--workspace", str(tmp_path)]  # fmt: skip
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
    no_redis = runner.invoke(main, ["call", "bash", "--args", "{}"],
                             env={"TOOLPOOL_REDIS_URL": ""})  # fmt: skip
    assert no_redis.exit_code == 2
    assert "No Redis URL: pass --redis URL or set TOOLPOOL_REDIS_URL" in no_redis.output


def test_console_script_runs_as_a_real_process(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "executor.cli", "exec", "bash", "--workspace",
         str(tmp_path), "--args", json.dumps({"command": "echo out; echo err >&2; exit 3"})],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    content = json.loads(completed.stdout)["content"]
    assert "exit code: 3" in content
    assert "out" in content
    assert "err" in content
