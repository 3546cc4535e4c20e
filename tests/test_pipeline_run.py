"""Run: the tool in its own thread within its time limit; what it returns or raises is answered."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from executor import (
    ErrorType,
    FenceError,
    Settings,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolStatus,
    TruncationPolicy,
)
from executor.contract import Workspace
from workers.pipeline._chain import CallState
from workers.pipeline._run import CLEANUP_GRACE, run, time_limit

registry = ToolRegistry()
started = threading.Event()


@registry.tool
def say(text: str) -> str:
    """Say text."""
    started.set()
    return text


@registry.tool
def fail(kind: str) -> str:
    """Fail in the way asked."""
    if kind == "tool":
        raise ToolError("known problem")
    if kind == "fence":
        raise FenceError("fence refused")
    raise KeyError(kind)


@registry.tool(timeout=0.1)
def hang(ctx: ToolContext) -> str:
    """Wait until stopped."""
    ctx.cancelled.wait(30)
    return "late"


@registry.tool
def fenced(ctx: ToolContext) -> str:
    """Check the fence."""
    ctx.check_fence()
    return "passed"


@registry.tool(timeout=10.0, timeout_argument="seconds")
def waits(seconds: float = 0) -> str:
    """Declare its own timeout."""
    return "ok"


class _Held:
    def __init__(self) -> None:
        self.checked = 0

    def check_fence(self) -> None:
        self.checked += 1

    @property
    def lost(self) -> bool:
        return False

    @property
    def committed(self) -> bool:
        return self.checked > 0


def _state(tmp_path: Path, chosen: Tool, **arguments: Any) -> CallState:
    return CallState(
        call=ToolCall(id="c", name=chosen.name, arguments=arguments),
        registry=registry,
        workspace=Workspace(tmp_path),
        settings=Settings(),
        tool=chosen,
        arguments=arguments,
    )


def test_the_tools_output_is_the_answer(tmp_path: Path) -> None:
    result = run(_state(tmp_path, say, text="hi"))
    assert (result.status, result.content, result.error_type) == (ToolStatus.OK, "hi", None)


@pytest.mark.parametrize(
    ("kind", "error_type", "text"),
    [
        ("tool", ErrorType.TOOL_ERROR, "known problem"),
        ("fence", ErrorType.LOCK_LOST, "fence refused"),
        ("other", ErrorType.UNEXPECTED_ERROR, "Tool 'fail' failed unexpectedly: KeyError: 'other'"),
    ],
)
def test_what_the_tool_raises_is_classified(
    tmp_path: Path, kind: str, error_type: ErrorType, text: str
) -> None:
    result = run(_state(tmp_path, fail, kind=kind))
    assert (result.error_type, result.content) == (error_type, text)


def test_a_cancelled_run_does_not_start_the_tool(tmp_path: Path) -> None:
    started.clear()
    state = _state(tmp_path, say, text="hi")
    state.cancelled.set()
    result = run(state)
    assert result.error_type is ErrorType.CANCELLED
    assert result.content == "'say' did not run: its turn was cancelled."
    assert not started.is_set()


def test_a_tool_past_its_limit_is_stopped_through_the_runs_cancel_flag(tmp_path: Path) -> None:
    state = _state(tmp_path, hang)
    result = run(state)
    assert result.error_type is ErrorType.TIMEOUT
    assert "did not finish within 0.1 s and was stopped" in result.content
    assert state.cancelled.is_set()


def test_a_held_guards_fence_replaces_the_states(tmp_path: Path) -> None:
    def refuse() -> None:
        raise FenceError("the unguarded fence")

    state = _state(tmp_path, fenced)
    state.fence = refuse
    assert run(state).error_type is ErrorType.LOCK_LOST
    held = _Held()
    state.held = held
    assert run(state).content == "passed"
    assert held.checked == 1


def test_only_the_tools_own_output_is_offered_to_the_keeper(tmp_path: Path) -> None:
    kept: list[str] = []

    def keep(call: ToolCall, text: str) -> str:
        kept.append(call.id)
        return "kept"

    settings = Settings(truncation=TruncationPolicy(default_max_chars=10))
    state = _state(tmp_path, say, text="x" * 50)
    state.settings, state.keep_full_output = settings, keep
    assert run(state).truncated
    assert kept == ["c"]
    timed_out = _state(tmp_path, hang)
    timed_out.settings, timed_out.keep_full_output = settings, keep
    assert run(timed_out).truncated  # the timeout message is cut, not kept
    assert kept == ["c"]


def test_time_limit_is_the_tools_or_its_own_timeout_plus_grace() -> None:
    assert time_limit(waits, {}) == 10.0
    assert time_limit(waits, {"seconds": 1}) == 10.0
    assert time_limit(waits, {"seconds": 30}) == 30 + CLEANUP_GRACE
    assert time_limit(waits, {"seconds": True}) == 10.0
    assert time_limit(say, {"text": "x"}) == say.timeout
