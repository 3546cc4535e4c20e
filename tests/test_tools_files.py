"""The file tools against real files in a temporary workspace, through the real runner."""

from __future__ import annotations

import os
import stat
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from executor import (
    ErrorType,
    FenceError,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
)
from executor.contract import Workspace
from tests.support.expect import ok, tool_error
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools._atomic import replace_file
from workers.tools.files import (
    MAX_LINE_CHARS,
    edit_file,
    list_directory,
    read_file,
    write_file,
)

RunTool = Callable[..., ToolResult]
MiB = 1024 * 1024


def _full_read(workspace: Workspace, **arguments: Any) -> str:
    """read_file's own answer, before the runner cuts it to 500 characters."""
    return str(read_file.invoke(ToolContext(workspace=workspace), read_file.validate(arguments)))


def _large_markdown() -> str:
    """The file seed 001 builds with its node one-liner: 250 sections, 752 lines (`wc -l`)."""
    text = "# Large Test\n\n"
    for i in range(1, 251):
        text += f"## Section {i}\n" + "x" * 400 + "\n\n"
    return text


def _run_with(tool: Tool, env: CallEnvironment, **args: Any) -> ToolResult:
    return run_call(ToolCall(name=tool.name, arguments=args), ToolRegistry([tool]), env)


def _lost_lock() -> None:
    raise FenceError("The exclusive lock was lost; this write was not committed.")


def _names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# --- seed 001's integration tests and pagination -------------------------------------------


def test_write_file_creates_parent_directories(run_tool: RunTool, workspace: Workspace) -> None:
    result = run_tool(write_file, path=".agent-test/deep/nested/file.txt", content="hello")

    assert ok(result) == "Successfully wrote 5 bytes to .agent-test/deep/nested/file.txt"
    assert (workspace.root / ".agent-test/deep/nested/file.txt").read_text() == "hello"


def test_read_file_on_a_missing_file_says_file_not_found(run_tool: RunTool) -> None:
    content = tool_error(run_tool(read_file, path=".agent-test/missing.txt"))

    assert content.startswith("File not found: .agent-test/missing.txt.")


def test_first_page_of_the_seed_file_ends_with_the_footer(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "large-test.md").write_text(_large_markdown())

    result = run_tool(read_file, path="large-test.md", limit=200)

    assert result.truncated  # read_file's 500-character limit; the footer is in the tail
    last = ok(result).split("\n")[-1]
    assert last == "[Showing lines 1-200 of 752. Use offset to read more.]"


def test_second_page_of_the_seed_file_ends_with_the_footer(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "large-test.md").write_text(_large_markdown())

    result = run_tool(read_file, path="large-test.md", offset=200, limit=200)

    last = ok(result).split("\n")[-1]
    assert last == "[Showing lines 201-400 of 752. Use offset to read more.]"


def test_pages_are_exactly_the_seed_slices(workspace: Workspace) -> None:
    text = _large_markdown()
    (workspace.root / "large-test.md").write_text(text)
    lines = text.split("\n")

    first = _full_read(workspace, path="large-test.md")
    second = _full_read(workspace, path="large-test.md", offset=200, limit=200)
    last = _full_read(workspace, path="large-test.md", offset=600, limit=200)

    footer = "\n\n[Showing lines {}-{} of 752. Use offset to read more.]"
    assert first == "\n".join(lines[:200]) + footer.format(1, 200)
    assert second == "\n".join(lines[200:400]) + footer.format(201, 400)
    assert last == "\n".join(lines[600:])  # the end is reached: no footer


def test_a_trailing_newline_ends_the_last_line_and_starts_none(workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("one\ntwo\n")

    # The page of 2 lines is the whole file: no footer, and the file's own final newline.
    assert _full_read(workspace, path="a.txt", limit=2) == "one\ntwo\n"
    assert _full_read(workspace, path="a.txt", limit=1) == (
        "one\n\n[Showing lines 1-1 of 2. Use offset to read more.]"
    )
    assert _full_read(workspace, path="a.txt") == "one\ntwo\n"


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        ("a\nb\nc\n", 3),  # as wc -l counts
        ("a\nb\nc", 3),  # a last line without a newline counts too
        ("a\n\n", 2),  # an empty line before the final newline is a line
        ("\n", 1),  # one empty line
        ("c", 1),
    ],
)
def test_read_file_counts_lines_as_wc_does(
    run_tool: RunTool, workspace: Workspace, content: str, lines: int
) -> None:
    (workspace.root / "f.txt").write_text(content)

    footer = f"[Showing lines 1-1 of {lines}. Use offset to read more.]"
    if lines > 1:
        assert _full_read(workspace, path="f.txt", limit=1).endswith(footer)
    empty = "[Line 1 of f.txt is empty, and the file ends there (1 line in all).]"
    whole = content if content.strip() else empty
    assert _full_read(workspace, path="f.txt", limit=lines) == whole
    past = tool_error(run_tool(read_file, path="f.txt", offset=lines))
    assert past.startswith(f"Offset {lines} is past the end of f.txt, which has {lines} line")


