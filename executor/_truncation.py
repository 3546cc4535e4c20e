"""Head + tail truncation of tool output, with a marker that says what was dropped."""

from __future__ import annotations

from dataclasses import dataclass

from executor._texts import truncation_marker


@dataclass(frozen=True)
class Truncation:
    """The text to show and what was cut from the original to get it."""

    text: str
    original_chars: int
    dropped_chars: int = 0
    dropped_lines: int = 0

    @property
    def truncated(self) -> bool:
        """True when anything was dropped."""
        return self.dropped_chars > 0

    def __str__(self) -> str:
        return self.text


def truncate(
    text: str, max_chars: int = 3000, head_ratio: float = 0.6, note: str | None = None
) -> Truncation:
    """Keep the first and last characters of ``text`` so that ``max_chars`` remain.

    Text within the limit comes back unchanged. Otherwise the result is
    ``head + marker + tail`` where ``head`` is the first ``floor(max_chars * head_ratio)``
    characters, ``tail`` the last ``max_chars - len(head)``, and the marker counts the dropped
    characters and the lines they touch (the dropped span split on
    newlines). ``note`` is added inside the marker, e.g. where the full output is kept.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must not be negative, got {max_chars}")
    if not 0.0 <= head_ratio <= 1.0:
        raise ValueError(f"head_ratio must be between 0 and 1, got {head_ratio}")
    length = len(text)
    if length <= max_chars:
        return Truncation(text=text, original_chars=length)
    head_size = int(max_chars * head_ratio)
    tail_size = max_chars - head_size
    dropped = text[head_size : length - tail_size]
    dropped_lines = dropped.count("\n") + 1
    tail = text[length - tail_size :] if tail_size else ""
    shown = text[:head_size] + truncation_marker(len(dropped), dropped_lines, note) + tail
    return Truncation(
        text=shown,
        original_chars=length,
        dropped_chars=len(dropped),
        dropped_lines=dropped_lines,
    )
