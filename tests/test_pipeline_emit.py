"""Emit: tool_result is queued after every event the call queued, to go in with the result."""

from __future__ import annotations

from pathlib import Path

import redis

from executor import ErrorType, Settings, ToolCall, ToolRegistry, ToolResult, ToolStatus
from executor.contract import Workspace
from executor.wire import CallJob, EventLog, Keys, read_events
from workers.pipeline._chain import CallState
from workers.pipeline._emit import Emit, brief

KEYS = Keys()


def _state(tmp_path: Path) -> CallState:
    call = ToolCall(id="c1", name="t")
    job = CallJob(call=call, turn_id="t1", index=0)
    return CallState(
        call=call,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=job,
    )


def test_the_result_is_recorded_after_the_queued_events(
    client: redis.Redis, tmp_path: Path
) -> None:
    events = EventLog(client, KEYS, worker="w1")

    def proceed(state: CallState) -> ToolResult:
        events.defer("lock_released", call_id="c1")  # what the lease guard leaves queued
        return ToolResult(
            call_id="c1",
            name="t",
            status=ToolStatus.ERROR,
            content="boom",
            error_type=ErrorType.TOOL_ERROR,
            truncated=True,
            duration_ms=12.5,
        )

    result = Emit(events)(_state(tmp_path), proceed)
    assert result.content == "boom"
    assert read_events(client, KEYS) == []  # queued for the store's round trip
    events.flush()
    stream = [event for _, event in read_events(client, KEYS)]
    assert [event.event for event in stream] == ["lock_released", "tool_result"]
    answered = stream[1]
    assert (answered.call_id, answered.turn_id, answered.tool, answered.worker) == (
        "c1",
        "t1",
        "t",
        "w1",
    )
    assert answered.data == {
        "duration_ms": 12.5,
        "status": "error",
        "error_type": "tool_error",
        "truncated": True,
    }


def test_a_success_has_no_error_type(client: redis.Redis, tmp_path: Path) -> None:
    events = EventLog(client, KEYS)
    Emit(events)(
        _state(tmp_path),
        lambda state: ToolResult(call_id="c1", name="t", status=ToolStatus.OK, content="ok"),
    )
    events.flush()
    [(_, answered)] = read_events(client, KEYS)
    assert (answered.data["status"], answered.data["error_type"]) == ("ok", None)


def test_event_arguments_cut_long_strings_only() -> None:
    arguments = {"content": "x" * 10_000, "path": "a.txt", "count": 3}
    shown = brief(arguments)
    assert shown["path"] == "a.txt"
    assert shown["count"] == 3
    assert len(shown["content"]) < 2100
    assert shown["content"].startswith("x" * 1000)
