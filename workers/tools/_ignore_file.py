"""One ``.gitignore``/``.ignore`` file's rules, read once per version of the file.

Ignore rules follow git's (gitignore(5)): ``#`` comments, ``!`` negation, ``dir/`` for folders
only, a pattern with a ``/`` before its end anchored at its file's folder (``/x``, ``a/b``)
and one without matched against a name at any depth, ``*``, ``?``, ``[...]``, and ``**`` as
``**/x``, ``x/**`` and ``a/**/b``. The last matching line of a file wins. The patterns are
translated here rather than with a library: see ``IgnoreFile``. Standard library only (grep's
helper process imports it and must start fast).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

# Only the start of a larger ignore file is read, and its first rules: a real one has a few
# hundred at most, and 5000 rules take a second or two to compile when written to be slow.
MAX_IGNORE_FILE_BYTES = 1024 * 1024
MAX_IGNORE_RULES = 5000
# A rule with more "**" than this is dropped: each one multiplies the ways a path can match.
MAX_DOUBLE_STARS = 4

# Parsed ignore files by identity (device, inode, size, modification time): a process that
# searches the same tree again (a worker, grep's helper) parses an unchanged file once.
_CACHE: dict[tuple[int, int, int, int], IgnoreFile] = {}
_CACHE_SIZE = 256
_CACHE_LOCK = threading.Lock()


@contextlib.contextmanager
def open_regular(path: str) -> Iterator[tuple[int, os.stat_result] | None]:
    """The regular file at ``path``, open for reading, and its status; None if it is missing,
    unreadable, not a regular file, or a symbolic link (never followed: it may lead out of the
    workspace, or have replaced the file since a walk saw it). Closed when the block ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        yield None
        return
    try:
        try:
            info: os.stat_result | None = os.fstat(fd)
        except OSError:
            info = None
        yield (fd, info) if info is not None and stat.S_ISREG(info.st_mode) else None
    finally:
        os.close(fd)


def load_ignore_file(path: str) -> IgnoreFile | None:
    """The rules of the ignore file at ``path``, or None if it is no readable regular file."""
    with open_regular(path) as opened:
        if opened is None:
            return None
        fd, info = opened
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
        if cached is not None:
            return cached
        chunks: list[bytes] = []
        left = MAX_IGNORE_FILE_BYTES
        try:
            while left > 0 and (chunk := os.read(fd, left)):
                chunks.append(chunk)
                left -= len(chunk)
        except OSError:
            return None
    rules = IgnoreFile(b"".join(chunks).decode("utf-8", errors="replace"))
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = rules
    return rules


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    on_name: bool  # no "/" in the pattern: matched against the name, at any depth


class IgnoreFile:
    """The rules of one ignore file; ``verdict`` matches a path relative to its folder.

    Translated here rather than with ``pathspec``: pathspec is built to filter a list of file
    paths, so its regexes also match everything below a matched folder and ``dir/**`` matches
    ``dir`` itself, which a walk that checks each entry (and prunes) must not see; and it tries
    its patterns one by one in Python, ~95 us a path against GitHub's Python .gitignore, where
    a walk checks every entry. Here all of a file's patterns run as one regex first (most
    entries match none): ~7 us a path. tests/test_tools_search.py checks the rules against
    git itself (``git ls-files --others --exclude-standard``).
    """

    def __init__(self, text: str) -> None:
        rules: list[_Rule] = []
        for number, line in enumerate(text.removeprefix("\ufeff").split("\n")):
            rule = _parse(line, f"r{number}_")
            if rule is not None:
                rules.append(rule)
                if len(rules) >= MAX_IGNORE_RULES:
                    break
        self._rules = tuple(reversed(rules))  # the last matching rule wins
        # Group names are unique per line, so the rules' regexes can run as one.
        self._any_name = _union([r.regex.pattern for r in rules if r.on_name])
        self._any_path = _union([r.regex.pattern for r in rules if not r.on_name])

    def __len__(self) -> int:
        return len(self._rules)

    def verdict(self, relative: str, name: str, is_dir: bool) -> bool | None:
        """True if the last rule matching ``relative`` ignores it, False if it re-includes it
        (``!``), None if no rule matches."""
        any_name, any_path = self._any_name, self._any_path
        if (any_name is None or any_name.fullmatch(name) is None) and (
            any_path is None or any_path.fullmatch(relative) is None
        ):
            return None
        for rule in self._rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.fullmatch(name if rule.on_name else relative) is not None:
                return not rule.negated
        return None


def _union(patterns: list[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns), re.DOTALL)


def _parse(line: str, tag: str) -> _Rule | None:
    """One line of an ignore file as a rule, or None for a blank line, a comment or a pattern
    that matches nothing (an unclosed ``[``, as in git). ``tag`` prefixes its group names."""
    line = _strip_trailing_spaces(line.removesuffix("\r"))
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    on_name = "/" not in line
    line = line.removeprefix("/")
    if not line:
        return None
    regex = _translate(line, tag)
    if regex is None:
        return None
    try:
        compiled = re.compile(regex, re.DOTALL)
    except re.error:
        return None
    return _Rule(compiled, negated, dir_only, on_name)


