"""grep on ripgrep: the regex translation against Python's engine, the fallback to Python's
``re``, the time limit and cancel of an rg run, finding the binary, and ignore files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor import Settings, ToolContext, ToolResult, TruncationPolicy
from executor.contract import Workspace
from tests.support.expect import ok, tool_error
from tests.support.files import write_tree
from tests.support.waiting import gone, wait_for
from workers.tools import _ripgrep, _ripgrep_parts, search
from workers.tools._grep_proc import SearchCancelled
from workers.tools._grep_search import Findings
from workers.tools._grep_search import search as python_search
from workers.tools._ripgrep import RgOverBudget, search_file, search_tree
from workers.tools._ripgrep_bin import find_rg
from workers.tools._ripgrep_proc import run_rg
from workers.tools._ripgrep_regex import rust_regex
from workers.tools.search import GREP_MAX_MATCHES, GREP_TIMEOUT, grep

RunTool = Callable[..., ToolResult]
UNCUT = Settings(truncation=TruncationPolicy(default_max_chars=10**6, global_cap=10**6))
RG = find_rg()
pytestmark = pytest.mark.skipif(RG is None, reason="no rg binary (the ripgrep wheel)")


def _rg() -> str:
    assert RG is not None
    return RG


@pytest.fixture
def no_rg(monkeypatch: pytest.MonkeyPatch) -> None:
    """grep as on a platform without the wheel: every pattern on Python's ``re``."""
    monkeypatch.setattr(search, "find_rg", lambda: None)


# ------------------------------------------------------------------- the translation


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"lru_cache\(maxsize", r"lru_cache\x{28}maxsize"),
        (r"x{", r"x\x{7b}"),  # a literal brace to Python; Rust would refuse it
        (r"[\[]", r"\x{5b}"),  # a bare "[" in a class would open a nested class in Rust
        (r"a{,3}?", r"(?:a){0,3}?"),
        (r"(?x) a b  # comment", "ab"),
        (r"(?-i:Q)|\bé\B", r"(?:(?-i:Q)|\b\x{e9}\B)"),
        (r"[^\n]|[\n\d]", r"(?:[^\x{a}]|[\d])"),
    ],
)
def test_patterns_are_rewritten_in_a_syntax_both_engines_read_alike(
    pattern: str, expected: str
) -> None:
    assert rust_regex(pattern) == expected


@pytest.mark.parametrize(
    "pattern",
    [
        r"foo(?=bar)",
        r"(?<!x)y",
        r"(\w)\1",
        r"(?P<q>a)(?P=q)",
        r"(a)?(?(1)b|c)",
        r"(?>a+)b",
        r"a++",
        r"\Afoo",
        r"foo\Z",
        r"(?a)\w",
        r"(?a:\w)",
        r"foo\nbar",
        r"[\n]",
    ],
)
def test_what_rust_cannot_run_goes_to_python(pattern: str) -> None:
    assert rust_regex(pattern) is None


def test_an_invalid_pattern_raises_python_s_error() -> None:
    with pytest.raises(re.error, match="unterminated character set"):
        rust_regex("a[b")


_PIECES = st.sampled_from(
    [
        "a",
        "B",
        "s",
        "k",
        "é",
        "Ü",
        ".",
        r"\.",
        r"\w",
        r"\W",
        r"\d",
        r"\s",
        r"\b",
        "^",
        "$",
        "[ab]",
        "[^a]",
        "[a-c]",
        "(?:a|b)",
        "(a)",
        "?",
        "*",
        "+",
        "{2}",
        "{1,2}",
        "{,2}",
        "*?",
        "|",
        r"\(",
        "x",
        "-",
        " ",
        "{",
        r"[\[]",
        "(?-i:A)",
        r"\x41",
    ]
)
_TEXT = st.text(alphabet="aAbBsSkKéÉüÜ.-(){}[ x1\n\u212a\u017f\t", max_size=60)


