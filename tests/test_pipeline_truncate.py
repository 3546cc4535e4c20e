"""Truncate: every answer becomes a ToolResult cut to the policy; only a cut text is kept."""

from __future__ import annotations

import time

from executor import ErrorType, Settings, ToolCall, ToolStatus, TruncationPolicy, tool
from workers.pipeline._truncate import finish

SETTINGS = Settings(truncation=TruncationPolicy(default_max_chars=100, head_ratio=0.5))
CALL = ToolCall(id="c1", name="t")


@tool(max_result_chars=20)
def terse() -> str:
    """Say little."""
    return ""


def test_a_short_success_is_kept_whole_and_timed() -> None:
    started = time.monotonic()
    result = finish(CALL, None, SETTINGS, started, None, "hello")
    assert (result.call_id, result.name, result.status, result.content) == (
        "c1",
        "t",
        ToolStatus.OK,
        "hello",
    )
    assert (result.truncated, result.original_chars, result.error_type) == (False, 5, None)
    assert result.error_message is None
    assert result.duration_ms >= 0


def test_a_long_text_keeps_head_and_tail_and_asks_the_keeper_for_a_note() -> None:
    asked: list[tuple[str, str]] = []

    def keep(call: ToolCall, text: str) -> str:
        asked.append((call.id, text))
        return "full output: here"

    text = "0123456789" * 50
    result = finish(CALL, None, SETTINGS, time.monotonic(), None, text, keep=keep)
    assert asked == [("c1", text)]
    assert result.truncated
    assert (result.original_chars, result.dropped_chars) == (500, 400)
    assert result.content.startswith("0123456789" * 5)
    assert result.content.endswith("0123456789" * 5)
    assert "full output: here" in result.content


def test_the_keeper_is_not_asked_when_nothing_is_cut() -> None:
    def keep(call: ToolCall, text: str) -> str:
        raise AssertionError("nothing was cut")

    assert finish(CALL, None, SETTINGS, time.monotonic(), None, "x" * 100, keep=keep).content


def test_a_keeper_that_kept_nothing_still_gives_a_cut_result() -> None:
    result = finish(
        CALL, None, SETTINGS, time.monotonic(), None, "y" * 500, keep=lambda call, text: None
    )
    assert result.truncated
    assert "full output" not in result.content


def test_the_tools_own_limit_applies() -> None:
    result = finish(CALL, terse, SETTINGS, time.monotonic(), None, "w" * 100)
    assert result.dropped_chars == 80


def test_an_error_keeps_its_message_cut_to_a_thousand_characters() -> None:
    result = finish(CALL, None, Settings(), time.monotonic(), ErrorType.TOOL_ERROR, "e" * 5000)
    assert (result.status, result.error_type) == (ToolStatus.ERROR, ErrorType.TOOL_ERROR)
    assert result.error_message is not None
    assert len(result.error_message) < 1100
    assert result.error_message.startswith("e" * 400)