def _strip_trailing_spaces(line: str) -> str:
    """Trailing spaces go, unless escaped with a backslash (``foo\\ `` keeps one)."""
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        end -= 1
    if end < len(line) and _escaped(line, end):
        end += 1
    return line[:end]


def _escaped(line: str, index: int) -> bool:
    """Whether ``line[index]`` is escaped: preceded by an odd number of backslashes."""
    count = 0
    while index - count > 0 and line[index - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _translate(pattern: str, tag: str) -> str | None:
    """A git wildmatch pattern as a regex for ``fullmatch``: ``*``, ``?`` and ``[...]`` within
    one name, ``**`` as a whole segment across folders; None if it matches nothing."""
    segments = pattern.split("/")
    if sum(segment == "**" for segment in segments) > MAX_DOUBLE_STARS:
        return None
    out: list[str] = []
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        if segment == "**":
            # At the end ("a/**", or "**" alone): everything inside; before a "/": zero or
            # more folders ("**/a", "a/**/b").
            out.append(".*" if index == last else "(?:.*/)?")
            continue
        regex = _segment(segment, f"{tag}{index}_")
        if regex is None:
            return None
        out.append(regex + ("/" if index < last else ""))
    return "".join(out)


def _segment(segment: str, tag: str) -> str | None:
    """One name's pattern, or None if it matches nothing.

    Stars (``*``, or ``**`` within a name) match any run of characters but "/". Each star but
    the last takes the earliest place where the text up to the next star matches, and keeps
    it, so that a pattern with many stars cannot backtrack for ages on a long name: as in
    ``_glob_pattern._join``, which explains why the earliest place is always right.
    """
    chunks: list[list[str]] = [[]]
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            while i < len(segment) and segment[i] == "*":
                i += 1
            chunks.append([])
        elif char == "\\":
            if i + 1 >= len(segment):
                return None  # a trailing backslash: git matches nothing
            chunks[-1].append(re.escape(segment[i + 1]))
            i += 2
        elif char == "?":
            chunks[-1].append("[^/]")
            i += 1
        elif char == "[":
            parsed = _bracket(segment, i)
            if parsed is None:
                return None
            atom, i = parsed
            chunks[-1].append(atom)
        else:
            chunks[-1].append(re.escape(char))
            i += 1
    regex = "".join(chunks[0])
    for number, middle in enumerate(chunks[1:-1]):
        # A lookahead that captures and a backreference to it: an atomic group, in 3.10.
        group = f"{tag}{number}"
        regex += f"(?=(?P<{group}>[^/]*?{''.join(middle)}))(?P={group})"
    if len(chunks) > 1:
        regex += "[^/]*" + "".join(chunks[-1])
    return regex


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": "\\x21-\\x2f\\x3a-\\x40\\x5b-\\x60\\x7b-\\x7e",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _bracket(segment: str, opening: int) -> tuple[str, int] | None:
    """The ``[...]`` opened at ``opening`` as a regex, and the index after it; None if it is
    never closed or names an unknown ``[:class:]``, for which git matches nothing.

    As git's wildmatch: ``!`` or ``^`` first negates, a ``]`` first is a member, ``\\``
    escapes, ``a-z`` is a range (a ``-`` first, last or after a range is a member), and
    ``[:alpha:]`` and its kin are classes. A class never matches "/".
    """
    i = opening + 1
    negated = segment[i : i + 1] in ("!", "^")
    if negated:
        i += 1
    members: list[str] = []
    previous: str | None = None  # the last single member, which a "-" may extend to a range
    first = True
    while i < len(segment):
        char = segment[i]
        if char == "]" and not first:
            if not members:  # only reversed ranges
                return ("[^/]" if negated else "(?!)"), i + 1
            return ("[^/" if negated else "(?!/)[") + "".join(members) + "]", i + 1
        first = False
        if char == "[" and segment.startswith("[:", i):
            close = segment.find("]", i + 2)
            if close < 0:
                return None
            if close - 1 >= i + 2 and segment[close - 1] == ":":
                posix = _POSIX_CLASSES.get(segment[i + 2 : close - 1])
                if posix is None:
                    return None
                members.append(posix)
                previous = None
                i = close + 1
                continue
            # No ":]": the "[" is a plain member.
        if char == "\\":
            i += 1
            if i >= len(segment):
                return None
            char = segment[i]
        elif (
            char == "-" and previous is not None and i + 1 < len(segment) and segment[i + 1] != "]"
        ):
            i += 1
            high = segment[i]
            if high == "\\":
                i += 1
                if i >= len(segment):
                    return None
                high = segment[i]
            members.pop()
            if previous <= high:  # a reversed range matches nothing, as in git
                members.append(f"{re.escape(previous)}-{re.escape(high)}")
            previous = None
            i += 1
            continue
        members.append(re.escape(char))
        previous = char
        i += 1
    return None
