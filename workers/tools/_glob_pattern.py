"""Glob patterns as fast-glob reads them, matched one path segment at a time.

A pattern is brace-expanded (by ``bracex``) into alternatives; each alternative becomes a
tuple of segments, a regex one file or folder name must match in full, or None for ``**``
(any number of folders). A walk carries a set of states, (alternative, segment index) pairs,
from folder to folder, so that it can prune every folder no alternative can match below
(``src/*.py`` never enters ``docs/``) instead of listing the whole tree and filtering.

As with fast-glob's ``dot: false``, ``*``, ``?``, ``[...]`` and ``**`` never match a name that
starts with "."; a segment that spells out its leading dot (``.github``) does.
"""

from __future__ import annotations

import re

import bracex

from executor import ToolError

MAX_ALTERNATIVES = 1000
# Longer patterns are mistakes, and brace expansion of one costs seconds (10 MB: 17 s).
MAX_PATTERN_CHARS = 1000

_Segments = tuple["re.Pattern[str] | None", ...]
GlobStates = frozenset[tuple[int, int]]
# Stands for a ``*`` among the atoms of a segment's regex (an escaped literal is "\\*").
_STAR = "*"
_ANY_NAME = re.compile(r"(?!\.).+", re.DOTALL)


class GlobMatcher:
    """A compiled glob pattern; raises ``ToolError`` with a model-facing message if invalid."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._alternatives = _compile(pattern)
        self.start = self._close(frozenset((a, 0) for a in range(len(self._alternatives))))

    def enter_directory(self, states: GlobStates, name: str) -> GlobStates | None:
        """The states inside folder ``name``, or None if nothing below it can match."""
        after = self._advance(states, name)
        remaining = any(i < len(self._alternatives[a]) for a, i in after)
        return after if remaining else None

    def matches_file(self, states: GlobStates, name: str) -> bool:
        """Whether file ``name``, in the folder whose states are given, matches."""
        return any(i == len(self._alternatives[a]) for a, i in self._advance(states, name))

    def _advance(self, states: GlobStates, name: str) -> GlobStates:
        after: set[tuple[int, int]] = set()
        for a, i in states:
            segments = self._alternatives[a]
            if i == len(segments):
                continue
            segment = segments[i]
            if segment is None:
                if not name.startswith("."):  # ** does not enter hidden folders
                    after.add((a, i))
            elif segment.fullmatch(name):
                after.add((a, i + 1))
        return self._close(frozenset(after))

    def _close(self, states: GlobStates) -> GlobStates:
        # "**" may match zero folders, so a state before it is also a state after it.
        alternatives = self._alternatives
        extra = {
            (a, i + 1) for a, i in states if i < len(alternatives[a]) and alternatives[a][i] is None
        }
        return states | extra


def _compile(pattern: str) -> list[_Segments]:
    if not pattern.strip():
        raise ToolError('Empty glob pattern. Give a pattern such as "**/*.py".')
    if "\x00" in pattern:
        raise ToolError("The glob pattern contains a NUL character; remove it.")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(
            f"The glob pattern is {len(pattern)} characters long; glob takes patterns of up to "
            f'{MAX_PATTERN_CHARS}. Use a shorter pattern such as "**/*.py".'
        )
    if pattern.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", pattern):
        raise ToolError(
            f'Absolute glob pattern refused: "{pattern}". Give a pattern relative to path, '
            'e.g. pattern="**/*.py" with path="src".'
        )
    compiled: list[_Segments] = []
    for alternative in dict.fromkeys(_expand_braces(pattern)):
        parts = [part for part in alternative.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise ToolError(
                f'Glob pattern "{pattern}" contains "..". Patterns cannot leave path; '
                "pass the directory to search as path instead."
            )
        segments: list[re.Pattern[str] | None] = []
        for part in parts:
            if part == "**":
                if not segments or segments[-1] is not None:
                    segments.append(None)
            else:
                segments.append(_segment_regex(pattern, part))
        if segments and segments[-1] is None:
            segments.append(_ANY_NAME)  # a trailing ** matches the files below, not the folder
        if segments:
            compiled.append(tuple(segments))
    if not compiled:
        raise ToolError(f'Glob pattern "{pattern}" names no files. Try "**/*" or "*.py".')
    return compiled


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd``, nested braces and ``{1..3}`` ranges included, as bash
    (and fast-glob) read them; a brace with no comma or range stays, escapes are kept."""
    try:
        return bracex.expand(pattern, keep_escapes=True, limit=MAX_ALTERNATIVES)
    except bracex.ExpansionLimitException:
        raise ToolError(
            f"The glob pattern's braces expand to more than {MAX_ALTERNATIVES} "
            "alternatives; use fewer braces or a broader pattern."
        ) from None
    except RecursionError:  # bracex recurses once per "{" ("{" * 1000)
        raise ToolError(
            "The glob pattern's braces are nested too deeply; use fewer braces."
        ) from None


