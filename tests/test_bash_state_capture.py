"""bash's shell state read at the command's end from builtins (``export -p``), not ``env -0``.

The kept variables must be exactly those a child of the shell would get: each command below
ends with ``env -0`` (a child, listing the environment as the kernel passes it), and the state
the session keeps must equal that listing, less bash's own variables and the worker's. Values
with newlines, control bytes, quotes, backslashes, non-ASCII; integers, namerefs, arrays
(never exported), POSIX mode, exported functions (which take the ``env -0`` way), and a name
bash cannot hold as a variable, passed through from the session's state.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from executor import ToolContext
from executor.contract import ShellState, Workspace
from workers.tools._shell_export import ExportError, exported
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_state import _SHELL_OWN
from workers.tools.shell import bash, command_environment

_COMMANDS = [
    "export A=$'a\\nb' B='q\"\\\\$`x' C=$'\\x01\\t\\xff\\x1b' D E= F=' lead' G=$'\\'q' H='日本'",
    "export I=$'\\r\\v\\f\\a\\b' J='$(no)' K='a\\nb'; declare -ix N=5; declare -nx R=N",
    "declare -ax ARR=(1 ')' $'x\\ny'); declare -Ax AA=([')']=1 ['a b']=2); export S=1",
    "set -o posix; export P='x\"y' Q=$'1\\n2'",
    "export X=$'\\x80\\xfe' Y='\\\\n'; unset LANG; cd sub",
    "f() { echo '}'; }; export -f f; export Z=1",
]


def _run(root: Path, command: str, state_env: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """Run ``command`` then ``env -0`` into a file; the env kept, and the listing."""
    kept: dict[str, dict[str, str]] = {}

    def save(cwd: str, env: dict[str, str]) -> bool:
        kept["env"] = env
        return True

    context = ToolContext(
        workspace=Workspace(root),
        settings=BashSettings(sandbox="off"),
        shell=ShellState(cwd=".", env=dict(state_env), save=save),
    )
    report = bash.invoke(context, bash.validate({"command": f"{command}; env -0 > {root}/env"}))
    assert str(report).startswith("exit code: 0"), report
    return kept["env"], (root / "env").read_bytes()


@pytest.mark.parametrize("command", _COMMANDS)
def test_the_kept_variables_are_what_a_child_of_the_shell_gets(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "sub").mkdir()
    base = command_environment(os.environ, "")
    state = {"a-b": "weird name", "MODE": "kept"}

    kept, listing = _run(tmp_path, command, state)

    expected = {}
    for entry in listing.split(b"\0"):
        name, sep, value = entry.decode(errors="replace").partition("=")
        if sep and name not in _SHELL_OWN and base.get(name) != value:
            expected[name] = value
    assert kept == expected
    assert kept["a-b"] == "weird name"
    assert kept["MODE"] == "kept"


def test_a_listing_that_is_not_bashs_is_refused() -> None:
    assert exported(b"declare -x A=\"1\"\nexport B=$'\\n'\n") == {b"A": b"1", b"B": b"\n"}
    for text in (b"A=1\n", b'declare -x A="1', b"declare -x A=unquoted\n", b"declare -x A=(\n"):
        with pytest.raises(ExportError):
            exported(text)