@settings(max_examples=120, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=1, max_size=6), text=_TEXT)
def test_rg_finds_the_lines_python_finds(pieces: list[str], text: str) -> None:
    """The same lines, with the same text, from both engines, on one file."""
    # Each line ends in a newline. Python's engine also reports the empty "line" after the
    # last newline for a pattern that matches the empty string: rg (rightly) does not.
    text += "\n"
    phantom = f"t.txt:{text.count(chr(10)) + 1}: "
    pattern = "".join(pieces)
    try:
        regex = rust_regex(pattern)
    except re.error:
        return
    if regex is None:
        return
    with _file(text) as path:
        ours = search_file(_rg(), regex, path, "t.txt", budget=10, cancelled=threading.Event())
        theirs = python_search(pattern, path, "t.txt", is_dir=False)
    assert ours.matches == [line for line in theirs.matches if line != phantom], (pattern, regex)


class _file:
    """A temporary file holding ``text``, removed on exit."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __enter__(self) -> str:
        import tempfile

        handle, self.path = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(self.text)
        return self.path

    def __exit__(self, *_: object) -> None:
        os.unlink(self.path)


# ----------------------------------------------------------- through the tool, both engines


@pytest.fixture
def mixed_tree(workspace: Workspace) -> Path:
    write_tree(
        workspace.root,
        {
            ".gitignore": "build/\n*.log\n",
            "src/a.py": "def handler():\n    return foobar  # TODO\nclass FooError(Exception):\n",
            "src/b.py": "x = foobaz\nclass BarError(ValueError):\n",
            "notes.txt": "Kelvin \u212a\nstrasse STRAßE\nlong line " + "y" * 900 + " needle\n",
            "build/out.py": "foobar\n",
            "app.log": "foobar\n",
        },
    )
    return workspace.root


@pytest.mark.parametrize(
    "pattern",
    [
        r"foobar",
        r"class \w+Error\(",
        r"todo|kelvin",
        r"^\s+return",
        r"needle$",
        r"k",
        r"y{5}",
        r"[^a-z ]{2}",
        r"straße",
    ],
)
def test_both_engines_answer_alike_through_the_tool(
    run_tool: RunTool, mixed_tree: Path, monkeypatch: pytest.MonkeyPatch, pattern: str
) -> None:
    ours = ok(run_tool(grep, _settings=UNCUT, pattern=pattern))
    monkeypatch.setattr(search, "find_rg", lambda: None)
    assert ok(run_tool(grep, _settings=UNCUT, pattern=pattern)) == ours


def test_lookarounds_and_backreferences_still_work(run_tool: RunTool, mixed_tree: Path) -> None:
    assert ok(run_tool(grep, pattern=r"foo(?=bar)")) == "src/a.py:2:     return foobar  # TODO"
    assert ok(run_tool(grep, pattern=r"(o)\1(?=baz)")) == "src/b.py:1: x = foobaz"


def test_without_rg_grep_runs_on_python(run_tool: RunTool, mixed_tree: Path, no_rg: None) -> None:
    assert ok(run_tool(grep, pattern="foobar")) == "src/a.py:2:     return foobar  # TODO"


def test_a_catastrophic_pattern_answers_at_once(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "aaa.txt").write_text("a" * 100_000 + "b\n")
    started = time.monotonic()
    # Python's re would backtrack for ages here; rg's engine takes linear time.
    assert ok(run_tool(grep, pattern="(a+)+$", path="aaa.txt")).startswith("No matches")
    assert ok(run_tool(grep, pattern="(a+)+b$")).startswith("aaa.txt:1: aaaa")
    # A generous bound (a loaded machine): far below the limit Python's engine would hit.
    assert time.monotonic() - started < GREP_TIMEOUT / 3


def test_a_regex_too_large_for_rg_runs_on_python(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("ab" * 20 + "\n")
    # Rust's compiled size limit refuses this; Python's re takes it.
    assert ok(run_tool(grep, pattern=r"(?:a|b){1,20000}\w{0,5000}")).startswith("a.txt:1: abab")


@pytest.fixture(params=["in order", "in parallel"])
def searched(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the tree's two parts are searched, small as it is: each by a one-threaded rg in
    name order, or each by rg's parallel walk, whose lines are sorted (and a part that prints
    more than 100 is searched again in order)."""
    in_order = request.param == "in order"

    def two_parts(leaves: list[object], _slots: int) -> list[tuple[int, bool]]:
        return [(len(leaves) // 2, in_order), (len(leaves) - len(leaves) // 2, in_order)]

    monkeypatch.setattr(_ripgrep_parts, "MIN_ENTRIES", 0)
    monkeypatch.setattr(_ripgrep_parts, "_sizes", two_parts)
    monkeypatch.setattr(_ripgrep, "_PARALLEL_MAX_LINES", 100)
    return str(request.param)


def test_the_first_fifty_in_name_order_however_the_parts_are_searched(
    run_tool: RunTool, workspace: Workspace, searched: str
) -> None:
    # 3000 matching lines: past a parallel part's 100, so that part is searched again in order.
    write_tree(workspace.root, {f"d{i:02d}/f.txt": "match\n" * 50 for i in reversed(range(60))})
    lines = ok(run_tool(grep, _settings=UNCUT, pattern="match")).splitlines()
    assert lines[:GREP_MAX_MATCHES] == [f"d00/f.txt:{n}: match" for n in range(1, 51)]
    assert lines[-1].startswith("... (results capped at 50")


def test_either_way_gives_the_same_fifty_lines(
    run_tool: RunTool, workspace: Workspace, searched: str
) -> None:
    # Names whose order differs between whole paths and folder by folder ("a.py" < "a/x.py"
    # as strings), upper case before lower, and a name past ASCII.
    names = ["a.py", "a/x.py", "a-b.txt", "ab.txt", "B.txt", "\u00e9.txt", "a/b/c.txt", "_u.txt"]
    write_tree(workspace.root, dict.fromkeys(names, "hit\n" * 9))
    expected = [
        f"{name}:{n}: hit"
        for name in ["B.txt", "_u.txt", "a/b/c.txt", "a/x.py", "a-b.txt", "a.py"]
        for n in range(1, 10)
    ][:GREP_MAX_MATCHES]
    assert ok(run_tool(grep, _settings=UNCUT, pattern="hit")).splitlines()[:-1] == expected


def test_what_was_skipped_is_named_only_when_nothing_matches(
    run_tool: RunTool, workspace: Workspace, searched: str
) -> None:
    write_tree(workspace.root, {".hidden/a.txt": "needle\n", "b.txt": "needle\n", "c.png": "x"})
    assert ok(run_tool(grep, pattern="needle")) == "b.txt:1: needle"
    assert ok(run_tool(grep, pattern="nothing")) == (
        'No matches for "nothing" in . (skipped 1 hidden or ignored path: .hidden/; '
        "give one as path to search it)"
    )


# ---------------------------------------------------------------------- ignore files


def test_ignore_files_above_the_workspace_are_not_read(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root.parent / ".gitignore").write_text("*.txt\nws/\n")
    (workspace.root.parent / ".ignore").write_text("*\n")
    write_tree(workspace.root, {"a.txt": "needle", "sub/b.txt": "needle"})
    assert ok(run_tool(grep, pattern="needle")) == "a.txt:1: needle\nsub/b.txt:1: needle"
    assert ok(run_tool(grep, pattern="needle", path="sub")) == "sub/b.txt:1: needle"


def test_an_ignore_file_that_is_a_link_is_not_read(
    run_tool: RunTool, workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "rules").write_text("*.txt\n")
    write_tree(workspace.root, {"sub/a.txt": "needle"})
    (workspace.root / ".gitignore").symlink_to(tmp_path / "rules")
    # Not from an ancestor folder (rg's own walk reads the searched folder's, link or not).
    assert ok(run_tool(grep, pattern="needle", path="sub")) == "sub/a.txt:1: needle"


# --------------------------------------------------------------- time limit and cancel


@pytest.fixture
def blocked_stdin() -> Iterator[int]:
    """The read end of a pipe nobody writes to: rg reading it waits for ever."""
    read_end, write_end = os.pipe()
    yield read_end
    os.close(read_end)
    os.close(write_end)


def _rg_children() -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return [pid for pid in found if _exe(pid) == os.path.realpath(_rg())]


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _command() -> list[str]:
    return [_rg(), "--no-config", "--regexp", "x", "-"]


def test_rg_is_killed_when_its_budget_is_spent(blocked_stdin: int) -> None:
    started = time.monotonic()
    with pytest.raises(RgOverBudget):
        run_rg(_command(), 0.3, threading.Event(), prefix=b"", stdin=blocked_stdin)
    assert time.monotonic() - started < 10
    assert not _rg_children()


def test_rg_is_killed_when_the_call_is_cancelled(blocked_stdin: int) -> None:
    cancelled = threading.Event()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            run_rg(_command(), 60, cancelled, prefix=b"", stdin=blocked_stdin)
        except BaseException as exc:  # the test reads it below
            outcome.append(exc)

    searching = threading.Thread(target=run)
    searching.start()
    wait_for(lambda: bool(_rg_children()), "rg to start")
    pids = _rg_children()
    cancelled.set()
    searching.join(timeout=10)
    assert not searching.is_alive()
    assert isinstance(outcome[0], SearchCancelled)
    for pid in pids:
        wait_for(lambda pid=pid: gone(pid), f"rg {pid} to be gone")  # type: ignore[misc]


@pytest.mark.parametrize("stopped_by", ["budget", "cancel"])
def test_a_tree_search_stopped_leaves_no_rg_behind(workspace: Workspace, stopped_by: str) -> None:
    write_tree(workspace.root, {f"d{i:02d}/f.txt": "needle\n" for i in range(40)})
    cancelled = threading.Event()
    if stopped_by == "cancel":
        cancelled.set()
    expected = SearchCancelled if stopped_by == "cancel" else RgOverBudget
    with pytest.raises(expected):
        search_tree(
            _rg(),
            "needle",
            str(workspace.root),
            ".",
            root=str(workspace.root),
            budget=0.0 if stopped_by == "budget" else 60,
            cancelled=cancelled,
        )
    assert not _rg_children()


def test_a_timeout_on_rg_gives_no_backtracking_advice(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tree(workspace.root, {"a.txt": "x\n"})

    def slow(*_: object, **__: object) -> Findings:
        raise RgOverBudget("", 29.0)

    monkeypatch.setattr(search, "search_tree", slow)
    ctx = ToolContext(workspace=workspace)
    with pytest.raises(Exception, match=r"took longer than 29.0 s\. Make the") as raised:
        grep.invoke(ctx, grep.validate({"pattern": "(a+)+x"}))
    assert "nesting" not in str(raised.value)


# ------------------------------------------------------------------------ the binary


def _fake_rg(folder: Path, version: str) -> None:
    script = folder / "rg"
    script.write_text(f"#!/bin/sh\necho 'ripgrep {version}'\n")
    script.chmod(0o755)


@pytest.mark.parametrize(("version", "found"), [("14.1.0", True), ("12.1.1", False)])
def test_rg_is_found_next_to_the_interpreter_if_recent_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, found: bool
) -> None:
    _fake_rg(tmp_path, version)
    monkeypatch.setattr(sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setenv("PATH", "")
    assert find_rg.__wrapped__() == (str(tmp_path / "rg") if found else None)


def test_without_rg_the_tool_still_answers(
    run_tool: RunTool, workspace: Workspace, no_rg: None
) -> None:
    write_tree(workspace.root, {"a.txt": "needle\n", ".hidden/b.txt": "needle\n"})
    assert ok(run_tool(grep, pattern="needle")) == "a.txt:1: needle"
    assert "Invalid regular expression" in tool_error(run_tool(grep, pattern="a["))


def test_the_wheel_installs_rg_beside_the_interpreter() -> None:
    # The pin in pyproject.toml: rg comes from the ripgrep wheel, in this venv's scripts.
    version = subprocess.run([_rg(), "--version"], capture_output=True, check=True).stdout
    assert version.startswith(b"ripgrep 14.1.0")
