"""bash in a session: the working directory and exported variables carry over between calls.

The tool is run directly with a ``ShellState`` whose ``save`` keeps what it is given, as the
worker's session step keeps it in Redis.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from executor import ToolContext, ToolError
from executor.contract import ShellState, Workspace
from workers.tools._shell_settings import BashSettings
from workers.tools.shell import bash


class _Session:
    """A session's shell state as the worker keeps it between calls."""

    def __init__(self, root: Path) -> None:
        self.workspace = Workspace(root)
        self.cwd = "."
        self.env: dict[str, str] = {}
        self.saves = 0
        self.unreachable = False
        self.settings = BashSettings()

    def run(self, command: str, **arguments: object) -> str:
        def save(cwd: str, env: dict[str, str]) -> bool:
            if self.unreachable:
                return False
            self.cwd, self.env = cwd, env
            self.saves += 1
            return True

        shell = ShellState(cwd=self.cwd, env=dict(self.env), save=save)
        context = ToolContext(workspace=self.workspace, settings=self.settings, shell=shell)
        return str(bash.invoke(context, {"command": command, **arguments}))


@pytest.fixture
def session(tmp_path: Path) -> _Session:
    root = tmp_path / "s1"
    (root / "sub" / "deeper").mkdir(parents=True)
    return _Session(root)


def test_cd_and_export_carry_over_to_the_next_call(session: _Session) -> None:
    session.run("cd sub && export X=1 GREETING='two words'")
    out = session.run("pwd; echo $X; echo $GREETING")
    assert out.splitlines()[2:] == [str(session.workspace.root / "sub"), "1", "two words"]
    assert session.cwd == "sub"
    assert session.env == {"X": "1", "GREETING": "two words"}


def test_unset_drops_a_variable_and_plain_shell_variables_are_not_kept(session: _Session) -> None:
    session.run("export X=1 Y=2")
    session.run("unset X; Z=3")
    assert session.env == {"Y": "2"}


def test_the_state_of_a_command_that_exits_with_an_error_is_kept(session: _Session) -> None:
    out = session.run("cd sub/deeper; exit 3")
    assert out.startswith("exit code: 3")
    assert session.cwd == "sub/deeper"


def test_a_cd_out_of_the_session_folder_is_not_followed(session: _Session) -> None:
    out = session.run("cd /tmp")
    assert "outside the session folder" in out
    assert session.cwd == "."
    assert session.run("pwd").splitlines()[-1] == str(session.workspace.root)


def test_a_cd_into_a_sibling_folder_sharing_the_sessions_name_is_not_followed(
    session: _Session,
) -> None:
    # The session folder is .../s1; .../s1-evil starts with the same characters and is outside.
    # Unconfined, as where bubblewrap is missing: a sandbox would not show the sibling at all.
    session.settings = BashSettings(sandbox="off")
    sibling = session.workspace.root.parent / f"{session.workspace.root.name}-evil"
    sibling.mkdir()
    out = session.run(f"cd {sibling}")
    assert "outside the session folder" in out
    assert session.cwd == "."
    assert session.run("pwd").splitlines()[-1] == str(session.workspace.root)


def test_a_kept_directory_that_is_gone_or_leads_out_starts_the_next_call_at_the_root(
    session: _Session, tmp_path: Path
) -> None:
    session.cwd = "sub/missing"
    out = session.run("pwd")
    assert str(session.workspace.root) in out
    assert "outside the session folder or gone" in out
    os.symlink(tmp_path, session.workspace.root / "out")
    session.cwd = "out"
    assert "outside the session folder or gone" in session.run("true")
    assert session.cwd == "."


def test_a_timed_out_command_keeps_the_earlier_state(session: _Session) -> None:
    session.run("cd sub")
    with pytest.raises(ToolError, match="timed out"):
        session.run("cd deeper; sleep 30", timeout=0.5)
    assert session.cwd == "sub"


def test_shells_the_command_starts_do_not_report_their_own_state(session: _Session) -> None:
    out = session.run("bash -c 'cd /; export INNER=1'; env | grep -c '^BASH_ENV=' || true")
    assert out.splitlines()[-1] == "0"
    assert session.cwd == "."
    assert "INNER" not in session.env


def test_errors_read_as_without_a_session(session: _Session) -> None:
    out = session.run("if then")
    assert "line 1: syntax error" in out
    assert "trap" not in out
    assert "BASH_ENV" not in out


def test_the_worker_environment_is_not_kept_as_the_sessions(session: _Session) -> None:
    session.run("true")
    assert session.env == {}
    assert session.saves == 1


def test_oversized_exports_are_not_kept(session: _Session) -> None:
    session.run("export SMALL=1")
    out = session.run("export BIG=$(head -c 70000 /dev/zero | tr '\\0' x); cd sub")
    assert "were not kept" in out
    assert session.env == {"SMALL": "1"}
    assert session.cwd == "sub"


def test_a_command_that_ends_in_a_removed_directory_says_so(session: _Session) -> None:
    session.run("cd sub")
    out = session.run("mkdir gone && cd gone && rmdir ../gone")
    assert "ended in a directory that no longer exists" in out
    assert session.cwd == "."


def test_a_state_that_cannot_be_kept_is_said_and_the_command_still_answers(
    session: _Session,
) -> None:
    session.run("cd sub")
    session.unreachable = True
    out = session.run("cd deeper; echo ran")
    assert out.startswith("exit code: 0\nstdout:\nran")
    assert "could not be kept: Redis was out of reach" in out
    assert session.cwd == "sub"
