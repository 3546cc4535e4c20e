"""Calls as models send them: arguments that are not JSON (or not an object), calls that are no
calls, and tool names a letter off. Every call that has a name to answer to gets a result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from executor import ErrorType, Settings, ToolCall, ToolResult, ToolStatus
from executor.client import Executor, TurnError
from executor.wire import parse_call, read_events
from workers import builtin_registry
from workers.pipeline._validate import check_call
from workers.pool._process import run_worker, served_registry

# A comma missing between two arguments, as a model that lost track writes it.
MISSING_COMMA = '{"path": "note.md" "limit": 5}'
MISSING_COMMA_ERROR = (
    "arguments are not valid JSON: Expecting ',' delimiter: line 1 column 20 (char 19)"
)
# Arguments cut off mid-string, as a model stopped by its token limit leaves them.
TRUNCATED = '{"path": "no'
TRUNCATED_ERROR = (
    "arguments are not valid JSON: Unterminated string starting at: line 1 column 10 (char 9)"
)


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "note.md").write_text("a note\n")
    return Settings(redis_url=redis_url, workspace=root)


def _openai(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- parse_call ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (_openai("c1", "read_file", MISSING_COMMA), MISSING_COMMA_ERROR),
        (_openai("c1", "read_file", TRUNCATED), TRUNCATED_ERROR),
        (_openai("c1", "read_file", "[1,2]"), "arguments must be a JSON object, not an array"),
        (_openai("c1", "read_file", '"a.txt"'), "arguments must be a JSON object, not a string"),
        (_openai("c1", "read_file", "null"), "arguments must be a JSON object, not null"),
        (_openai("c1", "read_file", "[" * 100_000), "arguments are not valid JSON: maximum"),
        ({"id": "c1", "name": "read_file", "arguments": "{oops"}, "arguments are not valid JSON"),
        ({"id": "c1", "name": "read_file", "arguments": [1, 2]}, "must be a JSON object, not an"),
        ({"type": "tool_use", "id": "c1", "name": "read_file", "input": 7}, "not a number"),
    ],
)
def test_arguments_that_cannot_be_read_keep_the_call_and_say_why(
    item: dict[str, Any], problem: str
) -> None:
    call = parse_call(item)
    assert (call.id, call.name, call.arguments) == ("c1", "read_file", {})
    assert call.arguments_error is not None
    assert problem in call.arguments_error


def test_readable_arguments_have_no_error() -> None:
    for item in (_openai("c1", "read_file", '{"path": "a"}'), _openai("c2", "read_file", " ")):
        call = parse_call(item)
        assert call.arguments_error is None


def test_the_mark_is_no_part_of_the_wire_format() -> None:
    call = parse_call(_openai("c1", "read_file", TRUNCATED))
    assert call.model_dump() == {"id": "c1", "name": "read_file", "arguments": {}}
    assert set(ToolCall.model_fields) == {"id", "name", "arguments"}
    assert ToolCall.model_validate_json(call.model_dump_json()).arguments_error is None
    with pytest.raises(ValidationError):
        call.name = "bash"  # type: ignore[misc]  # frozen
    with pytest.raises(ValidationError, match="arguments are not valid JSON: Unterminated"):
        ToolCall(name="read_file", arguments=TRUNCATED)


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ({"id": "c1", "arguments": {}}, "it has no tool name"),
        ({"id": "c1", "name": "", "arguments": {}}, "it has no tool name"),
        (_openai("c1", None, "{}"), "it has no tool name"),  # type: ignore[arg-type]
        ({"id": "c1", "name": "read_file", "args": {}}, "unexpected key 'args'"),
        ({"id": 7, "name": "read_file"}, "'id': Input should be a valid string"),
        (["read_file"], "it is an array, not an object"),
    ],
)
def test_what_is_no_call_at_all_is_one_plain_error(item: Any, said: str) -> None:
    with pytest.raises(ValueError, match="A call is") as info:
        parse_call(item)
    message = str(info.value)
    assert message.startswith(said + '. A call is {"id", "name", "arguments"}')
    assert "pydantic" not in message
    assert "\n" not in message


# -- the client answers them, and runs the rest of the turn ----------------------------------


def test_a_call_with_unreadable_arguments_is_answered_and_the_turn_runs(
    settings: Settings, redis_url: str
) -> None:
    asked: list[str] = []

    def approve(call: ToolCall, tool: object) -> bool:
        asked.append(call.id)
        return True

    calls: list[Any] = [
        _openai("comma", "read_file", MISSING_COMMA),
        {"id": "calc", "name": "calculator", "arguments": {"expression": "6*7"}},
        _openai("array", "read_file", "[1,2]"),
        {"type": "tool_use", "id": "cut", "name": "write_file", "input": TRUNCATED},
        _openai("read", "read_file", '{"path": "note.md"}'),
        {"id": "write", "name": "write_file", "arguments": {"path": "w.txt", "content": "w"}},
    ]
    with Executor(settings=settings, registry=builtin_registry(), approve=approve) as executor:
        turn = executor.submit(calls)
        run_worker(redis_url, settings, builtin_registry(), burst=True)
        results = executor.collect(turn, timeout=10)
        started = {
            item.call_id
            for _, item in read_events(executor.client, executor.keys)
            if item.event == "tool_execution_started"
        }
    assert [r.call_id for r in results] == ["comma", "calc", "array", "cut", "read", "write"]
    assert [r.error_type for r in results] == [
        ErrorType.INVALID_ARGUMENTS,
        None,
        ErrorType.INVALID_ARGUMENTS,
        ErrorType.INVALID_ARGUMENTS,
        None,
        None,
    ]
    assert results[0].content == (
        f"Invalid arguments for tool 'read_file':\n- {MISSING_COMMA_ERROR}\n"
        "Fix the arguments and call the tool again."
    )
    assert results[2].content == (
        "Invalid arguments for tool 'read_file':\n- arguments must be a JSON object, not an "
        "array\nFix the arguments and call the tool again."
    )
    assert f"- {TRUNCATED_ERROR}\n" in results[3].content
    assert (results[3].name, results[3].status) == ("write_file", ToolStatus.ERROR)
    assert results[1].content == "6*7 = 42"
    assert results[4].content == "a note\n"
    assert (settings.worker.workspace / "w.txt").read_text() == "w"
    # Answered by the client: never enqueued, never run, never put to approval.
    assert sorted(turn.plan.job_ids) == [1, 4, 5]
    assert started == {"calc", "read", "write"}
    assert asked == ["write"]


def test_run_answers_unreadable_arguments_without_raising(
    settings: Settings, redis_url: str
) -> None:
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        # Every call is answered by the client: nothing to wait for, nothing to drain.
        results = executor.run(
            [_openai("a", "read_file", TRUNCATED), _openai("b", "calculator", "[]")], timeout=10
        )
        assert executor.queue.count == 0
    assert [r.error_type for r in results] == [ErrorType.INVALID_ARGUMENTS] * 2
    assert all(isinstance(r, ToolResult) for r in results)


def test_a_call_with_no_name_fails_the_turn_before_anything_is_submitted(
    settings: Settings,
) -> None:
    calls: list[Any] = [
        {"id": "calc", "name": "calculator", "arguments": {"expression": "1"}},
        {"id": "nameless", "arguments": {"path": "a"}},
    ]
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        with pytest.raises(TurnError) as info:
            executor.submit(calls)
        assert executor.queue.count == 0
        assert not executor.client.keys("*")
    assert str(info.value).startswith("Call 2 is not a tool call: it has no tool name.")


# -- a tool name a letter off ------------------------------------------------------------------


def test_a_misspelt_tool_gets_the_same_suggestion_from_client_and_worker(
    settings: Settings,
) -> None:
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        (client_answer,) = executor.run([ToolCall(id="t", name="read_fil")], timeout=10)
    worker_answer = check_call(ToolCall(id="t", name="read_fil"), builtin_registry())
    assert isinstance(worker_answer, ToolResult)
    for answer in (client_answer, worker_answer):
        assert answer.error_type is ErrorType.UNKNOWN_TOOL
        assert answer.content.startswith("Unknown tool 'read_fil'. Available tools: bash, ")
        assert answer.content.endswith(
            "write_file. Did you mean 'read_file'? Call one of the available tools instead."
        )
    assert client_answer.content == worker_answer.content


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("READ_FILE", "read_file"),
        ("functions.grep", "grep"),
        ("writefile", "write_file"),
        ("nope", None),
        ("ls", None),
    ],
)
def test_the_suggestion_is_only_a_close_name(name: str, meant: str | None) -> None:
    answer = check_call(ToolCall(name=name), builtin_registry())
    assert isinstance(answer, ToolResult)
    hint = f"Did you mean {meant!r}?" if meant else "Did you mean"
    assert (hint in answer.content) is (meant is not None)
    assert "Available tools: bash, calculator," in answer.content


def test_a_withheld_tool_is_not_given_another_name() -> None:
    registry = served_registry(builtin_registry(), read_only=True)
    answer = check_call(ToolCall(name="edit_file"), registry)
    assert isinstance(answer, ToolResult)
    assert answer.error_type is ErrorType.UNKNOWN_TOOL
    assert "edit_file is not served by this worker" in answer.content
    assert "Did you mean" not in answer.content


def test_json_error_positions_are_what_python_says() -> None:
    # The texts above are json's own; this pins them to the running Python.
    for text, said in ((MISSING_COMMA, MISSING_COMMA_ERROR), (TRUNCATED, TRUNCATED_ERROR)):
        with pytest.raises(json.JSONDecodeError) as info:
            json.loads(text)
        assert said == f"arguments are not valid JSON: {info.value}"