def test_read_file_offset_at_and_past_the_end_of_a_file_with_a_final_newline(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("a\nb\nc\n")

    assert ok(run_tool(read_file, path="a.txt", offset=2)) == "c\n"
    for offset in (3, 4):
        assert tool_error(run_tool(read_file, path="a.txt", offset=offset)) == (
            f"Offset {offset} is past the end of a.txt, which has 3 lines. "
            "Use an offset from 0 to 2."
        )


def test_read_file_keeps_carriage_returns(workspace: Workspace) -> None:
    (workspace.root / "crlf.txt").write_bytes(b"a\r\nb\r\n")

    assert _full_read(workspace, path="crlf.txt") == "a\r\nb\r\n"


# --- read_file's other cases ----------------------------------------------------------------


def test_read_file_decodes_invalid_utf8_with_replacement_characters(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "latin1.txt").write_bytes(b"caf\xe9 ok\n")

    assert ok(run_tool(read_file, path="latin1.txt")) == "caf\ufffd ok\n"


def test_read_file_says_a_file_is_empty(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "empty.txt").write_bytes(b"")

    assert ok(run_tool(read_file, path="empty.txt")) == "[empty.txt is empty.]"


def test_read_file_refuses_a_directory(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "src").mkdir()

    content = tool_error(run_tool(read_file, path="src"))

    assert "src is a directory" in content
    assert "list_directory" in content


def test_read_file_refuses_a_binary_file(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

    assert "binary file" in tool_error(run_tool(read_file, path="image.png"))


def test_read_file_offset_past_the_end_names_the_line_count(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("1\n2\n3")

    content = tool_error(run_tool(read_file, path="a.txt", offset=3))

    assert content == (
        "Offset 3 is past the end of a.txt, which has 3 lines. Use an offset from 0 to 2."
    )
    assert ok(run_tool(read_file, path="a.txt", offset=2)) == "3"


def test_read_file_offset_past_the_end_is_an_error_never_an_empty_page(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "large-test.md").write_text(_large_markdown())
    (workspace.root / "one.txt").write_text("just one")
    (workspace.root / "empty.txt").write_bytes(b"")

    assert tool_error(run_tool(read_file, path="large-test.md", offset=800)) == (
        "Offset 800 is past the end of large-test.md, which has 752 lines. "
        "Use an offset from 0 to 751."
    )
    assert tool_error(run_tool(read_file, path="one.txt", offset=1)) == (
        "Offset 1 is past the end of one.txt, which has 1 line. Use offset 0."
    )
    assert tool_error(run_tool(read_file, path="empty.txt", offset=5)) == (
        "Offset 5 is past the end of empty.txt, which is empty. Use offset 0."
    )
    assert ok(run_tool(read_file, path="empty.txt", offset=0)) == "[empty.txt is empty.]"


def test_read_file_says_so_when_only_empty_lines_are_left(
    run_tool: RunTool, workspace: Workspace
) -> None:
    # Empty lines before the end hold nothing: an answer of "" would read as a failure, so
    # the tool says what is there.
    (workspace.root / "b.txt").write_text("x\n\n\n")

    assert ok(run_tool(read_file, path="b.txt", offset=1)) == (
        "[Lines 2-3 of b.txt are empty, and the file ends there (3 lines in all).]"
    )
    assert ok(run_tool(read_file, path="b.txt", offset=2)) == (
        "[Line 3 of b.txt is empty, and the file ends there (3 lines in all).]"
    )
    assert ok(run_tool(read_file, path="b.txt", offset=1, limit=1)) == (
        "\n\n[Showing lines 2-2 of 3. Use offset to read more.]"
    )
    assert tool_error(run_tool(read_file, path="b.txt", offset=3)).startswith(
        "Offset 3 is past the end of b.txt, which has 3 lines."
    )


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"offset": -1}, "offset"),
        ({"limit": 0}, "limit"),
        ({"limit": 2001}, "limit"),
    ],
)
def test_read_file_validates_offset_and_limit(
    run_tool: RunTool, workspace: Workspace, arguments: dict[str, int], problem: str
) -> None:
    (workspace.root / "a.txt").write_text("a")

    result = run_tool(read_file, path="a.txt", **arguments)

    assert result.error_type is ErrorType.INVALID_ARGUMENTS
    assert f"- {problem}:" in result.content


