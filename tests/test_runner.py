"""The per-call path: every outcome is a ToolResult with a model-facing message."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from pydantic import ValidationError

from executor import (
    ErrorType,
    FenceError,
    Settings,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolStatus,
    TruncationPolicy,
    tool,
)
from executor.contract import Workspace
from workers.pipeline._runner import CallEnvironment, run_call

registry = ToolRegistry()
release_slow = threading.Event()


@registry.tool(concurrency_safe=True, read_only=True)
def echo(text: str, times: int = 1) -> str:
    """Repeat text."""
    return text * times


@registry.tool
def structured() -> dict[str, object]:
    """Return a dict."""
    return {"a": 1, "ü": [True, None]}


@registry.tool
def expected_failure(path: str) -> str:
    """Fail the way tools report known problems."""
    raise ToolError(f"File not found: {path}")


@registry.tool
def crash() -> str:
    """Fail with a bug."""
    return str(1 / 0)


@registry.tool
def exits() -> str:
    """Call sys.exit, which must not end the worker."""
    sys.exit(3)


@registry.tool(timeout=0.2)
def slow(ctx: ToolContext) -> str:
    """Wait until told or cancelled."""
    ctx.cancelled.wait(30)
    release_slow.set()
    return "late"


@registry.tool(max_result_chars=50)
def fenced(ctx: ToolContext) -> str:
    """Commit through the fence."""
    ctx.check_fence()
    return "committed"


def test_success_keeps_call_id_and_times_the_call(workspace: Workspace) -> None:
    call = ToolCall(id="c1", name="echo", arguments={"text": "hi", "times": 2})
    result = run_call(call, registry, CallEnvironment(workspace=workspace))
    assert (result.call_id, result.name, result.status, result.content) == (
        "c1",
        "echo",
        ToolStatus.OK,
        "hihi",
    )
    assert result.error_type is None
    assert not result.truncated
    assert result.duration_ms > 0


def test_non_string_results_become_json(workspace: Workspace) -> None:
    result = run_call(ToolCall(name="structured"), registry, CallEnvironment(workspace=workspace))
    assert result.content == '{"a": 1, "ü": [true, null]}'


def test_unknown_tool_lists_the_tools(workspace: Workspace) -> None:
    result = run_call(ToolCall(name="nope"), registry, CallEnvironment(workspace=workspace))
    assert result.error_type is ErrorType.UNKNOWN_TOOL
    assert result.content.startswith("Unknown tool 'nope'. Available tools: crash, echo,")
    assert result.content.endswith("Call one of the available tools instead.")


def test_invalid_arguments_list_each_problem_and_ask_for_a_fix(workspace: Workspace) -> None:
    call = ToolCall(name="echo", arguments={"times": "many", "txt": "x"})
    result = run_call(call, registry, CallEnvironment(workspace=workspace))
    assert result.error_type is ErrorType.INVALID_ARGUMENTS
    assert result.content == (
        "Invalid arguments for tool 'echo':\n"
        "- times: 'many' is not of type 'integer'\n"
        "- text: Field required\n"
        "- txt: unexpected argument\n"
        "Fix the arguments and call the tool again."
    )


def test_arguments_may_arrive_as_a_json_string() -> None:
    assert ToolCall(name="echo", arguments='{"text": "a"}').arguments == {"text": "a"}
    assert ToolCall(name="echo", arguments="").arguments == {}
    with pytest.raises(ValidationError, match="arguments are not valid JSON"):
        ToolCall(name="echo", arguments="{not json")


def test_tool_error_message_is_shown_as_is(workspace: Workspace) -> None:
    call = ToolCall(name="expected_failure", arguments={"path": "a.txt"})
    result = run_call(call, registry, CallEnvironment(workspace=workspace))
    assert (result.status, result.error_type) == (ToolStatus.ERROR, ErrorType.TOOL_ERROR)
    assert result.content == "File not found: a.txt"
    assert result.error_message == "File not found: a.txt"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("crash", "Tool 'crash' failed unexpectedly: ZeroDivisionError: division by zero"),
        ("exits", "Tool 'exits' failed unexpectedly: SystemExit: 3"),
    ],
)
def test_unexpected_errors_never_escape(workspace: Workspace, name: str, text: str) -> None:
    result = run_call(ToolCall(name=name), registry, CallEnvironment(workspace=workspace))
    assert result.error_type is ErrorType.UNEXPECTED_ERROR
    assert result.content == text


def test_timeout_returns_in_time_and_cancels_the_tool(workspace: Workspace) -> None:
    started = time.monotonic()
    result = run_call(ToolCall(name="slow"), registry, CallEnvironment(workspace=workspace))
    assert time.monotonic() - started < 5
    assert result.error_type is ErrorType.TIMEOUT
    assert "did not finish within 0.2 s" in result.content
    assert release_slow.wait(5), "the tool was not told to stop"


def test_lost_fence_is_reported_as_lock_lost(workspace: Workspace) -> None:
    def lost() -> None:
        raise FenceError("The lock was lost; the write was not committed.")

    result = run_call(
        ToolCall(name="fenced"), registry, CallEnvironment(workspace=workspace, fence=lost)
    )
    assert result.error_type is ErrorType.LOCK_LOST
    assert "not committed" in result.content


def test_output_is_cut_to_the_policy_and_the_full_text_can_be_kept(workspace: Workspace) -> None:
    kept: dict[str, str] = {}

    def keep(call: ToolCall, text: str) -> str:
        kept[call.id] = text
        return f"full output: {call.id}"

    settings = Settings(truncation=TruncationPolicy(default_max_chars=100, head_ratio=0.5))
    call = ToolCall(id="big", name="echo", arguments={"text": "0123456789", "times": 50})
    env = CallEnvironment(workspace=workspace, settings=settings, keep_full_output=keep)
    result = run_call(call, registry, env)
    assert result.truncated
    assert (result.original_chars, result.dropped_chars, result.dropped_lines) == (500, 400, 1)
    assert result.content.startswith("0123456789" * 5)
    assert result.content.endswith("0123456789" * 5)
    assert "[400 characters, 1 line dropped; full output: big]" in result.content
    assert kept == {"big": "0123456789" * 50}


def test_per_tool_limit_applies(workspace: Workspace) -> None:
    @tool(max_result_chars=10)
    def wordy() -> str:
        """Talk a lot."""
        return "w" * 1000

    result = run_call(
        ToolCall(name="wordy"), ToolRegistry([wordy]), CallEnvironment(workspace=workspace)
    )
    assert result.dropped_chars == 990


class _Guard:
    """A guard as the worker's, without Redis: scripted loss, commit and exit failure."""

    def __init__(self, *, lose: bool = False, fail_exit: bool = False) -> None:
        self.lose = lose
        self.fail_exit = fail_exit
        self.committed = False

    def __call__(self, tool: object, call: ToolCall) -> _Guard:
        return self

    def __enter__(self) -> _Guard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.fail_exit:
            raise ToolError("could not release")

    def check_fence(self) -> None:
        self.committed = True

    @property
    def lost(self) -> bool:
        return self.lose


