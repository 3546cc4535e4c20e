"""glob and grep against real trees in a temporary workspace, through the real runner."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor import (
    ErrorType,
    Settings,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    TruncationPolicy,
)
from executor.contract import Workspace
from tests.support.expect import ok, tool_error
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools._prefilter import ASCII_CASE_PARTNERS, LiteralPrefilter
from workers.tools.search import (
    GLOB_MAX_RESULTS,
    GREP_MAX_FILE_BYTES,
    GREP_MAX_LINE_CHARS,
    GREP_MAX_MATCHES,
    glob,
    grep,
)

RunTool = Callable[..., ToolResult]
# Results as the tool wrote them, not cut by the runner's 3000-character policy.
UNCUT = Settings(truncation=TruncationPolicy(default_max_chars=10**6, global_cap=10**6))


def _tree(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _lines(result: ToolResult) -> list[str]:
    return ok(result).splitlines()


def test_both_tools_are_declared_safe_and_read_only() -> None:
    for search_tool in (glob, grep):
        assert search_tool.is_concurrency_safe
        assert search_tool.is_read_only
        assert search_tool.max_result_chars is None
        assert search_tool.parameters["required"] == ["pattern"]
    assert grep.timeout == 30.0


# ---------------------------------------------------------------------------------- glob


@pytest.fixture
def code_tree(workspace: Workspace) -> Path:
    _tree(
        workspace.root,
        {
            "main.py": "",
            "README.md": "",
            "src/app.py": "",
            "src/app.ts": "",
            "src/deep/er/util.py": "",
            "src/deep/notes.txt": "",
            "lib/helper.py": "",
            "dist/bundle.js": "",
        },
    )
    return workspace.root


def test_glob_double_star_matches_zero_or_more_directories(
    run_tool: RunTool, code_tree: Path
) -> None:
    assert _lines(run_tool(glob, pattern="**/*.py")) == [
        "lib/helper.py",
        "main.py",
        "src/app.py",
        "src/deep/er/util.py",
    ]
    assert _lines(run_tool(glob, pattern="src/**/*.py")) == ["src/app.py", "src/deep/er/util.py"]
    assert _lines(run_tool(glob, pattern="src/**")) == [
        "src/app.py",
        "src/app.ts",
        "src/deep/er/util.py",
        "src/deep/notes.txt",
    ]


def test_glob_star_stays_within_one_directory(run_tool: RunTool, code_tree: Path) -> None:
    assert _lines(run_tool(glob, pattern="*.py")) == ["main.py"]
    assert _lines(run_tool(glob, pattern="*/*.py")) == ["lib/helper.py", "src/app.py"]


def test_glob_braces_including_nested_and_across_directories(
    run_tool: RunTool, code_tree: Path
) -> None:
    assert _lines(run_tool(glob, pattern="src/*.{py,ts}")) == ["src/app.py", "src/app.ts"]
    assert _lines(run_tool(glob, pattern="{lib,src/deep/er}/*.py")) == [
        "lib/helper.py",
        "src/deep/er/util.py",
    ]
    assert _lines(run_tool(glob, pattern="**/{main,READ{ME,YOU}}.{py,md}")) == [
        "README.md",
        "main.py",
    ]


def test_glob_brace_ranges_expand_as_in_bash(run_tool: RunTool, workspace: Workspace) -> None:
    _tree(workspace.root, {f"v{n}/x.txt": "" for n in range(1, 6)} | {"logs/b.log": ""})
    assert _lines(run_tool(glob, pattern="v{2..4}/*.txt")) == [
        "v2/x.txt",
        "v3/x.txt",
        "v4/x.txt",
    ]
    assert _lines(run_tool(glob, pattern="logs/{a..c}.log")) == ["logs/b.log"]
    assert _lines(run_tool(glob, pattern="v{1..5..2}/x.txt")) == [
        "v1/x.txt",
        "v3/x.txt",
        "v5/x.txt",
    ]


def test_glob_question_mark_and_character_classes(run_tool: RunTool, workspace: Workspace) -> None:
    _tree(workspace.root, {"a1.txt": "", "a2.txt": "", "ab.txt": "", "a10.txt": ""})
    assert _lines(run_tool(glob, pattern="a?.txt")) == ["a1.txt", "a2.txt", "ab.txt"]
    assert _lines(run_tool(glob, pattern="a[0-9].txt")) == ["a1.txt", "a2.txt"]
    assert _lines(run_tool(glob, pattern="a[!0-9].txt")) == ["ab.txt"]


def test_glob_results_are_relative_to_the_workspace_root(
    run_tool: RunTool, code_tree: Path
) -> None:
    assert _lines(run_tool(glob, pattern="**/*.py", path="src")) == [
        "src/app.py",
        "src/deep/er/util.py",
    ]
    assert _lines(run_tool(glob, pattern="*.txt", path="./src/deep/")) == ["src/deep/notes.txt"]


def test_glob_skips_node_modules_git_and_hidden_entries(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(
        workspace.root,
        {
            "index.js": "",
            "node_modules/pkg/index.js": "",
            "packages/web/node_modules/dep/index.js": "",
            ".git/hooks/pre-commit.js": "",
            ".hidden.js": "",
            ".config/settings.js": "",
            "dist/out.js": "",
        },
    )
    assert _lines(run_tool(glob, pattern="**/*.js")) == ["dist/out.js", "index.js"]
    # A hidden name is matched when the pattern spells out its dot.
    assert _lines(run_tool(glob, pattern=".hidden.js")) == [".hidden.js"]
    assert _lines(run_tool(glob, pattern=".config/*.js")) == [".config/settings.js"]
    # node_modules and .git stay ignored even when named.
    assert ok(run_tool(glob, pattern="node_modules/**/*.js")).startswith("No files match")


def test_glob_does_not_follow_or_list_symbolic_links(
    run_tool: RunTool, workspace: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    _tree(outside, {"secret.py": "password = 1"})
    _tree(workspace.root, {"real/a.py": ""})
    (workspace.root / "linked_dir").symlink_to(workspace.root / "real", target_is_directory=True)
    (workspace.root / "outside_dir").symlink_to(outside, target_is_directory=True)
    (workspace.root / "leak.py").symlink_to(outside / "secret.py")
    assert _lines(run_tool(glob, pattern="**/*.py")) == ["real/a.py"]


def test_glob_caps_the_list_and_says_how_many_more_matched(
    run_tool: RunTool, workspace: Workspace
) -> None:
    total = GLOB_MAX_RESULTS + 37
    _tree(workspace.root, {f"logs/f{i:03d}.log": "" for i in reversed(range(total))})
    lines = _lines(run_tool(glob, _settings=UNCUT, pattern="logs/*.log"))
    assert len(lines) == GLOB_MAX_RESULTS + 1
    assert lines[0] == "logs/f000.log"
    assert lines[GLOB_MAX_RESULTS - 1] == f"logs/f{GLOB_MAX_RESULTS - 1:03d}.log"
    assert lines[-1].startswith(f"... and 37 more files ({total} matched")
    # Under the default 3000-character policy the runner cuts the middle; the note survives.
    assert run_tool(glob, pattern="logs/*.log").content.splitlines()[-1] == lines[-1]


def test_glob_says_clearly_when_nothing_matches(run_tool: RunTool, code_tree: Path) -> None:
    assert ok(run_tool(glob, pattern="**/*.rs", path="src")) == 'No files match "**/*.rs" in src'


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("", ".", "Empty glob pattern"),
        ("../*.py", ".", 'contains ".."'),
        ("src/{a,..}/*.py", ".", 'contains ".."'),
        ("/etc/*", ".", "Absolute glob pattern refused"),
        ("[z-a].py", ".", "Invalid glob pattern"),
        ("{a,b}" * 11, ".", "more than 1000 alternatives"),
        ("{1..1001}", ".", "more than 1000 alternatives"),
        ("{" * 995 + "a,b}", ".", "nested too deeply"),
        ("*.py", "missing", "Path not found: missing"),
        ("*.py", "main.py", "Not a directory: main.py"),
    ],
)
def test_glob_refuses_bad_patterns_and_paths(
    run_tool: RunTool, code_tree: Path, pattern: str, path: str, expected: str
) -> None:
    assert expected in tool_error(run_tool(glob, pattern=pattern, path=path))


def test_glob_refuses_a_path_outside_the_workspace(run_tool: RunTool, code_tree: Path) -> None:
    assert "outside the workspace" in tool_error(run_tool(glob, pattern="*", path=".."))


# ---------------------------------------------------------------------------------- grep


def test_grep_reports_path_line_and_right_stripped_text(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(
        workspace.root,
        {
            "b.py": "x = 1\nimport os   \n",
            "a/z.py": "IMPORT sys\n\n\nfrom x import y\n",
            "c.txt": "nothing here\n",
        },
    )
    assert _lines(run_tool(grep, pattern="import")) == [
        "a/z.py:1: IMPORT sys",
        "a/z.py:4: from x import y",
        "b.py:2: import os",
    ]
    assert _lines(run_tool(grep, pattern="^import", path="a")) == ["a/z.py:1: IMPORT sys"]
    assert _lines(run_tool(grep, pattern=r"= 1$", path="b.py")) == ["b.py:1: x = 1"]


def test_grep_matches_within_a_line_not_across_lines(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(workspace.root, {"a.txt": "foo\nbar\nfoo  bar\n"})
    assert _lines(run_tool(grep, pattern=r"foo\s+bar")) == ["a.txt:3: foo  bar"]


def test_grep_reports_each_matching_line_once(run_tool: RunTool, workspace: Workspace) -> None:
    _tree(workspace.root, {"a.txt": "aaa aaa\r\nb\na\n"})
    assert _lines(run_tool(grep, pattern="a")) == ["a.txt:1: aaa aaa", "a.txt:3: a"]


def test_grep_skips_node_modules_git_and_dist_at_any_depth(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(
        workspace.root,
        {
            "src/app.js": "needle",
            "node_modules/x/index.js": "needle",
            "web/node_modules/y.js": "needle",
            ".git/config": "needle",
            "dist/app.js": "needle",
            "web/dist/app.js": "needle",
            ".github/ci.yml": "needle",
        },
    )
    assert _lines(run_tool(grep, pattern="needle")) == [
        ".github/ci.yml:1: needle",
        "src/app.js:1: needle",
    ]


def test_grep_skips_binary_files_by_extension_and_by_content(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(
        workspace.root,
        {
            "image.PNG": "needle in a picture",
            "yarn.lock": "needle",
            "data.bin.gz": "needle",
            "blob.dat": b"needle\x00\x01\x02",
            "late_nul.txt": b"needle\n" + b"x" * 9000 + b"\x00",
            "text.txt": "needle",
        },
    )
    assert _lines(run_tool(grep, pattern="needle")) == [
        "late_nul.txt:1: needle",
        "text.txt:1: needle",
    ]
    assert "binary file" in tool_error(run_tool(grep, pattern="needle", path="blob.dat"))
    assert "binary file" in tool_error(run_tool(grep, pattern="needle", path="image.PNG"))


def test_grep_does_not_follow_symbolic_links(
    run_tool: RunTool, workspace: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    _tree(outside, {"secret.txt": "needle"})
    _tree(workspace.root, {"real/a.txt": "needle"})
    (workspace.root / "linked_dir").symlink_to(workspace.root / "real", target_is_directory=True)
    (workspace.root / "outside_dir").symlink_to(outside, target_is_directory=True)
    (workspace.root / "leak.txt").symlink_to(outside / "secret.txt")
    assert _lines(run_tool(grep, pattern="needle")) == ["real/a.txt:1: needle"]
    assert "outside the workspace" in tool_error(run_tool(grep, pattern="x", path="leak.txt"))


def test_grep_stops_at_50_matches_with_a_note(run_tool: RunTool, workspace: Workspace) -> None:
    _tree(
        workspace.root,
        {
            "a.txt": "match\n" * 30,
            "b/c.txt": "match\n" * 30,
            "d.txt": "match\n",
        },
    )
    lines = _lines(run_tool(grep, _settings=UNCUT, pattern="MATCH"))
    assert len(lines) == GREP_MAX_MATCHES + 1
    assert lines[:30] == [f"a.txt:{n}: match" for n in range(1, 31)]
    assert lines[30:50] == [f"b/c.txt:{n}: match" for n in range(1, 21)]
    assert lines[-1] == "... (results capped at 50 matches; narrow the pattern or path)"


def test_grep_cuts_a_very_long_line_around_the_match(
    run_tool: RunTool, workspace: Workspace
) -> None:
    minified = "a" * 3000 + "NEEDLE" + "b" * 2000
    _tree(workspace.root, {"app.min.js": minified + "\nshort needle\n"})
    first, second = _lines(run_tool(grep, _settings=UNCUT, pattern="needle"))
    assert first.startswith("app.min.js:1: ...a")
    assert "NEEDLE" in first
    assert first.endswith(f"... [line cut: {len(minified)} characters]")
    assert len(first) < GREP_MAX_LINE_CHARS + 100
    assert second == "app.min.js:2: short needle"


def test_grep_says_clearly_when_nothing_matches(run_tool: RunTool, workspace: Workspace) -> None:
    _tree(workspace.root, {"src/a.py": "pass\n"})
    assert ok(run_tool(grep, pattern="zzz")) == 'No matches for "zzz" in .'
    assert ok(run_tool(grep, pattern="zzz", path="src")) == 'No matches for "zzz" in src'


def test_grep_skips_files_over_the_size_limit_and_says_so(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(workspace.root, {"big.log": b"needle\n" + b"x" * GREP_MAX_FILE_BYTES, "a.txt": "needle"})
    assert _lines(run_tool(grep, pattern="needle")) == [
        "a.txt:1: needle",
        "(skipped 1 file(s) larger than 10 MB: big.log)",
    ]
    assert "larger than 10 MB" in tool_error(run_tool(grep, pattern="needle", path="big.log"))


def test_grep_decodes_invalid_utf8_instead_of_failing(
    run_tool: RunTool, workspace: Workspace
) -> None:
    _tree(workspace.root, {"latin1.txt": "café needle\n".encode("latin-1")})
    assert _lines(run_tool(grep, pattern="needle")) == ["latin1.txt:1: caf\ufffd needle"]


def test_grep_matches_case_insensitively_beyond_ascii(
    run_tool: RunTool, workspace: Workspace
) -> None:
    # re.IGNORECASE equates the Kelvin sign with k and the long s with s: the literal
    # prefilter must not skip these files.
    _tree(
        workspace.root,
        {
            "kelvin.txt": "300 \u212aelvin\n",
            "long_s.txt": "cla\u017f\u017f\n",
            "umlaut.txt": "ÜBER\n",
        },
    )
    assert _lines(run_tool(grep, pattern="kelvin")) == ["kelvin.txt:1: 300 \u212aelvin"]
    assert _lines(run_tool(grep, pattern="class")) == ["long_s.txt:1: cla\u017f\u017f"]
    assert _lines(run_tool(grep, pattern="über")) == ["umlaut.txt:1: ÜBER"]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("(unclosed", "missing ), unterminated subpattern at position 0"),
        ("a[b", "unterminated character set at position 1"),
        ("*x", "nothing to repeat at position 0"),
        ("", "Empty pattern"),
    ],
)
def test_grep_names_the_problem_with_an_invalid_pattern(
    run_tool: RunTool, workspace: Workspace, pattern: str, expected: str
) -> None:
    assert expected in tool_error(run_tool(grep, pattern=pattern))


def test_grep_refuses_missing_and_outside_paths(run_tool: RunTool, workspace: Workspace) -> None:
    assert tool_error(run_tool(grep, pattern="x", path="nope.py")).startswith(
        "Path not found: nope.py."
    )
    assert "outside the workspace" in tool_error(run_tool(grep, pattern="x", path="../"))


def test_grep_stops_walking_once_the_call_is_cancelled(workspace: Workspace) -> None:
    _tree(workspace.root, {f"d{i}/f.txt": "needle" for i in range(20)})
    cancelled = threading.Event()
    env = CallEnvironment(workspace=workspace, cancelled=cancelled)
    call = ToolCall(name="grep", arguments={"pattern": "needle"})
    assert len(_lines(run_call(call, ToolRegistry([grep]), env))) == 20
    cancelled.set()
    # The runner answers a cancelled call itself; the walk also stops (for calls cancelled
    # while they run, whose late answer the runner discards).
    assert run_call(call, ToolRegistry([grep]), env).error_type is ErrorType.CANCELLED
    ctx = ToolContext(workspace=workspace, cancelled=cancelled)
    assert grep.invoke(ctx, grep.validate({"pattern": "needle"})) == 'No matches for "needle" in .'


# ----------------------------------------------------------------------- the prefilter


def test_case_partners_are_exactly_those_of_the_re_engine() -> None:
    non_ascii = "".join(map(chr, range(0x80, 0x110000)))
    partners = set(re.findall(r"[\x00-\x7f]", non_ascii, re.IGNORECASE))
    assert partners == set(ASCII_CASE_PARTNERS)


@pytest.mark.parametrize(
    ("pattern", "literals"),
    [
        (r"class \w+Error\(", (("class ", "error("),)),
        (r"foo|BAR", (("foo",), ("bar",))),
        (r"colou?r", (("colo", "r"),)),
        (r"(?:a|b)cd{2,}e", (("c", "e"),)),
        (r"\x41bc", None),
        (r"(?x) a b", None),
        (r"foo|.*", None),
        (r"[abc]+", None),
    ],
)
def test_prefilter_takes_only_literals_every_match_contains(
    pattern: str, literals: tuple[tuple[str, ...], ...] | None
) -> None:
    prefilter = LiteralPrefilter.for_pattern(pattern)
    assert (prefilter.branches if prefilter else None) == literals


_PIECES = st.sampled_from(
    ["a", "B", "s", "k", "i", "é", ".", r"\.", r"\w", r"\s", r"\b", "^", "$", "[ab]", "[^a]",
     "(?:a|b)", "(a)", "?", "*", "+", "{2}", "{1,2}", "|", r"\(", "x", "-", " "]
)  # fmt: skip
_TEXT = st.text(alphabet="aAbBsSkKiIé.-() x\n\u212a\u017f\u0130\u0131", max_size=40)


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=1, max_size=8), text=_TEXT)
def test_prefilter_never_skips_a_text_the_regex_matches(pieces: list[str], text: str) -> None:
    pattern = "".join(pieces)
    try:
        regex = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    except re.error:
        return
    prefilter = LiteralPrefilter.for_pattern(pattern)
    if prefilter is None or regex.search(text) is None:
        return
    data = text.encode()
    if data.isascii():
        assert prefilter.may_match_ascii(data)
    assert prefilter.may_match_text(text)


def test_search_paths_stay_inside_the_tree_given(run_tool: RunTool, workspace: Workspace) -> None:
    _tree(workspace.root, {"one/a.txt": "needle", "two/a.txt": "needle"})
    assert _lines(run_tool(grep, pattern="needle", path="two")) == ["two/a.txt:1: needle"]
    assert _lines(run_tool(glob, pattern="**/a.txt", path="one")) == ["one/a.txt"]
