"""Path resolution: everything outside the workspace root is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from executor import WorkspaceError
from executor.contract import Workspace


def test_relative_and_absolute_paths_inside_resolve(workspace: Workspace) -> None:
    (workspace.root / "a").mkdir()
    assert workspace.resolve("a/b.txt") == workspace.root / "a" / "b.txt"
    assert workspace.resolve(str(workspace.root / "a")) == workspace.root / "a"
    assert workspace.resolve(".") == workspace.root
    assert workspace.resolve("a/../a") == workspace.root / "a"


@pytest.mark.parametrize(
    "path", ["..", "../x", "a/../../x", "/etc/passwd", "/proc/self/environ", "~/x"]
)
def test_escapes_are_refused(workspace: Workspace, path: str) -> None:
    with pytest.raises(WorkspaceError, match="is outside the workspace"):
        workspace.resolve(path)


def test_symlink_out_of_the_workspace_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace.root / "link").symlink_to(outside)
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        workspace.resolve("link/secret.txt")


def test_symlink_inside_is_allowed(workspace: Workspace) -> None:
    (workspace.root / "real").mkdir()
    (workspace.root / "alias").symlink_to(workspace.root / "real")
    assert workspace.resolve("alias/x") == workspace.root / "real" / "x"


def test_nul_character_is_refused(workspace: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="NUL"):
        workspace.resolve("a\x00b")


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkspaceError, match="is not a directory"):
        Workspace(tmp_path / "file")


def test_relative_display(workspace: Workspace) -> None:
    assert workspace.relative(workspace.root / "a" / "b") == os.path.join("a", "b")
    assert workspace.relative(workspace.root) == "."


@pytest.mark.parametrize("name", ["~0", "~no-such-user-here", "~0/a.txt"])
def test_a_tilde_of_no_known_user_is_a_plain_name_in_the_workspace(
    workspace: Workspace, name: str
) -> None:
    # Path.expanduser raises RuntimeError for ~user of an unknown user: a tool's bad input,
    # which must not become an unexpected error of the worker.
    assert workspace.resolve(name) == workspace.root / name


def test_a_tilde_of_the_home_still_expands_and_is_refused_outside(workspace: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        workspace.resolve("~/.ssh")
