"""The chain: steps run around each other in the listed order; an answering step stops it."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor import Settings, ToolCall, ToolRegistry, ToolResult, ToolStatus
from executor.contract import Workspace
from workers.pipeline._chain import CallState, Proceed, Step, chain


def _state(tmp_path: Path) -> CallState:
    return CallState(
        call=ToolCall(id="c", name="t"),
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
    )


def _answer(text: str) -> ToolResult:
    return ToolResult(call_id="c", name="t", status=ToolStatus.OK, content=text)


def _recording(name: str, seen: list[str]) -> Step:
    def step(state: CallState, proceed: Proceed) -> ToolResult:
        seen.append(f"{name} before")
        result = proceed(state)
        seen.append(f"{name} after")
        return result

    return step


def test_steps_run_around_each_other_outermost_first(tmp_path: Path) -> None:
    seen: list[str] = []

    def last(state: CallState) -> ToolResult:
        seen.append("last")
        return _answer("done")

    run = chain([_recording("a", seen), _recording("b", seen)], last)
    assert run(_state(tmp_path)).content == "done"
    assert seen == ["a before", "b before", "last", "b after", "a after"]


def test_a_step_that_answers_stops_the_steps_after_it(tmp_path: Path) -> None:
    seen: list[str] = []

    def refuse(state: CallState, proceed: Proceed) -> ToolResult:
        return _answer("refused")

    def last(state: CallState) -> ToolResult:
        raise AssertionError("the last step must not run")

    run = chain([_recording("a", seen), refuse, _recording("b", seen)], last)
    assert run(_state(tmp_path)).content == "refused"
    assert seen == ["a before", "a after"]


def test_a_step_may_change_the_answer_on_the_way_out(tmp_path: Path) -> None:
    def shout(state: CallState, proceed: Proceed) -> ToolResult:
        result = proceed(state)
        return result.model_copy(update={"content": result.content.upper()})

    run = chain([shout], lambda state: _answer("quiet"))
    assert run(_state(tmp_path)).content == "QUIET"


def test_no_steps_is_the_last_alone(tmp_path: Path) -> None:
    assert chain([], lambda state: _answer("x"))(_state(tmp_path)).content == "x"


def test_again_is_a_fresh_run_of_the_same_call(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.cancelled.set()
    state.started, state.arguments = 1.0, {"a": 1}
    fresh = state.again()
    assert fresh.call is state.call
    assert fresh.registry is state.registry
    assert not fresh.cancelled.is_set()
    assert (fresh.started, fresh.tool, fresh.arguments, fresh.held) == (0.0, None, {}, None)
    assert state.cancelled.is_set()  # the first run's flag is its own


def test_steps_after_validate_and_worker_steps_say_what_they_miss(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert state.turn_id == ""
    with pytest.raises(RuntimeError, match="after validate"):
        state.checked_tool()
    with pytest.raises(RuntimeError, match="without its job"):
        state.the_job()