def _segment_regex(pattern: str, segment: str) -> re.Pattern[str]:
    """The regex one path segment must fully match; hidden names only if spelled out."""
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
        elif char == "*":
            out.append(_STAR)
            while i < len(segment) and segment[i] == "*":
                i += 1
        elif char == "?":
            out.append(".")
            i += 1
        elif char == "[" and (end := _class_end(segment, i)) > 0:
            out.append(_class_regex(segment[i + 1 : end]))
            i = end + 1
        else:
            out.append(re.escape(char))
            i += 1
    explicit_dot = segment.startswith((".", "\\."))
    try:
        return re.compile(("" if explicit_dot else r"(?!\.)") + _join(out), re.DOTALL)
    except re.error as exc:
        raise ToolError(
            f'Invalid glob pattern "{pattern}": {exc}. Check its [...] character ranges.'
        ) from None


def _join(atoms: list[str]) -> str:
    """The atoms as one regex, each ``*`` but the last matched without backtracking.

    ``.*a.*a.*a...x`` backtracks polynomially with the number of stars (a 41-character
    pattern against a 200-character name ran for minutes). As in CPython's fnmatch, each
    ``*`` followed by more pattern takes the shortest text up to the first place the rest of
    its chunk matches, and keeps it (a lookahead and a backreference: an atomic group that
    Python 3.10 can spell); only the last ``*`` stays free. Taking the earliest match of each
    middle chunk is always right for wildcards, whose atoms are one character each.
    """
    chunks: list[list[str]] = [[]]
    for atom in atoms:
        if atom == _STAR:
            chunks.append([])
        else:
            chunks[-1].append(atom)
    regex = "".join(chunks[0])
    for number, middle in enumerate(chunks[1:-1]):
        regex += f"(?=(?P<star{number}>.*?{''.join(middle)}))(?P=star{number})"
    if len(chunks) > 1:
        regex += ".*" + "".join(chunks[-1])
    return regex


def _class_end(segment: str, opening: int) -> int:
    i = opening + 1
    if i < len(segment) and segment[i] in "!^":
        i += 1
    if i < len(segment) and segment[i] == "]":
        i += 1  # a "]" right after "[" is a literal member
    while i < len(segment):
        if segment[i] == "\\":
            i += 1
        elif segment[i] == "]":
            return i
        i += 1
    return -1  # an unclosed "[" is a literal character, as in fast-glob


def _class_regex(members: str) -> str:
    negated = members[:1] in ("!", "^")
    body: list[str] = []
    i = int(negated)
    while i < len(members):
        char = members[i]
        if char == "\\" and i + 1 < len(members):
            body.append(re.escape(members[i + 1]))
            i += 2
            continue
        body.append("-" if char == "-" else re.escape(char))
        i += 1
    return ("[^" if negated else "[") + "".join(body) + "]"