def test_read_file_cuts_an_enormous_line(workspace: Workspace) -> None:
    (workspace.root / "min.js").write_text("y" * 100_000 + "\nnext\n")

    lines = _full_read(workspace, path="min.js").split("\n")

    cut = 100_000 - MAX_LINE_CHARS
    assert lines[0] == "y" * MAX_LINE_CHARS + f" [line truncated: {cut} more characters]"
    assert lines[1:] == ["next", ""]


@pytest.mark.slow
def test_read_file_streams_a_large_file(run_tool: RunTool, workspace: Workspace) -> None:
    line = "z" * 99 + "\n"
    block = line * 10_000  # 1 MB
    with open(workspace.root / "big.log", "w") as out:
        for _ in range(50):
            out.write(block)
    size = (workspace.root / "big.log").stat().st_size

    tracemalloc.start()
    try:
        result = run_tool(read_file, path="big.log")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert size == 50_000_000
    assert ok(result).endswith("[Showing lines 1-200 of 500000. Use offset to read more.]")
    assert peak < 2 * MiB, f"peak {peak} bytes while reading the first page of {size} bytes"


@pytest.mark.slow
def test_read_file_streams_one_enormous_line(run_tool: RunTool, workspace: Workspace) -> None:
    with open(workspace.root / "one-line.txt", "w") as out:
        for _ in range(20):
            out.write("q" * MiB)

    tracemalloc.start()
    try:
        result = run_tool(read_file, path="one-line.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    cut = 20 * MiB - MAX_LINE_CHARS
    assert ok(result).endswith(f" [line truncated: {cut} more characters]")
    assert peak < 2 * MiB, f"peak {peak} bytes while reading one 20 MiB line"


# --- write_file -------------------------------------------------------------------------------


def test_write_file_counts_utf8_bytes_and_writes_them_exactly(
    run_tool: RunTool, workspace: Workspace
) -> None:
    content = "héllo ✓\r\nzwei\n"

    result = run_tool(write_file, path="u.txt", content=content)

    data = content.encode("utf-8")
    assert ok(result) == f"Successfully wrote {len(data)} bytes to u.txt"
    assert (workspace.root / "u.txt").read_bytes() == data


def test_write_file_replaces_content_and_keeps_the_mode(
    run_tool: RunTool, workspace: Workspace
) -> None:
    target = workspace.root / "run.sh"
    target.write_text("old old old old\n")
    target.chmod(0o750)

    ok(run_tool(write_file, path="run.sh", content="new\n"))

    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert _names(workspace.root) == ["run.sh"]


def test_write_file_gives_a_new_file_the_umask_mode(
    run_tool: RunTool, workspace: Workspace
) -> None:
    previous = os.umask(0o022)
    try:
        ok(run_tool(write_file, path="new.txt", content="x"))
    finally:
        os.umask(previous)

    assert stat.S_IMODE((workspace.root / "new.txt").stat().st_mode) == 0o644


def test_write_file_refuses_a_directory(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "out").mkdir()

    assert "out is a directory" in tool_error(run_tool(write_file, path="out", content="x"))
    assert "is a directory" in tool_error(run_tool(write_file, path=".", content="x"))


def test_write_file_refuses_a_file_in_the_parent_path(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "notes").write_text("keep")

    content = tool_error(run_tool(write_file, path="notes/today.txt", content="x"))

    assert "parent path is a file" in content
    assert (workspace.root / "notes").read_text() == "keep"


def test_write_file_refuses_lone_surrogates(run_tool: RunTool, workspace: Workspace) -> None:
    content = tool_error(run_tool(write_file, path="s.txt", content="a\ud800b"))

    assert "cannot be written as UTF-8" in content
    assert _names(workspace.root) == []


def test_write_file_that_lost_the_lock_leaves_the_old_file(workspace: Workspace) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old content")

    result = _run_with(
        write_file,
        CallEnvironment(workspace=workspace, fence=_lost_lock),
        path="data.txt",
        content="new content",
    )

    assert result.error_type is ErrorType.LOCK_LOST
    assert "lock was lost" in result.content
    assert target.read_text() == "old content"
    assert _names(workspace.root) == ["data.txt"]


def test_write_file_checks_the_fence_before_and_after_the_rename(
    workspace: Workspace,
) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old")
    seen: list[tuple[str, list[str]]] = []

    def observe() -> None:
        temps = [p for p in workspace.root.iterdir() if p.name != "data.txt"]
        seen.append((target.read_text(), [p.read_text() for p in temps]))

    env = CallEnvironment(workspace=workspace, fence=observe)
    result = _run_with(write_file, env, path="data.txt", content="new")

    ok(result)
    # Before: target untouched, temp file complete. After: renamed, the old version kept
    # under a second name until the second check passes.
    assert seen == [("old", ["new"]), ("new", ["old"])]
    assert target.read_text() == "new"
    assert _names(workspace.root) == ["data.txt"]


def test_cancelled_write_does_not_land(workspace: Workspace) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old")
    cancelled = threading.Event()
    cancelled.set()

    env = CallEnvironment(workspace=workspace, cancelled=cancelled)
    result = _run_with(write_file, env, path="data.txt", content="new")

    assert result.error_type is ErrorType.CANCELLED
    assert "cancelled" in result.content
    assert target.read_text() == "old"
    assert _names(workspace.root) == ["data.txt"]


def test_write_cancelled_while_running_does_not_land(workspace: Workspace) -> None:
    # The runner's time limit can end a call while its tool still writes: the commit checks.
    target = workspace.root / "data.txt"
    target.write_text("old")
    ctx = ToolContext(workspace=workspace)
    ctx.cancelled.set()

    with pytest.raises(ToolError, match="cancelled before its write was committed"):
        replace_file(ctx, target, b"new")

    assert target.read_text() == "old"
    assert _names(workspace.root) == ["data.txt"]


# --- edit_file --------------------------------------------------------------------------------


def test_edit_file_replaces_a_unique_string(run_tool: RunTool, workspace: Workspace) -> None:
    target = workspace.root / "app.py"
    target.write_text("def main():\n    return 1\n")
    target.chmod(0o700)

    result = run_tool(edit_file, path="app.py", old_string="return 1", new_string="return 2")

    assert ok(result) == "Replaced 1 occurrence in app.py."
    assert target.read_text() == "def main():\n    return 2\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert _names(workspace.root) == ["app.py"]


def test_edit_file_refuses_an_ambiguous_string(run_tool: RunTool, workspace: Workspace) -> None:
    target = workspace.root / "a.txt"
    target.write_text("x = 1\nx = 1\nx = 1\n")

    content = tool_error(run_tool(edit_file, path="a.txt", old_string="x = 1", new_string="y"))

    assert "occurs 3 times in a.txt; no change was made" in content
    assert "replace_all" in content
    assert target.read_text() == "x = 1\nx = 1\nx = 1\n"


def test_edit_file_replace_all(run_tool: RunTool, workspace: Workspace) -> None:
    target = workspace.root / "a.txt"
    target.write_text("x = 1\nx = 1\nx = 1\n")

    result = run_tool(edit_file, path="a.txt", old_string="1", new_string="2", replace_all=True)

    assert ok(result) == "Replaced 3 occurrences in a.txt."
    assert target.read_text() == "x = 2\nx = 2\nx = 2\n"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("absent", "b", "old_string was not found in a.txt"),
        ("", "b", "old_string is empty"),
        ("alpha", "alpha", "old_string and new_string are the same"),
    ],
)
def test_edit_file_refusals_change_nothing(
    run_tool: RunTool, workspace: Workspace, old: str, new: str, message: str
) -> None:
    target = workspace.root / "a.txt"
    target.write_text("alpha beta\n")

    content = tool_error(run_tool(edit_file, path="a.txt", old_string=old, new_string=new))

    assert message in content
    assert target.read_text() == "alpha beta\n"


