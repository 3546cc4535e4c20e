"""Validate: a job's payload, then the call's tool and arguments; a bad call is answered."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from executor import (
    ErrorType,
    Settings,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolStatus,
    TruncationPolicy,
)
from executor.contract import Workspace
from executor.wire import CallJob
from workers.pipeline._chain import CallState
from workers.pipeline._validate import check_call, parse_job, validate

registry = ToolRegistry()


@registry.tool
def echo(text: str) -> str:
    """Repeat text."""
    return text


def _state(tmp_path: Path, call: ToolCall, settings: Settings | None = None) -> CallState:
    return CallState(
        call=call, registry=registry, workspace=Workspace(tmp_path), settings=settings or Settings()
    )


def _never(state: CallState) -> ToolResult:
    raise AssertionError("a call that failed validation must not go on")


def test_parse_job_gives_the_call_job() -> None:
    job = CallJob(call=ToolCall(id="c", name="echo", arguments={"text": "x"}), turn_id="t", index=0)
    assert parse_job(job.model_dump(mode="json")) == job


@pytest.mark.parametrize("payload", [{"junk": True}, {"call": "x"}, {}])
def test_a_payload_that_is_not_a_job_fails_the_rq_job(payload: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="Malformed toolpool job payload"):
        parse_job(payload)


def test_check_call_gives_the_tool_and_its_validated_arguments() -> None:
    checked = check_call(ToolCall(name="echo", arguments={"text": "x"}), registry)
    assert not isinstance(checked, ToolResult)
    tool, arguments = checked
    assert (tool.name, arguments) == ("echo", {"text": "x"})


def test_check_call_answers_an_unknown_tool_and_bad_arguments() -> None:
    unknown = check_call(ToolCall(name="nope"), registry)
    assert isinstance(unknown, ToolResult)
    assert unknown.error_type is ErrorType.UNKNOWN_TOOL
    assert unknown.content.endswith("Call one of the available tools instead.")
    bad = check_call(ToolCall(name="echo", arguments={}), registry)
    assert isinstance(bad, ToolResult)
    assert bad.error_type is ErrorType.INVALID_ARGUMENTS
    assert bad.content == (
        "Invalid arguments for tool 'echo':\n- text: Field required\n"
        "Fix the arguments and call the tool again."
    )


def test_check_call_answers_are_truncated_by_the_settings() -> None:
    settings = Settings(truncation=TruncationPolicy(default_max_chars=40))
    unknown = check_call(ToolCall(name="nope"), registry, settings)
    assert isinstance(unknown, ToolResult)
    assert unknown.truncated


def test_the_step_fills_in_the_tool_and_arguments_and_starts_the_clock(tmp_path: Path) -> None:
    state = _state(tmp_path, ToolCall(name="echo", arguments={"text": "x"}))
    before = time.monotonic()

    def after_validate(seen: CallState) -> ToolResult:
        assert seen.checked_tool().name == "echo"
        assert seen.arguments == {"text": "x"}
        assert seen.started >= before
        return ToolResult(
            call_id=seen.call.id, name="echo", status=ToolStatus.OK, content="went on"
        )

    assert validate(state, after_validate).content == "went on"


def test_the_step_answers_a_bad_call_without_going_on(tmp_path: Path) -> None:
    state = _state(tmp_path, ToolCall(name="echo", arguments={"txt": "x"}))
    result = validate(state, _never)
    assert result.error_type is ErrorType.INVALID_ARGUMENTS
    assert "- txt: unexpected argument" in result.content
    assert state.tool is None
