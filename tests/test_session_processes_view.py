"""A session's background processes as people see them: ``Sessions.processes`` and
``toolpool session show`` / ``list``, on a real redis-server with a real worker process that
starts real background processes.

What a keeper records in Redis is what these show: a running process with its pid, then, after
``process_stop``, the state ``stopped`` with the stop's reason and the output it wrote; one that
ended by itself with its exit code; a long command shortened in the table and whole in JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from executor import Executor, ProcessRecord, SessionError, Sessions, Settings
from executor.cli import main
from tests.support.procs import MakeWorkers
from tests.support.sessions import call, host_settings, ok
from tests.support.waiting import wait_for

pytestmark = pytest.mark.proof

LONG = "sleep 0; true # " + "x" * 100  # ends by itself at once, exit code 0


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return host_settings(redis_url, tmp_path, "h1")


def _cli(settings: Settings, *args: str) -> Result:
    env = {"TOOLPOOL_REDIS_URL": settings.redis.url or "", "TOOLPOOL_SESSION": ""}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _row(output: str, process: str) -> list[str]:
    """The cells of ``process``'s row in ``session show``'s table (two spaces apart)."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith(process + " ")]
    assert len(lines) == 1, output
    return re.split(r"\s{2,}", lines[0])


def _session_row(output: str, name: str) -> dict[str, str]:
    """``session list``'s row of session ``name``, by column heading."""
    lines = output.splitlines()
    heading = re.split(r"\s{2,}", lines[0].strip())
    [row] = [line for line in lines[1:] if line.startswith(name + " ")]
    return dict(zip(heading, re.split(r"\s{2,}", row.strip()), strict=False))


def _state(sessions: Sessions, name: str, process: str) -> ProcessRecord | None:
    return next((r for r in sessions.processes(name) if r.id == process), None)


def _start(executor: Executor, call_id: str, command: str) -> str:
    [result] = executor.run([call(call_id, "process_start", command=command, wait=5)], timeout=90)
    return ok(result)


def test_a_running_process_and_its_stop_show_in_the_api_and_the_cli(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    """Oracle: a missing or stale record (no row, ``running`` after the stop, no reason, no
    pid), a count that does not follow the state, or an unknown session answered ``[]``."""
    make_workers(settings).start(1)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        sessions.create("idle")
        with pytest.raises(SessionError, match="No session 'nope'"):
            sessions.processes("nope")
        assert sessions.processes("idle") == []
        idle = _cli(settings, "session", "show", "idle").output
        assert "processes    no background processes" in idle.splitlines(), idle

        with Executor(settings=settings, session="s") as executor:
            assert "Started background process p1" in _start(
                executor, "start-1", "echo ready; exec sleep 600"
            )
            assert "Started background process p2" in _start(executor, "start-2", LONG)
            wait_for(
                lambda: getattr(_state(sessions, "s", "p2"), "state", "") == "exited",
                "p2 to be recorded exited",
            )
            [p1, p2] = sessions.processes("s")
            assert (p1.id, p1.state, p1.command) == ("p1", "running", "echo ready; exec sleep 600")
            assert p1.pid > 0, p1
            assert Path(f"/proc/{p1.pid}").exists(), p1  # the very process, still there
            assert (p2.state, p2.exit_code, p2.ending()) == ("exited", 0, "exit code 0")

            shown = _cli(settings, "session", "show", "s").output
            assert "processes    2 (1 running)" in shown, shown
            assert _row(shown, "ID") == ["ID", "STATE", "AGE", "PID OR ENDING", "OUTPUT", "COMMAND"]
            state, age, how, size, command = _row(shown, "p1")[1:]
            assert (state, how, size, command) == (
                "running",
                f"pid {p1.pid}",
                f"{p1.output_bytes} B",  # as recorded at its start
                "echo ready; exec sleep 600",
            )
            assert re.fullmatch(r"\d+ s", age), age
            cells = _row(shown, "p2")
            assert (cells[1], cells[3]) == ("exited", "exit code 0"), cells
            assert (cells[5][-1], len(cells[5])) == ("…", 60), cells  # shortened
            whole = json.loads(_cli(settings, "session", "show", "s", "--json").output)
            assert [p["command"] for p in whole["processes"]] == [p1.command, LONG]
            assert whole["processes"][0]["output_bytes"] == p1.output_bytes >= len("ready\n")
            listed = _cli(settings, "session", "list").output
            assert _session_row(listed, "s")["PROCS"] == "1", listed
            assert _session_row(listed, "idle")["PROCS"] == "0", listed

            [stop] = executor.run([call("stop-1", "process_stop", process="p1")], timeout=90)
            assert "stopped" in ok(stop), stop.content

        reason = "stopped by process_stop (SIGTERM)"
        wait_for(
            lambda: getattr(_state(sessions, "s", "p1"), "state", "") == "stopped",
            "p1 to be recorded stopped",
        )
        _stopped_shown(settings, sessions, reason)
        sessions.delete("s")
        with pytest.raises(SessionError, match="No session 's'"):
            sessions.processes("s")


def _stopped_shown(settings: Settings, sessions: Sessions, reason: str) -> None:
    """p1 of session ``s`` shows stopped, with ``reason`` and its output, in each view."""
    stopped = _state(sessions, "s", "p1")
    assert stopped is not None
    assert stopped.reason == reason, stopped
    assert stopped.ended_at is not None, stopped
    assert stopped.output_bytes >= len("ready\n"), stopped
    shown = _cli(settings, "session", "show", "s").output
    assert "processes    2 (0 running)" in shown, shown
    state, _, how, size, _ = _row(shown, "p1")[1:]
    assert (state, how) == ("stopped", reason), shown
    assert re.fullmatch(r"\d+ B", size), shown
    whole = json.loads(_cli(settings, "session", "show", "s", "--json").output)
    first: dict[str, Any] = whole["processes"][0]
    assert (first["state"], first["reason"], first["ending"]) == ("stopped", reason, reason)
    assert first["output_bytes"] == stopped.output_bytes
    listed = json.loads(_cli(settings, "session", "list", "--json").output.splitlines()[1])
    assert (listed["name"], listed["processes_running"]) == ("s", 0), listed