def test_edit_file_on_a_missing_file_says_file_not_found(run_tool: RunTool) -> None:
    content = tool_error(run_tool(edit_file, path="nope.txt", old_string="a", new_string="b"))

    assert content.startswith("File not found: nope.txt.")


def test_edit_file_refuses_directories_and_binary_files(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "dir").mkdir()
    (workspace.root / "blob.bin").write_bytes(b"ab\x00cd")

    dir_error = tool_error(run_tool(edit_file, path="dir", old_string="a", new_string="b"))
    bin_error = tool_error(run_tool(edit_file, path="blob.bin", old_string="a", new_string="b"))

    assert "dir is a directory" in dir_error
    assert "binary file" in bin_error
    assert (workspace.root / "blob.bin").read_bytes() == b"ab\x00cd"


def test_edit_file_keeps_bytes_that_are_not_utf8(run_tool: RunTool, workspace: Workspace) -> None:
    target = workspace.root / "mixed.txt"
    target.write_bytes(b"caf\xe9\r\nname = old\r\n")

    ok(run_tool(edit_file, path="mixed.txt", old_string="old", new_string="neu"))

    assert target.read_bytes() == b"caf\xe9\r\nname = neu\r\n"


def test_edit_file_that_lost_the_lock_leaves_the_old_file(workspace: Workspace) -> None:
    target = workspace.root / "a.txt"
    target.write_text("alpha\n")

    result = _run_with(
        edit_file,
        CallEnvironment(workspace=workspace, fence=_lost_lock),
        path="a.txt",
        old_string="alpha",
        new_string="beta",
    )

    assert result.error_type is ErrorType.LOCK_LOST
    assert target.read_text() == "alpha\n"
    assert _names(workspace.root) == ["a.txt"]