def test_a_guard_that_fails_on_exit_does_not_turn_a_run_call_into_did_not_run(
    workspace: Workspace,
) -> None:
    env = CallEnvironment(workspace=workspace, guard=_Guard(fail_exit=True))
    result = run_call(ToolCall(name="echo", arguments={"text": "ran"}), registry, env)
    assert (result.status, result.content) == (ToolStatus.OK, "ran")


def test_a_commit_that_passed_the_fence_keeps_its_success_when_the_lock_is_lost_later(
    workspace: Workspace,
) -> None:
    env = CallEnvironment(workspace=workspace, guard=_Guard(lose=True))
    result = run_call(ToolCall(name="fenced"), registry, env)
    assert (result.status, result.content) == (ToolStatus.OK, "committed")


def test_a_lost_lock_without_a_commit_asks_to_check_effects_or_to_read_again(
    workspace: Workspace,
) -> None:
    env = CallEnvironment(workspace=workspace, guard=_Guard(lose=True))
    read = run_call(ToolCall(name="echo", arguments={"text": "x"}), registry, env)
    assert read.error_type is ErrorType.LOCK_LOST
    assert read.content.endswith("Call it again.")
    wrote = run_call(ToolCall(name="crash"), registry, env)
    assert wrote.error_type is ErrorType.UNEXPECTED_ERROR  # errors stay as they are
    ran = run_call(ToolCall(name="structured"), registry, env)
    assert ran.error_type is ErrorType.LOCK_LOST
    assert ran.content.endswith("Check its effects before calling it again.")


def test_a_tool_error_under_a_lost_lock_is_answered_lock_lost_with_the_error(
    workspace: Workspace,
) -> None:
    # The loss cancels the call, so a tool's error may be the loss's doing: say both.
    env = CallEnvironment(workspace=workspace, guard=_Guard(lose=True))
    result = run_call(ToolCall(name="expected_failure", arguments={"path": "a"}), registry, env)
    assert result.error_type is ErrorType.LOCK_LOST
    assert "the lock was lost while it ran" in result.content
    assert result.content.endswith("It ended with: File not found: a")


def test_a_call_whose_lease_ended_before_the_tool_started_did_not_run(
    workspace: Workspace,
) -> None:
    cancelled = threading.Event()
    cancelled.set()  # what the loss of the lease does, here before the tool starts
    env = CallEnvironment(workspace=workspace, guard=_Guard(lose=True), cancelled=cancelled)
    result = run_call(ToolCall(name="structured"), registry, env)
    assert result.error_type is ErrorType.LOCK_UNAVAILABLE
    assert result.content == (
        "'structured' did not run: its lock lease ended before the tool started (its worker "
        "was paused or cut off from Redis). Call it again."
    )
