"""The paths bash's sandbox hides (``workers.tools._sandbox.hidden_paths``), resolved by the C
library's ``realpath(3)``: the same answer as ``os.path.realpath(strict=True)``, through links
to folders and files, chains of links, relative links, missing paths, dangling links and loops.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workers.tools import _sandbox
from workers.tools._sandbox import hidden_paths


def _tree(base: Path) -> tuple[str, Path]:
    """A folder of links of every kind; the names to hide (as ``TOOLPOOL_BASH_HIDE`` gives
    them) and the workspace."""
    (base / "real" / "deep").mkdir(parents=True)
    (base / "real" / "file").write_text("secret\n")
    (base / "workspace").mkdir()
    (base / "to-real").symlink_to(base / "real")
    (base / "rel-to-real").symlink_to("real")
    (base / "chain").symlink_to("to-real")
    (base / "to-file").symlink_to(base / "real" / "file")
    (base / "dangling").symlink_to(base / "nowhere")
    (base / "loop-a").symlink_to("loop-b")
    (base / "loop-b").symlink_to("loop-a")
    (base / "to-workspace").symlink_to("workspace")
    names = [
        "real",
        "to-real",
        "rel-to-real/deep",
        "chain/deep/../file",
        "to-file",
        "dangling",
        "loop-a",
        "missing",
        "real/file/under-a-file",
        "to-workspace",
        "~",
        "~/.ssh",
    ]
    return " ".join(str(base / name) if name[0] != "~" else name for name in names), base / (
        "workspace"
    )


def test_the_c_librarys_answer_is_pythons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names, workspace = _tree(tmp_path)
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    home = tmp_path / "home"
    also = (tmp_path / "to-real" / "deep", None, tmp_path / "missing-too")
    assert _sandbox._libc_realpath is not None, "no realpath(3) here: the fast path untested"

    fast = hidden_paths(names, workspace, also, home=home)
    monkeypatch.setattr(_sandbox, "_libc_realpath", None)
    slow = hidden_paths(names, workspace, also, home=home)

    assert fast == slow
    real = Path(os.path.realpath(tmp_path))
    assert fast == (
        real / "real",
        real / "real" / "deep",
        real / "real" / "file",
        real / "home",
        real / "home" / ".ssh",
    )


def test_a_path_that_appears_is_hidden_at_once(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    names = f"{tmp_path / 'later'} {tmp_path / 'link'}"
    assert hidden_paths(names, workspace, home=tmp_path) == ()

    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to("target")

    assert hidden_paths(names, workspace, home=tmp_path) == (
        Path(os.path.realpath(tmp_path)) / "target",
    )
