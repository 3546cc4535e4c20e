"""The exported variables of a bash, read back from what its ``export -p`` printed.

A session's shell state is captured at the command's end by bash itself, with builtins only
(``_shell_state``): ``env -0`` would cost a process more on every call. ``export -p`` prints
each variable as bash reads it back: ``declare -FLAGS NAME`` (``export NAME`` in POSIX mode),
then ``="VALUE"`` with ``"``, ``\\``, ``$`` and a backquote escaped, or ``=$'VALUE'`` (ANSI-C
quoting, for values with control characters). A variable with no value, an array or an
associative array is not in a command's environment, and is left out here as there.
"""

from __future__ import annotations

import re

# One line's head: its flags (a POSIX-mode line has none, or only "-a"/"-A" for arrays).
_HEAD = re.compile(rb"(?:declare -([A-Za-z-]*) |export (?:-([A-Za-z]+) )?)([A-Za-z_][A-Za-z0-9_]*)")
# $'...' escapes: what bash's ansic_quote writes, and the rest of bash's $'...' for safety.
_SIMPLE = {
    ord("a"): b"\a",
    ord("b"): b"\b",
    ord("e"): b"\x1b",
    ord("E"): b"\x1b",
    ord("f"): b"\f",
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("v"): b"\v",
    ord("\\"): b"\\",
    ord("'"): b"'",
    ord('"'): b'"',
    ord("?"): b"?",
}
_OCTAL = re.compile(rb"[0-7]{1,3}")
_HEX = re.compile(rb"x([0-9A-Fa-f]{1,2})")


class ExportError(ValueError):
    """The text is not what ``export -p`` prints."""


def exported(text: bytes) -> dict[bytes, bytes]:
    """The variables with a value that ``export -p`` printed in ``text``, as bytes."""
    found: dict[bytes, bytes] = {}
    at = 0
    while at < len(text):
        head = _HEAD.match(text, at)
        if head is None:
            raise ExportError(f"unexpected text at byte {at}: {text[at : at + 40]!r}")
        flags = (head.group(1) or head.group(2) or b"").decode()
        name, at = head.group(3), head.end()
        if text[at : at + 1] == b"=":
            value, at = _value(text, at + 1)
            if "a" not in flags and "A" not in flags:
                found[name] = value
        if text[at : at + 1] != b"\n":
            raise ExportError(f"no end of line after {name!r} at byte {at}")
        at += 1
    return found


def _value(text: bytes, at: int) -> tuple[bytes, int]:
    """The value starting at ``at`` (after "="), and where it ends."""
    if text.startswith(b'"', at):
        return _double_quoted(text, at + 1)
    if text.startswith(b"$'", at):
        return _ansi_c(text, at + 2)
    if text.startswith(b"(", at):
        return b"", _array_end(text, at + 1)
    raise ExportError(f"unquoted value at byte {at}")


def _double_quoted(text: bytes, at: int) -> tuple[bytes, int]:
    out = bytearray()
    while at < len(text):
        char = text[at]
        if char == ord('"'):
            return bytes(out), at + 1
        if char == ord("\\") and at + 1 < len(text) and text[at + 1] in b'"\\$`\n':
            if text[at + 1] != ord("\n"):  # a backslash-newline joins lines
                out.append(text[at + 1])
            at += 2
            continue
        out.append(char)
        at += 1
    raise ExportError("a double-quoted value does not end")


def _ansi_c(text: bytes, at: int) -> tuple[bytes, int]:
    out = bytearray()
    while at < len(text):
        char = text[at]
        if char == ord("'"):
            return bytes(out), at + 1
        if char != ord("\\") or at + 1 >= len(text):
            out.append(char)
            at += 1
            continue
        escaped = text[at + 1]
        if escaped in _SIMPLE:
            out += _SIMPLE[escaped]
            at += 2
        elif octal := _OCTAL.match(text, at + 1):
            out.append(int(octal.group(), 8) & 0xFF)
            at = octal.end()
        elif hexa := _HEX.match(text, at + 1):
            out.append(int(hexa.group(1), 16))
            at = hexa.end()
        else:  # bash keeps an escape it does not know as written
            out += text[at : at + 2]
            at += 2
    raise ExportError("an ANSI-C quoted value does not end")


def _array_end(text: bytes, at: int) -> int:
    """Where an array's ``(...)`` ends: its elements' quoted values skipped as a whole."""
    while at < len(text):
        if text.startswith(b'"', at):
            _, at = _double_quoted(text, at + 1)
        elif text.startswith(b"$'", at):
            _, at = _ansi_c(text, at + 2)
        elif text[at] == ord(")"):
            return at + 1
        else:
            at += 1
    raise ExportError("an array does not end")
