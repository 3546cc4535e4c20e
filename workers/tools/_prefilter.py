"""A literal prefilter for grep: skip files that cannot match without running the regex.

Python's ``re`` scans case-insensitive patterns one character at a time (about 50 MB/s for an
alternation), while ``bytes.lower()`` and substring search run at memory speed. For a regex
like ``class \\w+Error\\(`` every match must contain ``class `` and ``error(`` in some letter
case; a file that lacks either cannot match, and most files of a tree lack them.

The filter is exact, never a heuristic: it only ever says "cannot match" when the regex could
not match either. Patterns it cannot reason about (groups with flags or lookarounds, numeric
escapes, non-ASCII literals) get no filter and are searched with the regex alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The non-ASCII characters that re.IGNORECASE treats as equal to an ASCII character (dotted
# capital I, dotless i, long s, Kelvin sign). str.lower() does not map them onto ASCII, so a text
# holding any is not filtered; tests/test_tools_search.py checks the set against the engine.
ASCII_CASE_PARTNERS = "\u0130\u0131\u017f\u212a"

_QUANTIFIER = re.compile(r"[*?+]|\{\d*(?:,\d*)?\}")
_SINGLE_CHAR_ESCAPES = frozenset("wWdDsSbBAZntrfva")


@dataclass(frozen=True)
class LiteralPrefilter:
    """Lowercased literals a match must contain: all of one branch's, for some branch."""

    branches: tuple[tuple[str, ...], ...]

    @classmethod
    def for_pattern(cls, pattern: str) -> LiteralPrefilter | None:
        """The filter for a regex that compiles, or None when no literal is certain."""
        branches = _required_literals(pattern)
        return cls(branches) if branches else None

    def may_match_ascii(self, data: bytes) -> bool:
        """False if the pure-ASCII ``data`` cannot match (the caller checked ``isascii``)."""
        lowered = data.lower()
        return any(
            all(literal.encode() in lowered for literal in branch) for branch in self.branches
        )

    def may_match_text(self, text: str) -> bool:
        """False if the decoded ``text`` cannot match."""
        if any(partner in text for partner in ASCII_CASE_PARTNERS):
            return True
        lowered = text.lower()
        return any(all(literal in lowered for literal in branch) for branch in self.branches)


def _required_literals(pattern: str) -> tuple[tuple[str, ...], ...] | None:
    """Per top-level ``|`` branch, the literal runs every match of it contains; or None."""
    if re.search(r"\(\?(?!:)", pattern):
        return None  # inline flags (verbose mode!), lookarounds, named groups: not worth it
    branches: list[tuple[str, ...]] = []
    runs: list[str] = []
    run: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        literal: str | None = None
        if char == "|":
            runs.append("".join(run))
            branches.append(tuple(r for r in runs if r))
            runs, run = [], []
            i += 1
            continue
        if char == "\\":
            escaped = pattern[i + 1 : i + 2]
            if escaped.isascii() and escaped and not escaped.isalnum():
                literal = escaped
            elif escaped not in _SINGLE_CHAR_ESCAPES:
                return None  # \x41, \u00e9, \N{...}, \1: not a single plain character
            i += 2
        elif char in "[(":
            end = _closing(pattern, i)
            if end < 0:
                return None
            i = end + 1
        elif char in ".^$)":
            i += 1
        else:
            literal = char
            i += 1
        quantifier = _QUANTIFIER.match(pattern, i)
        if quantifier is not None:
            i = quantifier.end()
            if i < len(pattern) and pattern[i] in "?+":
                i += 1  # lazy or possessive
        required = quantifier is None or quantifier.group() == "+"
        if literal is not None and required:
            if not literal.isascii():
                return None
            run.append(literal.lower())
        if literal is None or quantifier is not None:
            # The run ends at anything that is not one required literal character.
            runs.append("".join(run))
            run = []
    runs.append("".join(run))
    branches.append(tuple(r for r in runs if r))
    if not all(branches):
        return None  # a branch with no literal could match any file
    return tuple(branches)


def _closing(pattern: str, opening: int) -> int:
    """The index closing the class or (balanced) group opened at ``opening``, or -1."""
    if pattern[opening] == "[":
        i = opening + 1
        if pattern[i : i + 1] == "^":
            i += 1
        if pattern[i : i + 1] == "]":
            i += 1  # a "]" right after "[" is a member
        while i < len(pattern):
            if pattern[i] == "\\":
                i += 1
            elif pattern[i] == "]":
                return i
            i += 1
        return -1
    depth, i = 0, opening
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 1
        elif char == "[":
            i = _closing(pattern, i)
            if i < 0:
                return -1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1