# --- list_directory ---------------------------------------------------------------------------


def test_list_directory_sorts_and_marks_entries(
    run_tool: RunTool, workspace: Workspace, tmp_path: Path
) -> None:
    root = workspace.root
    (root / "src").mkdir()
    (root / "b.txt").write_text("")
    (root / ".env").write_text("")
    (root / "a.txt").write_text("")
    (root / "link").symlink_to("a.txt")
    (root / "elsewhere").symlink_to(tmp_path)

    listing = ok(run_tool(list_directory))

    assert listing.split("\n") == [
        ".env",
        "a.txt",
        "b.txt",
        f"elsewhere -> {tmp_path}",
        "link -> a.txt",
        "src/",
    ]


def test_list_directory_of_a_subdirectory(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "src/pkg").mkdir(parents=True)
    (workspace.root / "src/main.py").write_text("")

    assert ok(run_tool(list_directory, path="src")) == "main.py\npkg/"


def test_list_directory_says_when_a_directory_is_empty(
    run_tool: RunTool, workspace: Workspace
) -> None:
    (workspace.root / "void").mkdir()

    assert ok(run_tool(list_directory, path="void")) == "Directory void is empty."
    assert ok(run_tool(list_directory)) == "void/"


def test_list_directory_errors(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("")

    missing = tool_error(run_tool(list_directory, path="gone"))
    a_file = tool_error(run_tool(list_directory, path="a.txt"))

    assert missing.startswith("Directory not found: gone.")
    assert a_file.startswith("a.txt is a file, not a directory.")


# --- paths that leave the workspace -----------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path, workspace: Workspace) -> Path:
    """A secret file beside the workspace, and links inside it that point to it."""
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (workspace.root / "secret-link").symlink_to(secret)
    (workspace.root / "out-dir").symlink_to(tmp_path)
    return secret


ESCAPES = ["../secret.txt", "{secret}", "secret-link", "out-dir/secret.txt", "/proc/self/environ"]


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (read_file, {}),
        (write_file, {"content": "pwned"}),
        (edit_file, {"old_string": "secret", "new_string": "pwned"}),
    ],
)
def test_file_tools_refuse_paths_outside_the_workspace(
    run_tool: RunTool, outside: Path, path: str, tool: Tool, arguments: dict[str, str]
) -> None:
    result = run_tool(tool, path=path.format(secret=outside), **arguments)

    assert "outside the workspace" in tool_error(result)
    assert outside.read_text() == "secret"
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.txt", "ws"]


@pytest.mark.parametrize("path", ["..", "out-dir", "/proc", "/"])
def test_list_directory_refuses_paths_outside_the_workspace(
    run_tool: RunTool, outside: Path, path: str
) -> None:
    assert "outside the workspace" in tool_error(run_tool(list_directory, path=path))


def test_links_that_stay_inside_the_workspace_work(run_tool: RunTool, workspace: Workspace) -> None:
    (workspace.root / "real.txt").write_text("one\n")
    (workspace.root / "alias.txt").symlink_to("real.txt")

    assert ok(run_tool(read_file, path="alias.txt")) == "one\n"
    assert ok(run_tool(write_file, path="alias.txt", content="two\n")).endswith("to real.txt")
    assert (workspace.root / "alias.txt").is_symlink()
    assert (workspace.root / "real.txt").read_text() == "two\n"
