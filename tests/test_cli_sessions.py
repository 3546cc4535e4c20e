"""``toolpool session ...`` and ``--session`` against a real Redis and a real worker pool."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from executor import ErrorType, Executor, Settings
from executor.cli import main
from tests.support.procs import running_pool, wait_for_event

pytestmark = pytest.mark.proof  # a real worker pool


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A pool of two workers serving sessions in ``tmp_path/sessions`` (host ``h1``)."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "sessions").mkdir()
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src" / "main.py").write_text("print('hi')\n")
    settings = Settings(
        redis_url=redis_url,
        workspace=tmp_path / "ws",
        sessions_root=tmp_path / "sessions",
        host="h1",
    )
    with running_pool(settings, workers=2):
        yield {"TOOLPOOL_REDIS_URL": redis_url, "TOOLPOOL_SESSION": ""}


def _run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_a_session_is_created_used_listed_and_deleted(env: dict[str, str], tmp_path: Path) -> None:
    made = _run(env, "session", "create", "agent-1", "--from", str(tmp_path / "template"))
    assert made.exit_code == 0, made.output
    assert "Created session 'agent-1' on host 'h1'" in made.output
    assert (tmp_path / "sessions" / "agent-1" / "src" / "main.py").exists()

    cd = _run(
        env, "call", "bash", "--args", '{"command": "cd src && export M=7"}', "--session", "agent-1"
    )
    assert cd.exit_code == 0, cd.output
    shown = _run(
        {**env, "TOOLPOOL_SESSION": "agent-1"},
        "call",
        "bash",
        "--args",
        '{"command": "ls; echo M=$M"}',
        "--json",
    )
    assert json.loads(shown.stdout)["content"].endswith("main.py\nM=7")

    listed = _run(env, "session", "list")
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if line.startswith("agent-1"))
    assert row.split()[1:3] == ["h1", "ready"]
    record = json.loads(_run(env, "session", "show", "agent-1", "--json").output)
    assert (record["calls"], record["cwd"], record["env"], record["lock"]) == (
        2,
        "src",
        ["M"],
        "free",
    )

    status = _run(env, "status", "--session", "agent-1")
    assert "Session agent-1 on host h1: ready, 2 calls, 0 pending, cwd src" in status.output
    assert "Queue toolpool.default@h1" in status.output
    lock = _run(env, "lock", "status", "--session", "agent-1")
    assert "Lock scope 'session.agent-1'" in lock.output
    events = _run(env, "events", "--session", "agent-1", "--json")
    tools = {json.loads(line)["tool"] for line in events.output.splitlines()}
    assert tools == {"bash"}

    gone = _run(env, "session", "delete", "agent-1")
    assert gone.exit_code == 0, gone.output
    assert "its folder on host 'h1' and its keys" in gone.output
    assert not (tmp_path / "sessions" / "agent-1").exists()
    late = _run(
        env,
        "call",
        "read_file",
        "--args",
        '{"path": "src/main.py"}',
        "--session",
        "agent-1",
        "--json",
    )
    assert late.exit_code == 1
    assert json.loads(late.stdout)["error_type"] == "unknown_session"


def test_bad_session_input_is_a_clear_error(env: dict[str, str]) -> None:
    bad = _run(env, "session", "create", "../escape")
    assert bad.exit_code == 1
    assert "Invalid session name '../escape'" in bad.output
    assert _run(env, "session", "create", "s1").exit_code == 0
    taken = _run(env, "session", "create", "s1")
    assert "Session 's1' already exists" in taken.output
    elsewhere = _run(env, "session", "create", "s2", "--host", "h9")
    assert "No live worker serves sessions on host 'h9'; live hosts: h1" in elsewhere.output
    missing = _run(env, "session", "delete", "nope")
    assert "No session 'nope'" in missing.output
    both = _run(env, "lock", "status", "--session", "s1", "--scope", "global")
    assert both.exit_code == 2
    assert "Give --scope or --session, not both" in both.output
    template = _run(env, "session", "create", "s3", "--from", "/no/such/folder")
    assert "Template '/no/such/folder' is not a folder on this host" in template.output
    assert "s3" not in _run(env, "session", "list").output


def test_session_show_prints_times_and_sizes_for_a_person(env: dict[str, str]) -> None:
    assert _run(env, "session", "create", "shown").exit_code == 0
    assert _run(env, "call", "bash", "--args", '{"command": "export K=1"}', "--session", "shown")
    shown = _run(env, "session", "show", "shown")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout.replace("last used", "last_used").replace("idle ttl", "idle_ttl")
    lines = dict(line.split(None, 1) for line in text.splitlines())
    # Local ISO times with their age, not epoch seconds.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+ s ago\)", lines["created"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(in 2\d\.\d h\)", lines["expires"])
    assert lines["idle_ttl"] == "24.0 h without a call"
    counted = r"unknown \(not counted yet\)|\d+(\.\d)? [KMG]?B \(counted .* ago\)"
    assert re.fullmatch(counted, lines["size"]), lines["size"]
    assert (lines["calls"], lines["env"], lines["lock"]) == (
        "1 (0 waiting or running)",
        "K",
        "free",
    )
    assert lines["processes"] == "no background processes"
    assert "None" not in shown.stdout
    assert not re.search(r"\b1[789]\d{8}\b", shown.stdout), shown.stdout  # no epoch seconds


def test_delete_force_answers_the_running_call_cancelled(
    env: dict[str, str], redis_url: str, client: redis.Redis
) -> None:
    assert _run(env, "session", "create", "doomed").exit_code == 0
    with Executor(settings=Settings(redis_url=redis_url), session="doomed") as executor:
        turn = executor.submit(
            [{"id": "f-hang", "name": "bash", "arguments": {"command": "sleep 60", "timeout": 120}}]
        )
        wait_for_event(client, "tool_execution_started", "f-hang")
        gone = _run(env, "session", "delete", "doomed", "--force")
        assert gone.exit_code == 0, gone.output
        [result] = executor.collect(turn, timeout=60)
    # Stopped by the delete, not by a fault of the tool: the model reads `cancelled`.
    assert result.error_type is ErrorType.CANCELLED, (result.error_type, result.content)
    assert result.content.startswith("Command cancelled and killed."), result.content
