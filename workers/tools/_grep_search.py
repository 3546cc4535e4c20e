"""grep's search itself: walk a tree and collect matching lines, with no tool machinery.

This module imports only the standard library and the walk and prefilter helpers, because
it runs in grep's helper process (``_grep_proc``), which must start in milliseconds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workers.tools._ignore_file import open_regular
from workers.tools._prefilter import LiteralPrefilter
from workers.tools._walk import Ignores, Skipped, ignores_at, join_relative, walk_files

GREP_MAX_MATCHES = 50
GREP_SKIPPED_DIRS = frozenset({"node_modules", ".git", "dist"})
GREP_MAX_FILE_BYTES = 10 * 1024 * 1024
GREP_MAX_LINE_CHARS = 500
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
# Only the first few skipped large files are named; the count says how many there were.
_LARGE_FILES_NAMED = 3


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regex grep runs; raises ``re.error`` for an invalid pattern."""
    # MULTILINE because the whole file is searched at once: ^ and $ still mean a line's.
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


def binary_name(name: str) -> bool:
    """True for a file name whose extension marks a binary format."""
    return os.path.splitext(name)[1][1:].lower() in BINARY_EXTENSIONS


@dataclass
class Findings:
    """Matches collected across files, up to the cap, and what was skipped on the way.

    ``binary`` and ``too_large`` describe the last file searched (they matter when a single
    file was asked for); ``current`` names the file being searched, for a timeout message.
    ``skipped`` names the first few hidden or ignored paths left out, of ``skipped_count``.
    """

    matches: list[str] = field(default_factory=list)
    large_files: list[str] = field(default_factory=list)
    large_count: int = 0
    skipped: list[str] = field(default_factory=list)
    skipped_count: int = 0
    binary: bool = False
    too_large: bool = False
    current: str = ""

    @property
    def full(self) -> bool:
        return len(self.matches) >= GREP_MAX_MATCHES


def search(
    pattern: str,
    base: str,
    shown: str,
    *,
    is_dir: bool,
    root: str | None = None,
    stop: Callable[[], bool] = lambda: False,
    findings: Findings | None = None,
) -> Findings:
    """Search the file or tree at ``base`` (shown to the model as ``shown``) for ``pattern``.

    A tree's hidden entries and what ignore files exclude are skipped, reading the ignore
    files from the workspace ``root`` down (``base``'s own if ``root`` is None); unless
    ``base`` is, or is inside, a hidden or ignored folder, which asks for all of it.
    ``stop()`` is polled between files; pass ``findings`` to keep what was found so far
    readable when the search is interrupted.
    """
    found = findings if findings is not None else Findings()
    searcher = _FileSearch(compile_pattern(pattern), LiteralPrefilter.for_pattern(pattern), found)
    if not is_dir:
        searcher.file(base, shown)
        return found
    ignores = Ignores() if root is None else ignores_at(Path(root), Path(base))
    skipped = Skipped()
    walk = walk_files(
        Path(base),
        True,
        _enter,
        ignores=ignores,
        skip_hidden=ignores is not None,
        wanted=_wanted,
        skipped=skipped,
    )
    for relative, entry, _ in walk:
        if stop() or found.full:
            break
        searcher.file(entry.path, join_relative(shown, relative))
    found.skipped = [join_relative(shown, relative) for relative in skipped.examples]
    found.skipped_count = skipped.count
    return found


def _enter(_state: bool, name: str) -> bool | None:
    return None if name in GREP_SKIPPED_DIRS else True


def _wanted(_state: bool, name: str) -> bool:
    return not binary_name(name)


@dataclass
class _FileSearch:
    """Adds the matching lines of one file at a time to ``found``."""

    regex: re.Pattern[str]
    prefilter: LiteralPrefilter | None
    found: Findings

    def file(self, path: str, shown: str) -> None:
        """Add the matching lines of the file at ``path`` (shown to the model as ``shown``)."""
        found = self.found
        found.binary = found.too_large = False
        found.current = shown
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
        match = regex.search(text)
        line_number, counted_to = 1, 0
        while match is not None:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.start())
            end = len(text) if end < 0 else end
            # A whole-text match may span lines; report a line only if it matches on its own.
            in_line = regex.search(text, start, end)
            if in_line is not None:
                line_number += text.count("\n", counted_to, start)
                counted_to = start
                line = cut_line(text[start:end].rstrip(), in_line.start() - start)
                found.matches.append(f"{shown}:{line_number}: {line}")
                if found.full:
                    return
            if end >= len(text):
                return
            match = regex.search(text, end + 1)

    def _read(self, path: str, shown: str) -> bytes | None:
        # Not through a link: the file may have been swapped for one since the walk saw it.
        with open_regular(path) as opened:
            if opened is None:
                return None
            fd, info = opened
            if info.st_size > GREP_MAX_FILE_BYTES:
                self._too_large(shown)
                return None
            try:
                # One byte more than the cap: a file that grew past it since fstat is skipped.
                with os.fdopen(fd, "rb", closefd=False) as handle:
                    data = handle.read(GREP_MAX_FILE_BYTES + 1)
            except OSError:
                return None
        if len(data) > GREP_MAX_FILE_BYTES:
            self._too_large(shown)
            return None
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            self.found.binary = True
            return None
        return data

    def _too_large(self, shown: str) -> None:
        self.found.too_large = True
        self.found.large_count += 1
        if len(self.found.large_files) < _LARGE_FILES_NAMED:
            self.found.large_files.append(shown)


def cut_line(line: str, match_at: int) -> str:
    """The line, or a window of it around the match when it is too long to show whole."""
    if len(line) <= GREP_MAX_LINE_CHARS:
        return line
    start = max(0, min(match_at - GREP_MAX_LINE_CHARS // 5, len(line) - GREP_MAX_LINE_CHARS))
    window = line[start : start + GREP_MAX_LINE_CHARS]
    before = "..." if start > 0 else ""
    return f"{before}{window}... [line cut: {len(line)} characters]"
