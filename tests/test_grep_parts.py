"""grep's tree in parts, on real rg: each part's rg searches its part and nothing else, the
parts together hold every file once in name order, and the answer is the first 50 lines in
name order however the parts were searched. And the walk that names what was skipped."""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from executor import Settings, ToolResult, TruncationPolicy
from executor.contract import Workspace
from tests.support.expect import ok
from tests.support.files import write_tree
from workers.tools import _ripgrep, _ripgrep_parts
from workers.tools._grep_proc import SearchFailed
from workers.tools._grep_search import GREP_MAX_MATCHES, GREP_SKIPPED_DIRS, binary_name
from workers.tools._grep_skipped import skipped_paths
from workers.tools._ripgrep import search_tree
from workers.tools._ripgrep_bin import find_rg
from workers.tools._ripgrep_parts import SMALL, WHOLE, Part, cut_tree
from workers.tools._ripgrep_proc import path_key
from workers.tools._walk import Skipped, ignores_at, walk_files
from workers.tools.search import grep

RunTool = Callable[..., ToolResult]
UNCUT = Settings(truncation=TruncationPolicy(default_max_chars=10**6, global_cap=10**6))
RG = find_rg()
needs_rg = pytest.mark.skipif(RG is None, reason="no rg binary (the ripgrep wheel)")

# Names a glob must escape, or that a gitignore line reads in its own way.
ODD_NAMES = [
    "plain",
    "a b",
    "trailing ",
    "two  ",
    " lead",
    "[x]",
    "*star",
    "q?",
    "{a,b}",
    "back\\slash",
    "!bang",
    "#hash",
    "\u00e9t\u00e9",
    "\u65e5\u672c",
    "-dash",
    "a.b",
    "A",
    "_u",
]


def _searched(base: Path, part: Part = WHOLE) -> list[str]:
    """The files rg searches under ``base`` (as grep's rg is told to) in ``part``."""
    assert RG is not None
    flags = [*_ripgrep._WORKSPACE_IGNORES, *_ripgrep._SKIP_GLOBS, f"--max-filesize={2**20}"]
    paths = part.paths if part.paths is not None else (".",)
    listed = subprocess.run(
        [RG, "--files", "--no-config", *flags, *part.globs, "--", *paths],
        cwd=base,
        capture_output=True,
        check=False,
    )
    assert listed.returncode in (0, 1), listed.stderr
    return [os.fsdecode(line.removeprefix(b"./")) for line in listed.stdout.splitlines()]


def _cut(base: Path) -> list[Part]:
    return cut_tree(str(base), ignores_at(base, base), slots=2)


# What rg leaves out: hidden entries, node_modules, .git and dist, links, binary extensions
# (of folders too), large files; and, with the second set, what .gitignore excludes.
SKIPPED = {
    ".hidden": "x",
    ".dir/a.txt": "x",
    "node_modules/a.txt": "x",
    "z/dist/a.txt": "x",
    "pic.PNG": "x",
    "old.egg/a.txt": "x",
    "z/big.txt": "x" * (2**20 + 1),
}


@needs_rg
@pytest.mark.parametrize("rules", [{}, {".gitignore": "*.log\nignored/\n", "z/.ignore": "b.txt\n"}])
def test_the_parts_hold_every_file_searched_once_in_name_order(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, rules: dict[str, str]
) -> None:
    monkeypatch.setattr(_ripgrep_parts, "GREP_MAX_FILE_BYTES", 2**20)
    root = workspace.root
    files = dict.fromkeys(ODD_NAMES, "x")
    files |= {f"d {name}/{name}.txt": "x" for name in ODD_NAMES}
    files |= {f"z/{name}/f": "x" for name in ODD_NAMES}
    files |= {"a.log": "x", "ignored/a.txt": "x", "z/b.txt": "x"}
    write_tree(root, files | SKIPPED | rules)
    (root / "z" / "link").symlink_to(root / "A")
    os.mkfifo(root / "z" / "pipe")
    parts = _cut(root)

    assert len(parts) > 3
    assert all((part.paths is None) == bool(rules) for part in parts)
    assert parts[0].low is None
    assert parts[-1].high is None
    assert all(a.high == b.low for a, b in itertools.pairwise(parts))
    seen: list[str] = []
    for part in parts:
        searched = _searched(root, part)
        assert all(part.holds(path_key(os.fsencode(path))) for path in searched), part
        seen += searched
    whole = _searched(root)
    assert sorted(seen) == sorted(whole)
    expected = set(files) - ({"a.log", "ignored/a.txt", "z/b.txt"} if rules else set())
    assert set(whole) == expected


