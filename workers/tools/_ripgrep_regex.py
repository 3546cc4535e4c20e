"""grep's pattern, a Python regular expression, rewritten for ripgrep's engine (Rust regex).

The pattern is parsed by Python's own parser (so it is checked, and its errors worded, as
before) and the tree written back out in a syntax both engines read the same way: every
literal as ``\\x{..}``, every group non-capturing, every repetition as ``{m,n}``. So Python's
``{`` as a literal, ``[[]``, ``&&`` in a class or ``(?x)`` whitespace cannot mean something
else to Rust. What Rust's linear-time engine cannot run returns None, and grep runs the
pattern on Python's ``re`` instead (``_grep_proc``): lookarounds, backreferences, conditionals,
atomic groups and possessive repeats, ``\\A`` and ``\\Z``, the ASCII and LOCALE flags, and a
literal newline (which no line contains).
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    from re import _constants as sre_constants
    from re import _parser as sre_parse
else:
    import sre_constants
    import sre_parse

_c = sre_constants
_CATEGORIES = {
    _c.CATEGORY_DIGIT: r"\d",
    _c.CATEGORY_NOT_DIGIT: r"\D",
    _c.CATEGORY_SPACE: r"\s",
    _c.CATEGORY_NOT_SPACE: r"\S",
    _c.CATEGORY_WORD: r"\w",
    _c.CATEGORY_NOT_WORD: r"\W",
}
_ANCHORS = {
    _c.AT_BEGINNING: "^",
    _c.AT_END: "$",
    _c.AT_BOUNDARY: r"\b",
    _c.AT_NON_BOUNDARY: r"\B",
}
_NEWLINE = 10


class _Unsupported(Exception):
    """The pattern uses something Rust's engine cannot run the same way."""


def rust_regex(pattern: str) -> str | None:
    """The pattern in Rust regex syntax, matched case-insensitively line by line as Python's
    ``re.compile(pattern, IGNORECASE | MULTILINE)`` matches within a line; None if Rust's
    engine cannot run it. Raises ``re.error`` for an invalid pattern."""
    parsed = sre_parse.parse(pattern, re.IGNORECASE | re.MULTILINE)
    if parsed.state.flags & (re.ASCII | re.LOCALE):
        return None
    try:
        return _sequence(parsed)
    except _Unsupported:
        return None


def _sequence(items: Any) -> str:
    return "".join(_item(op, value) for op, value in items)


def _item(op: Any, value: Any) -> str:
    if op is _c.LITERAL:
        if value == _NEWLINE:
            raise _Unsupported
        return _char(value)
    if op is _c.NOT_LITERAL:
        return f"[^{_char(value)}]"
    if op is _c.ANY:
        return "."
    if op is _c.IN:
        return _class(value)
    if op is _c.CATEGORY:
        return _category(value)
    if op is _c.AT:
        if value not in _ANCHORS:
            raise _Unsupported  # \A and \Z: the whole file's start and end
        return _ANCHORS[value]
    if op is _c.BRANCH:
        return "(?:" + "|".join(_sequence(branch) for branch in value[1]) + ")"
    if op is _c.SUBPATTERN:
        _group, add_flags, del_flags, inner = value
        if (add_flags | del_flags) & (re.ASCII | re.LOCALE):
            raise _Unsupported
        flags = ("i" if add_flags & re.IGNORECASE else "") + (
            "-i" if del_flags & re.IGNORECASE else ""
        )
        return f"(?{flags}:{_sequence(inner)})"
    if op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:
        low, high, inner = value
        bound = "" if high is _c.MAXREPEAT else str(high)
        lazy = "?" if op is _c.MIN_REPEAT else ""
        return f"(?:{_sequence(inner)}){{{low},{bound}}}{lazy}"
    # Lookarounds, backreferences, conditionals, atomic groups, possessive repeats.
    raise _Unsupported


def _class(members: Any) -> str:
    negated = False
    parts: list[str] = []
    for op, value in members:
        if op is _c.NEGATE:
            negated = True
        elif op is _c.LITERAL:
            if value != _NEWLINE or negated:  # no line holds a newline to match
                parts.append(_char(value))
        elif op is _c.RANGE:
            parts.append(f"{_char(value[0])}-{_char(value[1])}")
        elif op is _c.CATEGORY:
            parts.append(_category(value))
        else:
            raise _Unsupported
    if not parts:
        raise _Unsupported  # only a newline: matches nothing in a line
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


def _category(value: Any) -> str:
    if value not in _CATEGORIES:
        raise _Unsupported
    return _CATEGORIES[value]


def _char(code: int) -> str:
    char = chr(code)
    if char.isascii() and (char.isalnum() or char == "_"):
        return char
    return f"\\x{{{code:x}}}"
