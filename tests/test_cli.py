"""The command line, through click's runner and as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from executor.cli import main

NINE = [
    "get_weather", "calculator", "read_file", "write_file", "list_directory", "edit_file",
    "glob", "grep", "bash",
]  # fmt: skip


def test_tools_table_lists_flags_and_limits() -> None:
    result = CliRunner().invoke(main, ["tools"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:5] == ["TOOL", "MODE", "READ-ONLY", "MAX", "CHARS"]
    rows = {line.split()[0]: line.split()[1:4] for line in lines[1:]}
    assert list(rows) == NINE
    assert rows["read_file"] == ["shared", "yes", "500"]
    assert rows["bash"] == ["exclusive", "no", "3000"]


def test_tools_export_formats() -> None:
    for fmt, key in (("openai", "function"), ("anthropic", "input_schema"),
                     ("mcp", "inputSchema")):  # fmt: skip
        result = CliRunner().invoke(main, ["tools", "--format", fmt])
        assert result.exit_code == 0, result.output
        exported = json.loads(result.output)
        assert len(exported) == 9
        assert all(key in item for item in exported)


def test_user_tools_are_added_by_import_string() -> None:
    result = CliRunner().invoke(main, ["tools", "--tools", "sample_tools:registry"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("shout ")


def test_bad_registry_is_a_clean_error() -> None:
    result = CliRunner().invoke(main, ["tools", "--tools", "nowhere_xyz:registry"])
    assert result.exit_code == 1
    assert "Error: Cannot import 'nowhere_xyz'" in result.output


def test_call_local_prints_the_result(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello\nworld\n")
    args = ["call", "read_file", "--args", '{"path": "hello.txt"}', "--local",
            "--workspace", str(tmp_path), "--id", "c-7"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert (payload["call_id"], payload["status"], payload["content"]) == (
        "c-7", "ok", "hello\nworld\n"
    )  # fmt: skip


def test_call_failure_exits_one_with_the_error_result(tmp_path: Path) -> None:
    args = ["call", "read_file", "--args", '{"path": "missing.txt"}', "--local",
            "--workspace", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    payload = json.loads(result.output)
    assert payload["error_type"] == "tool_error"
    assert "File not found" in payload["content"]


def test_call_argument_errors_are_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_json = runner.invoke(main, ["call", "bash", "--args", "{oops", "--local"])
    assert bad_json.exit_code == 2
    assert "--args" in bad_json.output
    assert "not valid JSON" in bad_json.output
    not_object = runner.invoke(main, ["call", "bash", "--args", "[1]", "--local"])
    assert "must be a JSON object" in not_object.output
    no_redis = runner.invoke(main, ["call", "bash", "--args", "{}"],
                             env={"TOOLPOOL_REDIS_URL": ""})  # fmt: skip
    assert no_redis.exit_code == 2
    assert "No Redis URL: pass --redis URL or set TOOLPOOL_REDIS_URL" in no_redis.output


def test_console_script_runs_as_a_real_process(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "executor.cli", "call", "bash", "--local", "--workspace",
         str(tmp_path), "--args", json.dumps({"command": "echo out; echo err >&2; exit 3"})],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    content = json.loads(completed.stdout)["content"]
    assert "exit code: 3" in content
    assert "out" in content
    assert "err" in content