def test_a_small_tree_is_one_part_searched_in_order(workspace: Workspace) -> None:
    write_tree(workspace.root, {f"d{i}/f{j}.txt": "x" for i in range(4) for j in range(4)})
    assert _cut(workspace.root) == [SMALL]
    write_tree(workspace.root, {f"d{i}/g{j}.txt": "x" for i in range(4) for j in range(20)})
    assert len(_cut(workspace.root)) > 1


@needs_rg
def test_a_project_in_one_folder_is_cut_inside_it(
    run_tool: RunTool, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {f"src/pkg/m{i:02d}.py": "def handler():\n    pass\n" * 3 for i in range(80)}
    files |= {"README.md": "def handler in the docs\n", "src/pkg/sub/deep.py": "def handler\n"}
    write_tree(workspace.root, files)

    parts = _cut(workspace.root)

    assert len(parts) > 3
    assert any(path.startswith("src/pkg/m") for part in parts for path in part.paths or ())
    found = ok(run_tool(grep, _settings=UNCUT, pattern="def handler")).splitlines()
    monkeypatch.setattr(_ripgrep, "cut_tree", lambda *_: [WHOLE])
    assert found == ok(run_tool(grep, _settings=UNCUT, pattern="def handler")).splitlines()
    assert found[0] == "README.md:1: def handler in the docs"
    assert found[1] == "src/pkg/m00.py:1: def handler():"


@needs_rg
def test_a_folder_with_a_name_no_glob_can_spell_is_not_cut(
    run_tool: RunTool, workspace: Workspace
) -> None:
    write_tree(workspace.root, {f"d{i}/a.txt": "needle\n" for i in range(5)})
    (workspace.root / "d3" / os.fsdecode(b"\xff.txt")).write_text("other\n")
    (workspace.root / "d4" / "new\nline").write_text("other\n")

    assert len(_cut(workspace.root / "d3")) == 1
    assert len(_cut(workspace.root / "d4")) == 1
    assert len(_cut(workspace.root)) > 1  # d3 and d4 are parts of their own, not opened
    assert ok(run_tool(grep, pattern="needle")).splitlines() == [
        f"d{i}/a.txt:1: needle" for i in range(5)
    ]


@needs_rg
def test_a_part_that_prints_too_many_lines_is_searched_again_in_order(
    run_tool: RunTool, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing matches in the first folders (the parts searched in order), then many lines in
    # each folder of the parts searched in parallel: more than 5, so they are searched again.
    monkeypatch.setattr(_ripgrep, "_PARALLEL_MAX_LINES", 5)
    files = {f"d{i:02d}/f.txt": "other\n" for i in range(8)}
    files |= {f"d{i:02d}/{j}.txt": "hit\n" * 4 for i in range(8, 70) for j in "ba"}
    write_tree(workspace.root, files)

    lines = ok(run_tool(grep, _settings=UNCUT, pattern="hit")).splitlines()

    expected = [
        f"d{i:02d}/{j}.txt:{n}: hit" for i in range(8, 70) for j in "ab" for n in range(1, 5)
    ]
    assert lines == [*expected[:GREP_MAX_MATCHES], lines[-1]]
    assert lines[-1].startswith("... (results capped at 50")


# ------------------------------------------------------------------ the skipped walk


def _walk_notes(base: Path) -> Skipped:
    """What ``walk_files`` notes as skipped, less binary names, as grep on Python skips."""
    notes = _BinaryNamesLeftOut()

    def enter(_state: bool, name: str) -> bool | None:
        return None if name in GREP_SKIPPED_DIRS else True

    ignores = ignores_at(base, base)
    for _ in walk_files(base, True, enter, ignores=ignores, skip_hidden=True, skipped=notes):
        pass
    return notes


class _BinaryNamesLeftOut(Skipped):
    def add(self, relative: str) -> None:
        if relative.endswith("/") or not binary_name(relative.rpartition("/")[2]):
            super().add(relative)


@pytest.mark.parametrize(
    "files",
    [
        {
            ".gitignore": "*.log\nbuild/\n!keep.log\n",
            "a.log": "",
            "keep.log": "",
            "build/x.py": "",
            "src/.hidden.py": "",
            "src/.cache/x": "",
            "src/.ignore": "gen_*\n",
            "src/gen_a.py": "",
            "src/sub/gen_b/x.py": "",
            "src/ok.py": "",
            ".x.png": "",
            "node_modules/.y": "",
            "B/.z": "",
            "a/.w": "",
        },
        {"a.txt": "", "b/c.txt": ""},
        {".gitignore": "*\n!.gitignore\n", "a.txt": "", "b/c.txt": ""},
    ],
)
def test_the_skipped_walk_names_what_the_walk_notes(
    workspace: Workspace, files: dict[str, str]
) -> None:
    write_tree(workspace.root, files)
    (workspace.root / "link").symlink_to(workspace.root / "a.log")
    expected = _walk_notes(workspace.root)

    ignores = ignores_at(workspace.root, workspace.root)
    assert ignores is not None
    found = skipped_paths(str(workspace.root), ignores)

    assert found == (expected.count, expected.examples)


@needs_rg
def test_a_part_that_fails_is_said_only_when_nothing_is_found(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rg says 2 for a folder it cannot read, even when it found lines elsewhere; as when one
    # rg searched the whole tree, that is an error only if no line is found. Here the rg of
    # the part that holds b/ fails so.
    failing = tmp_path / "rg"
    failing.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do [ "$arg" = b ] && echo "b: Permission denied" >&2 && exit 2; done\n'
        'exec "$REAL_RG" "$@"\n'
    )
    failing.chmod(0o755)
    monkeypatch.setenv("REAL_RG", str(RG))
    monkeypatch.setattr(_ripgrep_parts, "MIN_ENTRIES", 0)
    monkeypatch.setattr(_ripgrep_parts, "_sizes", lambda _leaves, _slots: [(1, True), (1, False)])
    write_tree(workspace.root, {"a/x.txt": "needle\n", "b/y.txt": "other\n"})

    def search(pattern: str) -> list[str]:
        root = str(workspace.root)
        found = search_tree(
            str(failing), pattern, root, ".", root=root, budget=30, cancelled=threading.Event()
        )
        return found.matches

    assert search("needle") == ["a/x.txt:1: needle"]
    with pytest.raises(SearchFailed, match="Permission denied"):
        search("other")


def test_the_skipped_walk_lists_again_only_folders_that_changed(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = workspace.root
    write_tree(root, {"a/.h": "", "a/b.txt": "", "c/d.txt": ""})
    long_ago = time.time() - 60
    for folder in (root, root / "a", root / "c"):
        os.utime(folder, (long_ago, long_ago))
    ignores = ignores_at(root, root)
    assert ignores is not None
    assert skipped_paths(str(root), ignores) == (1, ["a/.h"])
    listed: list[str] = []
    scandir = os.scandir

    def listing(path: str) -> Any:
        listed.append(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", listing)

    assert skipped_paths(str(root), ignores) == (1, ["a/.h"])
    assert listed == []
    (root / "c" / ".new").write_text("")
    assert skipped_paths(str(root), ignores) == (2, ["a/.h", "c/.new"])
    assert listed == [str(root / "c")]
    # Changed just now: a change in the same tick of the clock would not show, so it is
    # listed again.
    assert skipped_paths(str(root), ignores) == (2, ["a/.h", "c/.new"])
    assert listed == [str(root / "c")] * 2


@needs_rg
def test_no_part_after_the_first_fifty_lines_is_searched(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every folder holds 50 matching lines: the parts searched in order at the head settle
    # the answer, and no part after them is started.
    logged = tmp_path / "rg"
    logged.write_text(f'#!/bin/sh\necho run >> {tmp_path}/runs\nexec "$REAL_RG" "$@"\n')
    logged.chmod(0o755)
    monkeypatch.setenv("REAL_RG", str(RG))
    write_tree(workspace.root, {f"d{i:03d}/f.txt": "match\n" * 50 for i in range(200)})
    root = str(workspace.root)

    found = search_tree(
        str(logged), "match", root, ".", root=root, budget=30, cancelled=threading.Event()
    )

    assert found.matches == [f"d000/f.txt:{n}: match" for n in range(1, 51)]
    heads = sum(part.in_order for part in _cut(workspace.root))
    assert len((tmp_path / "runs").read_text().split()) == heads


def test_the_parts_searched_in_order_share_the_work_by_weight(workspace: Workspace) -> None:
    # Two heavy folders among light files: an even count of entries each would give both to
    # the first part searched in order; by weight, each part has one.
    files = {f"a/{i}.txt": "x" for i in range(100)} | {f"c/{i}.txt": "x" for i in range(100)}
    files |= dict.fromkeys("bdefghij", "x") | {f"z{i:03d}": "x" for i in range(150)}
    write_tree(workspace.root, files)

    heads = [part.paths for part in _cut(workspace.root) if part.in_order]

    assert heads == [("a", "b"), ("c", "d", "e", "f", "g", "h", "i", "j")]
    assert _ripgrep_parts._balanced([1, 122, 6, 8, 1, 1, 1, 2, 1, 1, 1, 164, 3, 190, 4, 5], 2) == [
        12,
        4,
    ]
