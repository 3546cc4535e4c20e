"""Confinement to the workspace: a sibling folder is outside, and a root given through a
symbolic link confines like its real folder.

A sibling whose name starts with the root's (``/x/ws-evil`` beside ``/x/ws``) is what a
string-prefix check would let in. A root given through a linked folder (macOS's ``/tmp`` is
``/private/tmp``) must still accept its own files and refuse every way out. Each case runs
through ``Workspace.resolve`` and through the file tools on the real runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from executor import Settings, Tool, ToolCall, ToolRegistry, ToolResult, WorkspaceError
from executor.contract import Workspace
from tests.support.expect import ok, tool_error
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools.files import edit_file, list_directory, read_file, write_file
from workers.tools.search import glob, grep

SECRET = "secret-needle"


def _run(workspace: Workspace, tool: Tool, **arguments: Any) -> ToolResult:
    env = CallEnvironment(workspace=workspace, settings=Settings())
    return run_call(ToolCall(name=tool.name, arguments=arguments), ToolRegistry([tool]), env)


def _refused(workspace: Workspace, tool: Tool, given: str, **arguments: Any) -> None:
    """The call is a tool error that names the path and says it is outside the workspace."""
    message = tool_error(_run(workspace, tool, **arguments))
    assert f"Path {given!r} is outside the workspace ({workspace.root})" in message, message
    assert SECRET not in message


# -- a sibling folder whose name starts with the root's ------------------------------------


@dataclass
class Siblings:
    workspace: Workspace
    evil: Path


@pytest.fixture
def siblings(tmp_path: Path) -> Siblings:
    root = tmp_path / "x" / "ws"
    evil = tmp_path / "x" / "ws-evil"
    root.mkdir(parents=True)
    evil.mkdir()
    (evil / "secret.txt").write_text(SECRET + "\n")
    (root / "mine.txt").write_text("mine\n")
    return Siblings(Workspace(root), evil)


def _sibling_spellings(evil: Path) -> list[str]:
    return [
        str(evil),
        str(evil / "secret.txt"),
        "../ws-evil",
        "../ws-evil/secret.txt",
        "./../ws-evil/secret.txt",
    ]


def test_resolve_refuses_the_sibling_folder_in_every_spelling(siblings: Siblings) -> None:
    workspace = siblings.workspace
    assert str(siblings.evil).startswith(str(workspace.root))  # what a prefix check sees
    for given in _sibling_spellings(siblings.evil):
        with pytest.raises(WorkspaceError) as refused:
            workspace.resolve(given)
        assert str(refused.value) == (
            f"Path {given!r} is outside the workspace ({workspace.root}). "
            "Use a path inside the workspace, relative to its root."
        )
    # The root itself, and what is in it, still resolve.
    assert workspace.resolve(str(workspace.root)) == workspace.root
    assert workspace.resolve("mine.txt") == workspace.root / "mine.txt"


def test_a_link_inside_the_root_to_the_sibling_is_refused(siblings: Siblings) -> None:
    workspace = siblings.workspace
    (workspace.root / "door").symlink_to(siblings.evil)
    with pytest.raises(WorkspaceError, match="is outside the workspace"):
        workspace.resolve("door/secret.txt")
    _refused(workspace, read_file, "door/secret.txt", path="door/secret.txt")


def test_the_file_tools_refuse_the_sibling_folder(siblings: Siblings) -> None:
    workspace, evil = siblings.workspace, siblings.evil
    for given in _sibling_spellings(evil):
        _refused(workspace, list_directory, given, path=given)
        _refused(workspace, grep, given, pattern="needle", path=given)
    for given in (str(evil), "../ws-evil"):
        _refused(workspace, glob, given, pattern="**/*", path=given)
    for given in (str(evil / "secret.txt"), "../ws-evil/secret.txt"):
        _refused(workspace, read_file, given, path=given)
        _refused(workspace, edit_file, given, path=given, old_string=SECRET, new_string="x")
    for given in (str(evil / "new.txt"), "../ws-evil/new.txt", "../ws-evil/sub/new.txt"):
        _refused(workspace, write_file, given, path=given, content="planted")
    # Nothing in the sibling changed.
    assert sorted(p.name for p in evil.iterdir()) == ["secret.txt"]
    assert (evil / "secret.txt").read_text() == SECRET + "\n"


# -- a root given through a symbolic link ----------------------------------------------------


@dataclass
class Linked:
    workspace: Workspace
    given: Path  # the root as given: through the link
    real: Path  # the same folder without the link


@pytest.fixture
def linked(tmp_path: Path) -> Linked:
    real_parent = tmp_path / "private" / "tmp"
    real = real_parent / "ws"
    (real / "src").mkdir(parents=True)
    (real / "src" / "a.txt").write_text("alpha needle\n")
    (real / "notes.md").write_text("beta\n")
    # Outside: beside the root, in the parent of the link, and a folder a link inside leads to.
    (real_parent / "beside.txt").write_text(SECRET + "\n")
    (tmp_path / "top.txt").write_text(SECRET + "\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.txt").write_text(SECRET + "\n")
    (real / "out").symlink_to(tmp_path / "elsewhere")
    (real / "out-file").symlink_to(tmp_path / "top.txt")
    (tmp_path / "tmp").symlink_to(real_parent)
    given = tmp_path / "tmp" / "ws"
    return Linked(Workspace(given), given, real)


def test_a_linked_root_resolves_to_its_real_folder(linked: Linked) -> None:
    workspace = linked.workspace
    assert workspace.root == linked.real
    assert workspace.resolve("src/a.txt") == linked.real / "src" / "a.txt"
    # Absolute paths inside, spelled through the link or not, are inside.
    assert workspace.resolve(str(linked.given / "src" / "a.txt")) == linked.real / "src" / "a.txt"
    assert workspace.resolve(str(linked.real / "notes.md")) == linked.real / "notes.md"
    assert workspace.resolve(str(linked.given)) == linked.real
    assert workspace.resolve("new/file.txt") == linked.real / "new" / "file.txt"


def test_the_file_tools_work_inside_a_linked_root(linked: Linked) -> None:
    workspace, given = linked.workspace, linked.given
    assert ok(_run(workspace, read_file, path="src/a.txt")) == "alpha needle\n"
    assert ok(_run(workspace, read_file, path=str(given / "notes.md"))) == "beta\n"
    assert ok(_run(workspace, write_file, path="made/new.txt", content="gamma\n")) == (
        "Successfully wrote 6 bytes to made/new.txt"
    )
    assert (linked.real / "made" / "new.txt").read_text() == "gamma\n"
    written = ok(_run(workspace, write_file, path=str(given / "abs.txt"), content="d"))
    assert written == "Successfully wrote 1 bytes to abs.txt"
    assert (linked.real / "abs.txt").read_text() == "d"
    listed = ok(_run(workspace, list_directory, path=".")).splitlines()
    assert {"abs.txt", "made/", "notes.md", "src/"} <= set(listed)
    assert ok(_run(workspace, list_directory, path=str(given / "src"))) == "a.txt"
    assert ok(_run(workspace, grep, pattern="needle")) == "src/a.txt:1: alpha needle"
    assert ok(_run(workspace, grep, pattern="needle", path=str(given / "src"))) == (
        "src/a.txt:1: alpha needle"
    )
    assert ok(_run(workspace, glob, pattern="**/*.txt")).splitlines() == [
        "abs.txt",
        "made/new.txt",
        "src/a.txt",
    ]
    assert ok(_run(workspace, glob, pattern="*.txt", path=str(given / "src"))) == "src/a.txt"


@pytest.mark.parametrize(
    "spelling",
    [
        "../beside.txt",
        "src/../../beside.txt",
        "{given}/../beside.txt",
        "{real}/../beside.txt",
        "{tmp}/top.txt",
        "out/secret.txt",
        "out-file",
        "{given}/out/secret.txt",
    ],
)
def test_escapes_from_a_linked_root_are_refused(
    linked: Linked, tmp_path: Path, spelling: str
) -> None:
    workspace = linked.workspace
    given = spelling.format(given=linked.given, real=linked.real, tmp=tmp_path)
    with pytest.raises(WorkspaceError, match="is outside the workspace"):
        workspace.resolve(given)
    _refused(workspace, read_file, given, path=given)
    _refused(workspace, write_file, given, path=given, content="planted")
    _refused(workspace, grep, given, pattern="needle", path=given)
    _refused(workspace, list_directory, given, path=given)
    assert (tmp_path / "top.txt").read_text() == SECRET + "\n"


@pytest.mark.parametrize("spelling", ["..", "out", "{given}/..", "{tmp}"])
def test_folders_outside_a_linked_root_are_refused_to_glob_and_list(
    linked: Linked, tmp_path: Path, spelling: str
) -> None:
    workspace = linked.workspace
    given = spelling.format(given=linked.given, tmp=tmp_path)
    _refused(workspace, glob, given, pattern="**/*", path=given)
    _refused(workspace, list_directory, given, path=given)
    _refused(workspace, grep, given, pattern="needle", path=given)
