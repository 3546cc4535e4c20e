"""glob and grep against real trees in a temporary workspace, through the real runner."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from tests.support.files import write_tree
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools._grep_search import search
from workers.tools._ignore_file import IgnoreFile
from workers.tools._prefilter import ASCII_CASE_PARTNERS, LiteralPrefilter
from workers.tools._walk import ignores_at, walk_files
from workers.tools.files import list_directory
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
    write_tree(
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
    write_tree(workspace.root, {f"v{n}/x.txt": "" for n in range(1, 6)} | {"logs/b.log": ""})
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
    write_tree(workspace.root, {"a1.txt": "", "a2.txt": "", "ab.txt": "", "a10.txt": ""})
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
    write_tree(
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
    write_tree(outside, {"secret.py": "password = 1"})
    write_tree(workspace.root, {"real/a.py": ""})
    (workspace.root / "linked_dir").symlink_to(workspace.root / "real", target_is_directory=True)
    (workspace.root / "outside_dir").symlink_to(outside, target_is_directory=True)
    (workspace.root / "leak.py").symlink_to(outside / "secret.py")
    assert _lines(run_tool(glob, pattern="**/*.py")) == ["real/a.py"]


def test_glob_caps_the_list_and_says_how_many_more_matched(
    run_tool: RunTool, workspace: Workspace
) -> None:
    total = GLOB_MAX_RESULTS + 37
    write_tree(workspace.root, {f"logs/f{i:03d}.log": "" for i in reversed(range(total))})
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
    write_tree(
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
    write_tree(workspace.root, {"a.txt": "foo\nbar\nfoo  bar\n"})
    assert _lines(run_tool(grep, pattern=r"foo\s+bar")) == ["a.txt:3: foo  bar"]


def test_grep_reports_each_matching_line_once(run_tool: RunTool, workspace: Workspace) -> None:
    write_tree(workspace.root, {"a.txt": "aaa aaa\r\nb\na\n"})
    assert _lines(run_tool(grep, pattern="a")) == ["a.txt:1: aaa aaa", "a.txt:3: a"]


def test_grep_skips_node_modules_git_and_dist_at_any_depth(
    run_tool: RunTool, workspace: Workspace
) -> None:
    write_tree(
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
    assert _lines(run_tool(grep, pattern="needle")) == ["src/app.js:1: needle"]
    # A hidden folder is searched when named.
    assert _lines(run_tool(grep, pattern="needle", path=".github")) == [".github/ci.yml:1: needle"]


def test_grep_skips_binary_files_by_extension_and_by_content(
    run_tool: RunTool, workspace: Workspace
) -> None:
    write_tree(
        workspace.root,
        {
            "image.PNG": "needle in a picture",
            "yarn.lock": "needle",
            "data.bin.gz": "needle",
            "blob.dat": b"needle\x00\x01\x02",
            "early_nul.txt": b"needle\n" + b"x" * 9000 + b"\x00",
            # rg reads a file in large blocks: a NUL met after a match stops the file there.
            "late_nul.txt": b"needle\n" + b"x" * 500_000 + b"\x00\nneedle after\n",
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
    write_tree(outside, {"secret.txt": "needle"})
    write_tree(workspace.root, {"real/a.txt": "needle"})
    (workspace.root / "linked_dir").symlink_to(workspace.root / "real", target_is_directory=True)
    (workspace.root / "outside_dir").symlink_to(outside, target_is_directory=True)
    (workspace.root / "leak.txt").symlink_to(outside / "secret.txt")
    assert _lines(run_tool(grep, pattern="needle")) == ["real/a.txt:1: needle"]
    assert "outside the workspace" in tool_error(run_tool(grep, pattern="x", path="leak.txt"))


def test_grep_stops_at_50_matches_with_a_note(run_tool: RunTool, workspace: Workspace) -> None:
    write_tree(
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
    write_tree(workspace.root, {"app.min.js": minified + "\nshort needle\n"})
    first, second = _lines(run_tool(grep, _settings=UNCUT, pattern="needle"))
    assert first.startswith("app.min.js:1: ...a")
    assert "NEEDLE" in first
    assert first.endswith(f"... [line cut: {len(minified)} characters]")
    assert len(first) < GREP_MAX_LINE_CHARS + 100
    assert second == "app.min.js:2: short needle"


def test_grep_says_clearly_when_nothing_matches(run_tool: RunTool, workspace: Workspace) -> None:
    write_tree(workspace.root, {"src/a.py": "pass\n"})
    assert ok(run_tool(grep, pattern="zzz")) == 'No matches for "zzz" in .'
    assert ok(run_tool(grep, pattern="zzz", path="src")) == 'No matches for "zzz" in src'


def test_grep_skips_files_over_the_size_limit_and_says_so(
    run_tool: RunTool, workspace: Workspace
) -> None:
    write_tree(
        workspace.root, {"big.log": b"needle\n" + b"x" * GREP_MAX_FILE_BYTES, "a.txt": "needle"}
    )
    # rg skips a tree's large files without naming them; one named as path is refused.
    assert _lines(run_tool(grep, pattern="needle")) == ["a.txt:1: needle"]
    assert "larger than 10 MB" in tool_error(run_tool(grep, pattern="needle", path="big.log"))


def test_grep_decodes_invalid_utf8_instead_of_failing(
    run_tool: RunTool, workspace: Workspace
) -> None:
    write_tree(workspace.root, {"latin1.txt": "café needle\n".encode("latin-1")})
    assert _lines(run_tool(grep, pattern="needle")) == ["latin1.txt:1: caf\ufffd needle"]


def test_grep_matches_case_insensitively_beyond_ascii(
    run_tool: RunTool, workspace: Workspace
) -> None:
    # re.IGNORECASE equates the Kelvin sign with k and the long s with s: the literal
    # prefilter must not skip these files.
    write_tree(
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
    write_tree(workspace.root, {f"d{i}/f.txt": "needle" for i in range(20)})
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


# ------------------------------------------------------ hidden and ignored paths (both tools)


@pytest.fixture
def python_project(workspace: Workspace) -> Path:
    """A Python project as an agent meets it: its code, two virtual environments, build output."""
    write_tree(
        workspace.root,
        {
            ".gitignore": "venv/\nbuild/\n*.egg-info/\n__pycache__/\n",
            "src/app.py": "import os\n",
            "tests/test_app.py": "import app\n",
            **{f".venv/lib/site-packages/pkg{i}/__init__.py": "import sys\n" for i in range(60)},
            # python -m venv writes a .gitignore of "*" into the environment.
            ".venv/.gitignore": "*\n",
            "venv/lib/site-packages/pkg/__init__.py": "import re\n",
            "build/lib/app.py": "import os\n",
            "app.egg-info/SOURCES.txt": "import nothing\n",
            "src/__pycache__/app.txt": "import cached\n",
        },
    )
    return workspace.root


def test_grep_leaves_out_virtual_environments_and_what_gitignore_excludes(
    run_tool: RunTool, python_project: Path
) -> None:
    # Before: the first 50 matches all came from .venv, and the project's own never showed.
    assert _lines(run_tool(grep, pattern="^import")) == [
        "src/app.py:1: import os",
        "tests/test_app.py:1: import app",
    ]


def test_grep_searches_a_hidden_or_ignored_path_named_explicitly(
    run_tool: RunTool, python_project: Path
) -> None:
    # A named folder is searched whole, even what its own .gitignore ("*") excludes.
    assert len(_lines(run_tool(grep, _settings=UNCUT, pattern="^import sys", path=".venv"))) == 51
    assert _lines(run_tool(grep, pattern="import", path=".venv/lib/site-packages/pkg7")) == [
        ".venv/lib/site-packages/pkg7/__init__.py:1: import sys"
    ]
    assert _lines(run_tool(grep, pattern="import", path="venv")) == [
        "venv/lib/site-packages/pkg/__init__.py:1: import re"
    ]
    assert _lines(run_tool(grep, pattern="import", path="build/lib")) == [
        "build/lib/app.py:1: import os"
    ]
    assert _lines(run_tool(grep, pattern="import", path="app.egg-info/SOURCES.txt")) == [
        "app.egg-info/SOURCES.txt:1: import nothing"
    ]


def test_grep_says_what_it_skipped_when_nothing_matches(
    run_tool: RunTool, python_project: Path
) -> None:
    assert ok(run_tool(grep, pattern="import re")) == (
        'No matches for "import re" in . (skipped 6 hidden or ignored paths: .gitignore, '
        ".venv/, app.egg-info/, ...; give one as path to search it)"
    )
    assert ok(run_tool(grep, pattern="zzz", path="src")) == (
        'No matches for "zzz" in src (skipped 1 hidden or ignored path: src/__pycache__/; '
        "give one as path to search it)"
    )


def test_grep_follows_gitignore_rules(run_tool: RunTool, workspace: Workspace) -> None:
    write_tree(
        workspace.root,
        {
            ".gitignore": (
                "# build output\n"
                "*.log\n"
                "!keep.log\n"
                "out/\n"  # folders only, at any depth
                "/top.txt\n"  # anchored at the root
                "docs/**/gen\n"
                "cache/\n"
                "!cache/kept.txt\n"  # cannot re-include a file of an ignored folder
                "spaced.txt   \n"  # trailing spaces do not count
                "\\!bang.txt\n"
                "[ab]x.txt\n"
            ),
            "app.log": "needle",
            "keep.log": "needle",
            "deep/keep.log": "needle",
            "out/a.txt": "needle",
            "src/out/b.txt": "needle",
            "src/out.txt/c.txt": "needle",
            "lib/out": "needle",  # a file named out: kept
            "top.txt": "needle",
            "sub/top.txt": "needle",
            "docs/gen/x.txt": "needle",
            "docs/a/b/gen/y.txt": "needle",
            "docs/gen.txt": "needle",
            "cache/kept.txt": "needle",
            "spaced.txt": "needle",
            "!bang.txt": "needle",
            "ax.txt": "needle",
            "cx.txt": "needle",
        },
    )
    assert _lines(run_tool(grep, pattern="needle")) == [
        "cx.txt:1: needle",
        "deep/keep.log:1: needle",
        "docs/gen.txt:1: needle",
        "keep.log:1: needle",
        "lib/out:1: needle",
        "src/out.txt/c.txt:1: needle",
        "sub/top.txt:1: needle",
    ]


def test_grep_lets_deeper_ignore_files_and_dot_ignore_win(
    run_tool: RunTool, workspace: Workspace
) -> None:
    write_tree(
        workspace.root,
        {
            ".gitignore": "*.log\nsecret/\n",
            # ripgrep's .ignore: read as .gitignore is, and it wins over it in its folder.
            ".ignore": "!important.log\nnotes/\n",
            "important.log": "needle",
            "other.log": "needle",
            "notes/n.txt": "needle",
            "sub/.gitignore": "!*.log\n/local.txt\n",
            "sub/debug.log": "needle",
            "sub/local.txt": "needle",
            "sub/secret/s.txt": "needle",
            "sub/x/local.txt": "needle",
            "sub/x/secret/t.txt": "needle",
            "sub/x/w.log": "needle",
            "sub/x/y.md": "needle",
        },
    )
    below_x = ["sub/x/local.txt:1: needle", "sub/x/w.log:1: needle", "sub/x/y.md:1: needle"]
    assert _lines(run_tool(grep, pattern="needle")) == [
        "important.log:1: needle",
        "sub/debug.log:1: needle",
        *below_x,
    ]
    # The ignore files above the folder searched apply below it, deeper ones still first.
    assert _lines(run_tool(grep, pattern="needle", path="sub")) == [
        "sub/debug.log:1: needle",
        *below_x,
    ]
    assert _lines(run_tool(grep, pattern="needle", path="sub/x")) == below_x


def test_grep_never_enters_an_ignored_or_hidden_folder(
    python_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk prunes: a virtual environment's thousands of files cost nothing, not even a
    # listing. (In this process, not grep's helper, to watch the listings.)
    listed: list[str] = []
    real_scandir = os.scandir

    def scandir(path: str) -> Any:
        listed.append(os.path.relpath(path, python_project))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found = search("^import", str(python_project), ".", is_dir=True, root=str(python_project))
    assert found.matches == ["src/app.py:1: import os", "tests/test_app.py:1: import app"]
    assert sorted(listed) == [".", "src", "tests"]


def test_glob_skips_gitignored_paths_unless_the_pattern_names_them(
    run_tool: RunTool, python_project: Path
) -> None:
    assert _lines(run_tool(glob, pattern="**/*.py")) == ["src/app.py", "tests/test_app.py"]
    # A name spelled out in full includes an ignored folder, and all below it.
    assert _lines(run_tool(glob, pattern="build/**/*.py")) == ["build/lib/app.py"]
    assert _lines(run_tool(glob, pattern="venv/lib/*/pkg/*.py")) == [
        "venv/lib/site-packages/pkg/__init__.py"
    ]
    assert _lines(run_tool(glob, pattern="{app.egg-info,src}/*")) == [
        "app.egg-info/SOURCES.txt",
        "src/app.py",
    ]
    assert _lines(run_tool(glob, pattern=".venv/lib/site-packages/pkg1/*.py")) == [
        ".venv/lib/site-packages/pkg1/__init__.py"
    ]
    # So does a path inside an ignored folder.
    assert _lines(run_tool(glob, pattern="**/*.py", path="build")) == ["build/lib/app.py"]
    assert ok(run_tool(glob, pattern="*/SOURCES.txt")) == (
        'No files match "*/SOURCES.txt" in . (skipped 3 hidden or ignored paths: '
        "app.egg-info/, build/, venv/; spell its name out in the pattern to include it)"
    )


def test_list_directory_lists_hidden_and_ignored_entries(
    run_tool: RunTool, python_project: Path
) -> None:
    assert _lines(run_tool(list_directory)) == [
        ".gitignore",
        ".venv/",
        "app.egg-info/",
        "build/",
        "src/",
        "tests/",
        "venv/",
    ]


def test_the_descriptions_say_what_is_skipped_and_how_to_search_it() -> None:
    def said(description: str) -> str:
        return " ".join(description.split())

    assert "Skips hidden files and folders" in said(grep.description)
    assert "what .gitignore/.ignore files exclude, unless path names them" in said(grep.description)
    assert "what .gitignore/.ignore files exclude, unless the pattern names them" in said(
        glob.description
    )
    assert "Lists every entry, hidden ones and those .gitignore excludes included" in said(
        list_directory.description
    )


# ----------------------------------------------------------------- the ignore rules themselves


@pytest.mark.parametrize(
    ("line", "path", "is_dir", "verdict"),
    [
        ("foo", "a/b/foo", False, True),  # no slash: a name at any depth
        ("foo", "a/foo", True, True),
        ("foo/", "a/foo", False, None),  # folders only
        ("foo/", "a/foo", True, True),
        ("/foo", "foo", False, True),
        ("/foo", "a/foo", False, None),
        ("a/foo", "x/a/foo", False, None),  # a slash in the middle anchors too
        ("**/foo", "x/y/foo", False, True),
        ("**/foo", "foo", False, True),
        ("a/**/b", "a/b", False, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("a/**", "a/x/y", False, True),
        ("a/**", "a", True, None),  # everything inside a, not a itself
        ("*.py", "a/b.py", False, True),
        ("a*", "abc/def", False, None),  # * stays within a name
        ("a/*", "a/b/c", False, None),
        ("?.txt", "a.txt", False, True),
        ("?.txt", "ab.txt", False, None),
        ("[a-c].txt", "b.txt", False, True),
        ("[!a-c].txt", "b.txt", False, None),
        ("[^a-c].txt", "d.txt", False, True),
        ("[]].txt", "].txt", False, True),
        ("[[:digit:]]*", "7up", False, True),
        ("[[:bogus:]]*", "7up", False, None),  # an unknown class: matches nothing
        ("[ab", "[ab", False, None),  # unclosed: matches nothing
        ("a\\*", "a*", False, True),
        ("a\\*", "ab", False, None),
        ("\\#x", "#x", False, True),
        ("#x", "#x", False, None),  # a comment
        ("\\!x", "!x", False, True),
        ("!x", "x", False, False),
        ("x  ", "x", False, True),
        ("x\\ ", "x ", False, True),
        ("x\r", "x", False, True),
        ("", "x", False, None),
    ],
)
def test_an_ignore_rule_matches_as_git_reads_it(
    line: str, path: str, is_dir: bool, verdict: bool | None
) -> None:
    assert IgnoreFile(line).verdict(path, path.rsplit("/", 1)[-1], is_dir) is verdict


def test_ignore_rules_with_many_stars_do_not_backtrack() -> None:
    # Naive translation backtracks for ages on these ("*a" * 12: minutes); each must answer
    # at once. Too many "**" drop the rule, which otherwise multiplies the ways to match.
    rules = IgnoreFile("*a" * 12 + "*b\n" + "/**" * 8 + "/x\n" + "**/a" * 4 + "/c\n")
    name = "a" * 250
    assert rules.verdict(name, name, False) is None
    assert rules.verdict("/".join("a" * 60), "a", False) is None
    assert rules.verdict("a/a/a/a/c", "c", False) is True


_GIT = shutil.which("git")
_DIRS = ("a", "b", "sub", ".d", "x y")
_FILES = ("c.log", "d.txt", "e", ".f", "[a]")
_SEGMENTS = st.sampled_from(
    [
        "a",
        "b",
        "sub",
        "*",
        "**",
        "?",
        "a*",
        "*.log",
        "c.log",
        "e",
        ".*",
        "[ab]",
        "[!a]*",
        "[a-c]*",
        "x\\ y",
        "\\[a]",
        "[[:alpha:]]*",
        ".d",
    ]
)
_LINES = st.builds(
    lambda negated, anchored, segments, folder: (
        ("!" if negated else "") + ("/" if anchored else "") + "/".join(segments) + folder
    ),
    st.booleans(),
    st.booleans(),
    st.lists(_SEGMENTS, min_size=1, max_size=3),
    st.sampled_from(["", "", "/"]),
)
_FILE_PATHS = st.builds(
    lambda folders, name: "/".join([*folders, name]),
    st.lists(st.sampled_from(_DIRS), max_size=3),
    st.sampled_from(_FILES),
)


@pytest.mark.skipif(_GIT is None, reason="git is not installed")
@settings(max_examples=60, deadline=None)
@given(
    files=st.sets(_FILE_PATHS, min_size=1, max_size=20),
    root_rules=st.lists(_LINES, min_size=1, max_size=6),
    nested_rules=st.lists(_LINES, max_size=4),
)
def test_the_walk_leaves_out_exactly_what_git_does(
    files: set[str], root_rules: list[str], nested_rules: list[str]
) -> None:
    """Against git itself: ``git ls-files --others --exclude-standard`` lists the files that
    no .gitignore excludes, which is what the walk must keep (hidden names included)."""
    assert _GIT is not None
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name in files:  # no file name is also a folder name
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("x")
        (root / ".gitignore").write_text("\n".join(root_rules) + "\n")
        deepest = max((root / name).parent for name in files)
        if nested_rules and deepest != root:
            (deepest / ".gitignore").write_text("\n".join(nested_rules) + "\n")
        env = {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "HOME": folder,
            "PATH": os.environ.get("PATH", ""),
        }
        subprocess.run([_GIT, "init", "-q"], cwd=root, env=env, check=True)
        listed = subprocess.run(
            [_GIT, "ls-files", "--others", "--exclude-standard", "-z"],
            cwd=root,
            env=env,
            check=True,
            capture_output=True,
        ).stdout.decode()
        theirs = sorted(name for name in listed.split("\0") if name)
        walk = walk_files(
            root,
            True,
            lambda _, name: None if name == ".git" else True,
            ignores=ignores_at(root, root),
        )
        assert sorted(relative for relative, _, _ in walk) == theirs


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
    [
        "a",
        "B",
        "s",
        "k",
        "i",
        "é",
        ".",
        r"\.",
        r"\w",
        r"\s",
        r"\b",
        "^",
        "$",
        "[ab]",
        "[^a]",
        "(?:a|b)",
        "(a)",
        "?",
        "*",
        "+",
        "{2}",
        "{1,2}",
        "|",
        r"\(",
        "x",
        "-",
        " ",
    ]
)
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
    write_tree(workspace.root, {"one/a.txt": "needle", "two/a.txt": "needle"})
    assert _lines(run_tool(grep, pattern="needle", path="two")) == ["two/a.txt:1: needle"]
    assert _lines(run_tool(glob, pattern="**/a.txt", path="one")) == ["one/a.txt"]
