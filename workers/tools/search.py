"""The search tools: ``glob`` finds files by name pattern, ``grep`` finds lines by regex.

Both walk the tree without following symbolic links (a link could lead out of the workspace
or into a loop), in name order so that results are deterministic, and show paths relative to
the workspace root so they can be passed straight to read_file.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field

from executor.context import ToolContext
from executor.contract import tool
from executor.errors import ToolError
from workers.tools._glob_pattern import GlobMatcher, GlobStates
from workers.tools._prefilter import LiteralPrefilter
from workers.tools._walk import join_relative, walk_files

GLOB_MAX_RESULTS = 200
GLOB_IGNORED_DIRS = frozenset({"node_modules", ".git"})

GREP_MAX_MATCHES = 50
GREP_SKIPPED_DIRS = frozenset({"node_modules", ".git", "dist"})
GREP_MAX_FILE_BYTES = 10 * 1024 * 1024
GREP_MAX_LINE_CHARS = 500
GREP_TIMEOUT = 30.0
BINARY_SNIFF_BYTES = 8192
BINARY_EXTENSIONS = frozenset(
    {
        *("png", "jpg", "jpeg", "gif", "bmp", "webp", "ico", "tif", "tiff", "psd"),
        *("woff", "woff2", "ttf", "otf", "eot", "lock", "pdf"),
        *("zip", "gz", "tgz", "bz2", "xz", "7z", "rar", "tar", "jar", "war", "whl", "egg"),
        *("so", "dylib", "dll", "exe", "bin", "o", "a", "obj", "lib", "class"),
        *("pyc", "pyo", "pyd", "wasm"),
        *("mp3", "mp4", "mov", "avi", "mkv", "webm", "wav", "ogg", "flac"),
        *("sqlite", "db", "npy", "npz", "pkl", "pickle", "parquet", "onnx", "pt", "ckpt"),
        "safetensors",
    }
)


# ---------------------------------------------------------------------------------- glob


@tool(concurrency_safe=True, read_only=True)
def glob(
    ctx: ToolContext,
    pattern: Annotated[
        str,
        Field(
            description='Glob pattern relative to path, e.g. "**/*.py", "src/*.{ts,tsx}", '
            '"test_?.py". ** matches any number of directories.'
        ),
    ],
    path: Annotated[
        str, Field(description="Directory to search from, relative to the workspace root.")
    ] = ".",
) -> str:
    """Find files whose path matches a glob pattern; returns paths relative to the workspace root.

    Supports *, ?, [abc], {a,b} and **. Hidden files and folders (names starting with ".")
    match only when the pattern names them explicitly; node_modules and .git are skipped;
    symbolic links are not followed. Results are sorted, at most 200.
    """
    matcher = GlobMatcher(pattern)
    base = _existing(ctx, path)
    if not base.is_dir():
        raise ToolError(
            f"Not a directory: {path}. glob searches a directory; give a folder as path "
            "(use read_file to read a single file)."
        )

    def enter(states: GlobStates, name: str) -> GlobStates | None:
        return None if name in GLOB_IGNORED_DIRS else matcher.enter_directory(states, name)

    found = [
        relative
        for relative, entry, states in walk_files(base, matcher.start, enter, ctx.cancelled)
        if matcher.matches_file(states, entry.name)
    ]
    shown = ctx.workspace.relative(base)
    if not found:
        return f'No files match "{pattern}" in {shown}'
    found.sort()
    lines = [join_relative(shown, relative) for relative in found[:GLOB_MAX_RESULTS]]
    if len(found) > GLOB_MAX_RESULTS:
        lines.append(
            f"... and {len(found) - GLOB_MAX_RESULTS} more files ({len(found)} matched; "
            f"showing the first {GLOB_MAX_RESULTS}). Narrow the pattern or path."
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- grep


@tool(concurrency_safe=True, read_only=True, timeout=GREP_TIMEOUT)
def grep(
    ctx: ToolContext,
    pattern: Annotated[
        str,
        Field(
            description="Python regular expression, matched case-insensitively within each "
            'line, e.g. "def \\w+_handler" or "TODO|FIXME".'
        ),
    ],
    path: Annotated[
        str,
        Field(description="File or directory to search, relative to the workspace root."),
    ] = ".",
) -> str:
    """Search file contents for a regular expression, like grep -rni; returns path:line: text.

    A directory is searched recursively in name order (node_modules, .git and dist skipped,
    binary files and files over 10 MB skipped, symbolic links not followed). At most 50
    matching lines are returned; ^ and $ anchor at line starts and ends.
    """
    regex = _compile_regex(pattern)
    base = _existing(ctx, path)
    shown = ctx.workspace.relative(base)
    search = _Search(regex, LiteralPrefilter.for_pattern(pattern))
    if base.is_dir():
        for relative, entry, _ in walk_files(base, True, _grep_enter, ctx.cancelled):
            if ctx.cancelled.is_set() or search.full:
                break
            if not _binary_name(entry.name):
                search.file(entry.path, join_relative(shown, relative))
    elif _binary_name(base.name):
        raise ToolError(f"{shown} looks like a binary file; grep searches text files only.")
    else:
        search.file(str(base), shown)
        if search.binary:
            raise ToolError(f"{shown} is a binary file; grep searches text files only.")
        if search.too_large:
            raise ToolError(
                f"{shown} is larger than {GREP_MAX_FILE_BYTES // (1024 * 1024)} MB; grep "
                "skips files that large. Read parts of it with read_file instead."
            )
    return search.report(pattern, shown)


def _grep_enter(_state: bool, name: str) -> bool | None:
    return None if name in GREP_SKIPPED_DIRS else True


def _binary_name(name: str) -> bool:
    return os.path.splitext(name)[1][1:].lower() in BINARY_EXTENSIONS


def _compile_regex(pattern: str) -> re.Pattern[str]:
    if not pattern:
        raise ToolError('Empty pattern. Give a regular expression such as "def main".')
    try:
        # MULTILINE because the whole file is searched at once: ^ and $ still mean a line's.
        return re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ToolError(
            f'Invalid regular expression "{pattern}": {exc.msg}{where}. grep takes a Python '
            "regular expression; escape special characters such as ( [ { . * + ? with a "
            "backslash to match them literally."
        ) from None


@dataclass
class _Search:
    """Matches collected across files, up to the cap, and what was skipped on the way."""

    regex: re.Pattern[str]
    prefilter: LiteralPrefilter | None
    matches: list[str] = field(default_factory=list)
    large_files: list[str] = field(default_factory=list)
    binary: bool = False
    too_large: bool = False

    @property
    def full(self) -> bool:
        return len(self.matches) >= GREP_MAX_MATCHES

    def file(self, path: str, shown: str) -> None:
        """Add the matching lines of the file at ``path`` (shown to the model as ``shown``)."""
        self.binary = self.too_large = False
        data = self._read(path, shown)
        if data is None:
            return
        if data.isascii():
            if self.prefilter is not None and not self.prefilter.may_match_ascii(data):
                return
            text = data.decode("ascii")
        else:
            text = data.decode("utf-8", errors="replace")
            if self.prefilter is not None and not self.prefilter.may_match_text(text):
                return
        regex = self.regex
        # One search over the whole text first: most files have no match and need no lines.
        found = regex.search(text)
        line_number, counted_to = 1, 0
        while found is not None:
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.start())
            end = len(text) if end < 0 else end
            # A whole-text match may span lines; report a line only if it matches on its own.
            in_line = regex.search(text, start, end)
            if in_line is not None:
                line_number += text.count("\n", counted_to, start)
                counted_to = start
                line = _cut_line(text[start:end].rstrip(), in_line.start() - start)
                self.matches.append(f"{shown}:{line_number}: {line}")
                if self.full:
                    return
            if end >= len(text):
                return
            found = regex.search(text, end + 1)

    def _read(self, path: str, shown: str) -> bytes | None:
        try:
            # O_NOFOLLOW: the file may have been swapped for a link since the walk saw it.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None
            if info.st_size > GREP_MAX_FILE_BYTES:
                self.too_large = True
                self.large_files.append(shown)
                return None
            try:
                data = handle.read(GREP_MAX_FILE_BYTES + 1)
            except OSError:
                return None
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            self.binary = True
            return None
        return data

    def report(self, pattern: str, shown: str) -> str:
        lines = list(self.matches) or [f'No matches for "{pattern}" in {shown}']
        if self.full:
            # The search stops at the cap, so whether more exist is unknown (and likely).
            lines.append(
                f"... (results capped at {GREP_MAX_MATCHES} matches; narrow the pattern or path)"
            )
        if self.large_files:
            listed = ", ".join(self.large_files[:3]) + (
                ", ..." if len(self.large_files) > 3 else ""
            )
            lines.append(
                f"(skipped {len(self.large_files)} file(s) larger than "
                f"{GREP_MAX_FILE_BYTES // (1024 * 1024)} MB: {listed})"
            )
        return "\n".join(lines)


def _cut_line(line: str, match_at: int) -> str:
    """The line, or a window of it around the match when it is too long to show whole."""
    if len(line) <= GREP_MAX_LINE_CHARS:
        return line
    start = max(0, min(match_at - GREP_MAX_LINE_CHARS // 5, len(line) - GREP_MAX_LINE_CHARS))
    window = line[start : start + GREP_MAX_LINE_CHARS]
    before = "..." if start > 0 else ""
    return f"{before}{window}... [line cut: {len(line)} characters]"


# ------------------------------------------------------------------------------- shared


def _existing(ctx: ToolContext, path: str) -> Path:
    resolved = ctx.workspace.resolve(path)
    if not resolved.exists():
        raise ToolError(f"Path not found: {path}. Check the path with list_directory or glob.")
    return resolved
