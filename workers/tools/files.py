"""The file tools: read, write and edit files and list directories inside the workspace.

Every path goes through ``ctx.workspace.resolve()``, so ``..``, foreign absolute paths and
symbolic links that lead outside are refused with a ``WorkspaceError``. Paths in answers are
relative to the workspace root.

``list_directory`` marks directories with a trailing ``/`` and shows a symbolic link as
``name -> target`` (the link's own text, unresolved), so the model can tell a link from the
thing it points at.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import IO, Annotated

from pydantic import Field

from executor import ToolError
from executor.contract import ToolContext, tool
from workers.tools._atomic import FileIdentity, replace_file

__all__ = ["edit_file", "list_directory", "read_file", "write_file"]

DEFAULT_LIMIT = 200
MAX_LIMIT = 2000
# Longer lines are cut: one minified line must not fill the page (or the memory).
MAX_LINE_CHARS = 2000
# edit_file holds the whole file in memory twice (old and new text).
MAX_EDIT_BYTES = 32 * 1024 * 1024

_BINARY_PROBE = 8192
_CHUNK = 64 * 1024


@tool(concurrency_safe=True, read_only=True, max_result_chars=500)
def read_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the workspace root.")],
    offset: Annotated[
        int, Field(ge=0, description="Number of lines to skip; 0 starts at the first line.")
    ] = 0,
    limit: Annotated[
        int, Field(ge=1, le=MAX_LIMIT, description="Maximum number of lines to return.")
    ] = DEFAULT_LIMIT,
) -> str:
    """Read a text file. For large files, use offset and limit to read it page by page."""
    resolved, shown = _existing_file(ctx, path)
    if _is_binary(resolved, shown):
        raise ToolError(
            f"{shown} looks like a binary file (it contains NUL bytes); read_file shows text "
            "only. Use bash (e.g. `file` or `xxd | head`) to inspect it."
        )
    try:
        with open(resolved, encoding="utf-8", errors="replace", newline="\n") as stream:
            page, total, final_newline = _read_page(stream, offset, limit, ctx.cancelled)
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror}.") from None
    if total == 0:
        if offset == 0:
            return f"[{shown} is empty.]"
        raise ToolError(
            f"Offset {offset} is past the end of {shown}, which is empty. Use offset 0."
        )
    if offset >= total:
        lines, use = ("1 line", "offset 0") if total == 1 else (f"{total} lines", "")
        raise ToolError(
            f"Offset {offset} is past the end of {shown}, which has {lines}. "
            f"Use {use or f'an offset from 0 to {total - 1}'}."
        )
    end = offset + len(page)
    if end >= total and not any(page):
        # Blank lines up to the end: say so rather than answer with nothing.
        span = (
            f"Line {end} of {shown} is"
            if len(page) == 1
            else f"Lines {offset + 1}-{end} of {shown} are"
        )
        count = "1 line" if total == 1 else f"{total} lines"
        return f"[{span} empty, and the file ends there ({count} in all).]"
    result = "\n".join(page)
    if end < total:
        result += f"\n\n[Showing lines {offset + 1}-{end} of {total}. Use offset to read more.]"
    elif final_newline:
        result += "\n"  # a page that reaches the end reads as the file does
    return result


@tool
def write_file(
    ctx: ToolContext,
    path: Annotated[
        str, Field(description="File path, relative to the workspace root; parents are created.")
    ],
    content: Annotated[str, Field(description="The complete new content of the file.")],
) -> str:
    """Create a file or replace its whole content. Missing parent directories are created."""
    target = ctx.workspace.resolve(path)
    shown = ctx.workspace.relative(target)
    if _is_dir(target, shown):
        raise ToolError(
            f"{shown} is a directory; write_file writes files. Give a file path inside it."
        )
    data = _encode(content, "content", "strict")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(
            f"Cannot create {shown}: part of its parent path is a file, not a directory."
        ) from None
    except OSError as exc:
        raise ToolError(f"Cannot create the directories for {shown}: {exc.strerror}.") from None
    _replace(ctx, target, shown, data)
    return f"Successfully wrote {len(data)} bytes to {shown}"


@tool
def edit_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the workspace root.")],
    old_string: Annotated[
        str,
        Field(description="Exact text to replace (non-empty), including whitespace."),
    ],
    new_string: Annotated[str, Field(description="Text to put in its place.")],
    replace_all: Annotated[
        bool,
        Field(description="Replace every occurrence; otherwise old_string must be unique."),
    ] = False,
) -> str:
    """Replace exact text in a file. old_string must match exactly once unless replace_all."""
    if not old_string:
        raise ToolError(
            "old_string is empty; give the exact text to replace. To create or overwrite "
            "a whole file, use write_file."
        )
    if old_string == new_string:
        raise ToolError("old_string and new_string are the same; there is nothing to change.")
    resolved, shown = _existing_file(ctx, path)
    try:
        with open(resolved, "rb") as handle:
            # The version read is the one the commit must still find in place.
            version = FileIdentity.of(os.fstat(handle.fileno()))
            if version.size > MAX_EDIT_BYTES:
                raise ToolError(
                    f"{shown} is larger than {MAX_EDIT_BYTES // (1024 * 1024)} MiB; edit_file "
                    "cannot edit it. Use bash (e.g. sed) instead."
                )
            raw = handle.read()
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror}.") from None
    if b"\0" in raw[:_BINARY_PROBE]:
        raise ToolError(f"{shown} looks like a binary file (it contains NUL bytes); not edited.")
    # surrogateescape carries bytes that are not UTF-8 through the edit unchanged.
    text = raw.decode("utf-8", errors="surrogateescape")
    count = text.count(old_string)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {shown}; no change was made. Read the file with "
            "read_file and copy the exact text, including whitespace and indentation."
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {shown}; no change was made. Add surrounding "
            "lines to old_string to make it unique, or set replace_all to true to replace "
            "every occurrence."
        )
    data = _encode(text.replace(old_string, new_string), "new_string", "surrogateescape")
    _replace(ctx, resolved, shown, data, expect=version)
    return f"Replaced {count} occurrence{'s' if count != 1 else ''} in {shown}."


@tool(concurrency_safe=True, read_only=True)
def list_directory(
    ctx: ToolContext,
    path: Annotated[
        str, Field(description="Directory path, relative to the workspace root.")
    ] = ".",
) -> str:
    """List a directory's entries, sorted; directories end in "/", links show "name -> target".

    Lists every entry, hidden ones and those .gitignore excludes included (glob and grep skip
    them).
    """
    resolved = ctx.workspace.resolve(path)
    shown = ctx.workspace.relative(resolved)
    try:
        is_dir = stat.S_ISDIR(resolved.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(
            f"Directory not found: {shown}. Check the path with list_directory on its parent."
        ) from None
    except OSError as exc:  # a name too long, a link loop, no permission
        raise ToolError(f"Cannot open {shown}: {exc.strerror}.") from None
    if not is_dir:
        raise ToolError(f"{shown} is a file, not a directory. Use read_file to read it.")
    try:
        with os.scandir(resolved) as entries:
            lines = [_describe_entry(e) for e in sorted(entries, key=lambda e: e.name)]
    except OSError as exc:
        raise ToolError(f"Cannot list {shown}: {exc.strerror}.") from None
    if not lines:
        return f"Directory {shown} is empty."
    return "\n".join(lines)


def _describe_entry(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        try:
            return f"{entry.name} -> {os.readlink(entry.path)}"
        except OSError:
            return f"{entry.name} -> ?"
    if entry.is_dir(follow_symlinks=False):
        return entry.name + "/"
    return entry.name


def _existing_file(ctx: ToolContext, path: str) -> tuple[Path, str]:
    """The resolved path of an existing regular file and its name as shown to the model."""
    resolved = ctx.workspace.resolve(path)
    shown = ctx.workspace.relative(resolved)
    try:
        mode = resolved.stat().st_mode
    except FileNotFoundError:
        raise ToolError(
            f"File not found: {shown}. Check the path with list_directory or glob."
        ) from None
    except OSError as exc:
        raise ToolError(f"Cannot open {shown}: {exc.strerror}.") from None
    if stat.S_ISDIR(mode):
        raise ToolError(f"{shown} is a directory, not a file. Use list_directory to see it.")
    if not stat.S_ISREG(mode):
        raise ToolError(f"{shown} is not a regular file (a pipe, socket or device).")
    return resolved, shown


def _is_dir(resolved: Path, shown: str) -> bool:
    try:
        return stat.S_ISDIR(resolved.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:  # Path.is_dir() raises these too: a name too long, a link loop
        raise ToolError(f"Cannot write {shown}: {exc.strerror}.") from None


def _is_binary(resolved: Path, shown: str) -> bool:
    try:
        with open(resolved, "rb") as raw:
            return b"\0" in raw.read(_BINARY_PROBE)
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror}.") from None


def _read_page(
    stream: IO[str], offset: int, limit: int, cancelled: threading.Event
) -> tuple[list[str], int, bool]:
    """Lines ``offset`` to ``offset + limit`` of ``stream``, its line count, and whether its
    last line ends with a newline (known only when the page reaches the end; False otherwise).

    Lines are counted as ``wc -l`` does, plus a last line that has no newline: a final
    newline ends the last line and starts none. They are read in bounded chunks and only the
    page is kept, so memory follows the page and not the file.
    """
    page: list[str] = []
    index = 0
    while True:
        if cancelled.is_set():
            raise ToolError("read_file was cancelled.")
        in_page = offset <= index < offset + limit
        kept, dropped, ended = _read_line(stream, MAX_LINE_CHARS if in_page else 0)
        if not ended and not kept and not dropped:
            # The end of the file, right after a newline (or in an empty file): no line here.
            return page, index, index > 0
        if in_page and dropped:
            page.append(f"{kept} [line truncated: {dropped} more characters]")
        elif in_page:
            page.append(kept)
        index += 1
        if not ended:
            return page, index, False
        if index >= offset + limit:
            # The page is full; the rest is one line per newline left, and one more for text
            # after the last newline.
            rest = _count_lines(stream, cancelled)
            return page, index + rest, rest == 0  # at the end, this line's newline was last


def _read_line(stream: IO[str], keep: int) -> tuple[str, int, bool]:
    """The next line's first ``keep`` characters, how many more it had, and whether a
    newline ended it (False at the end of the file)."""
    kept: list[str] = []
    room = keep
    dropped = 0
    while True:
        piece = stream.readline(_CHUNK)
        ended = piece.endswith("\n")
        if ended:
            piece = piece[:-1]
        if room > 0:
            kept.append(piece[:room])
        dropped += max(0, len(piece) - room)
        room = max(0, room - len(piece))
        if ended or not piece:
            return "".join(kept), dropped, ended


def _count_lines(stream: IO[str], cancelled: threading.Event) -> int:
    count = 0
    last = "\n"
    while chunk := stream.read(_CHUNK):
        if cancelled.is_set():
            raise ToolError("read_file was cancelled.")
        count += chunk.count("\n")
        last = chunk[-1]
    return count + (last != "\n")


def _encode(text: str, argument: str, errors: str) -> bytes:
    try:
        return text.encode("utf-8", errors=errors)
    except UnicodeEncodeError:
        raise ToolError(
            f"{argument} contains characters that cannot be written as UTF-8 "
            "(lone surrogates); send plain text."
        ) from None


def _replace(
    ctx: ToolContext, target: Path, shown: str, data: bytes, expect: FileIdentity | None = None
) -> None:
    try:
        replace_file(ctx, target, data, expect=expect)
    except OSError as exc:
        raise ToolError(f"Cannot write {shown}: {exc.strerror}. The file is unchanged.") from None
