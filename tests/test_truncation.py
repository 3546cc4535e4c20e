"""Head + tail truncation: exact slices, honest counts, short text untouched."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor import TruncationPolicy, truncate
from executor._texts import truncation_marker as marker

MARKER = re.compile(
    r"\n\n\.\.\. \[(\d+) characters?, (\d+) lines? dropped(?:; [^\]]*)?\] \.\.\.\n\n"
)

texts = st.text(alphabet=st.characters(codec="utf-8") | st.just("\n"), max_size=400)


@given(text=texts, limit=st.integers(0, 500), ratio=st.floats(0, 1))
@settings(max_examples=400)
def test_properties_hold_for_any_text(text: str, limit: int, ratio: float) -> None:
    cut = truncate(text, limit, ratio)
    if len(text) <= limit:
        assert cut.text == text
        assert not cut.truncated
        return
    head_size = int(limit * ratio)
    tail_size = limit - head_size
    mark = marker(cut.dropped_chars, cut.dropped_lines)
    # Never longer than the limit plus the marker.
    assert len(cut.text) == limit + len(mark)
    # Head and tail are exact slices of the input.
    assert cut.text.startswith(text[:head_size])
    assert cut.text.endswith(text[len(text) - tail_size :] if tail_size else "")
    assert cut.text[head_size : head_size + len(mark)] == mark
    # The counts say what was really dropped.
    dropped = text[head_size : len(text) - tail_size]
    assert cut.dropped_chars == len(dropped) == len(text) - limit
    assert cut.dropped_lines == dropped.count("\n") + 1
    assert cut.original_chars == len(text)


def test_seed_000_default_keeps_sixty_percent_head() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    cut = truncate(text, 3000)
    head, tail = MARKER.split(cut.text)[0], MARKER.split(cut.text)[-1]
    assert len(head) == 1800
    assert len(tail) == 1200
    assert cut.truncated


def test_marker_counts_characters_and_lines() -> None:
    cut = truncate("a\nb\nc\nd\ne\nf", 4, 0.5)
    # kept "a\n" and "\nf"; dropped "b\nc\nd\ne" -> 7 characters over 4 lines
    assert cut.text == "a\n\n\n... [7 characters, 4 lines dropped] ...\n\n\nf"
    assert (cut.dropped_chars, cut.dropped_lines) == (7, 4)


def test_note_goes_inside_the_marker() -> None:
    cut = truncate("x" * 100, 10, note="full output: toolpool output call_1")
    assert "[90 characters, 1 line dropped; full output: toolpool output call_1]" in cut.text


def test_text_at_the_limit_is_unchanged() -> None:
    assert truncate("abc", 3).text == "abc"
    assert str(truncate("abc", 3)) == "abc"


@pytest.mark.parametrize(("limit", "ratio"), [(-1, 0.5), (10, 1.5), (10, -0.1)])
def test_bad_parameters_are_refused(limit: int, ratio: float) -> None:
    with pytest.raises(ValueError, match="must"):
        truncate("abc", limit, ratio)


def test_policy_caps_every_tool_limit() -> None:
    policy = TruncationPolicy(default_max_chars=3000, global_cap=50_000)
    assert policy.limit_for(None) == 3000
    assert policy.limit_for(500) == 500
    assert policy.limit_for(80_000) == 50_000
    assert TruncationPolicy(global_cap=100).limit_for(None) == 100
