"""Running one call in this process: validate, execute within a time limit, truncate.

This is the per-call path that every execution goes through, locally (``toolpool call
--local``) and on a worker. Whatever happens, it returns a ``ToolResult``; nothing a tool
does escapes as an exception.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from executor.context import ToolContext, no_fence
from executor.contract import Tool
from executor.errors import (
    FenceError,
    InvalidArgumentsError,
    ToolError,
    ToolpoolError,
    UnknownToolError,
)
from executor.models import ErrorType, ToolCall, ToolResult, ToolStatus
from executor.registry import ToolRegistry
from executor.settings import Settings
from executor.truncation import truncate
from executor.workspace import Workspace

log = logging.getLogger(__name__)

# Time a tool that enforces its own limit (bash) gets beyond it to clean up and report.
CLEANUP_GRACE = 5.0

# Results that a lease lost while the call ran turns into lock_lost: success, and the error a
# tool raises when the loss sets the call's cancel flag.
_RESTATED_WHEN_LOST = (None, ErrorType.TOOL_ERROR)

KeepFullOutput = Callable[[ToolCall, str], "str | None"]


class Held(Protocol):
    """What a guard holds while a tool runs (the worker's guard holds a lock lease)."""

    def check_fence(self) -> None:
        """Raise ``FenceError`` once the call's side effects must no longer land."""

    @property
    def lost(self) -> bool:
        """True once the guard no longer protects the call."""

    @property
    def committed(self) -> bool:
        """True once a fence check passed: the tool's side effect landed under the guard."""


Guard = Callable[[Tool, ToolCall], AbstractContextManager[Held]]


@dataclass
class CallEnvironment:
    """Where calls run: the workspace, the settings and, on a worker, the lock guard.

    ``guard`` is entered after the arguments are valid and left when the tool is done: the
    worker passes one that takes the distributed lock (shared for concurrency-safe tools,
    exclusive for the rest). A ``ToolpoolError`` from entering it (no lock within the wait)
    becomes a ``lock_unavailable`` result. ``cancelled`` is set from outside to stop the call.
    """

    workspace: Workspace
    settings: Settings = field(default_factory=Settings)
    fence: Callable[[], None] = no_fence
    cancelled: threading.Event | None = None
    keep_full_output: KeepFullOutput | None = None
    guard: Guard | None = None


def time_limit(tool: Tool, arguments: dict[str, Any]) -> float:
    """Seconds the call may run: the tool's limit, or longer if its own timeout asks more."""
    own = arguments.get(tool.timeout_argument) if tool.timeout_argument else None
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return max(tool.timeout, float(own) + CLEANUP_GRACE)
    return tool.timeout


def check_call(
    call: ToolCall, registry: ToolRegistry, settings: Settings | None = None
) -> tuple[Tool, dict[str, Any]] | ToolResult:
    """The tool and validated arguments of ``call``, or the error result that answers it.

    The orchestrator runs this before enqueueing (a bad call costs no round trip) and the
    worker again before running (its registry has the last word).
    """
    started = time.monotonic()
    settings = settings or Settings()
    try:
        tool = registry.get(call.name)
    except UnknownToolError as exc:
        return _finish(
            call, None, settings, started, ErrorType.UNKNOWN_TOOL,
            f"{exc} Call one of the available tools instead.",
        )  # fmt: skip
    try:
        return tool, tool.validate(call.arguments)
    except InvalidArgumentsError as exc:
        listed = "\n".join(f"- {problem}" for problem in exc.problems)
        return _finish(
            call, tool, settings, started, ErrorType.INVALID_ARGUMENTS,
            f"Invalid arguments for tool {tool.name!r}:\n{listed}\n"
            "Fix the arguments and call the tool again.",
        )  # fmt: skip


def run_call(call: ToolCall, registry: ToolRegistry, env: CallEnvironment) -> ToolResult:
    """Execute ``call`` and return its result; never raises for anything the call does."""
    started = time.monotonic()
    checked = check_call(call, registry, env.settings)
    if isinstance(checked, ToolResult):
        return checked
    tool, arguments = checked
    if env.guard is None:
        return _execute(call, tool, arguments, env, started, env.fence)
    stack = contextlib.ExitStack()
    try:
        held = stack.enter_context(env.guard(tool, call))
    except ToolpoolError as exc:
        # Only a failure to enter the guard means the tool did not run.
        return _finish(
            call, tool, env.settings, started, ErrorType.LOCK_UNAVAILABLE,
            f"{tool.name!r} did not run: {exc} Try again later.",
        )  # fmt: skip
    try:
        result = _execute(call, tool, arguments, env, started, held.check_fence)
    finally:
        try:
            stack.close()
        except Exception:
            # The tool has run; failing to leave the guard must not change its answer.
            log.exception("toolpool: leaving the guard of call %s failed", call.id)
    if held.lost and result.error_type is ErrorType.CANCELLED:
        # The loss set the cancel flag before the tool started (its worker was paused or cut
        # off right after the grant): it did not run, and nobody cancelled it.
        return _finish(
            call, tool, env.settings, started, ErrorType.LOCK_UNAVAILABLE,
            f"{tool.name!r} did not run: its lock lease ended before the tool started (its "
            "worker was paused or cut off from Redis). Call it again.",
        )  # fmt: skip
    # A tool error may come from the loss itself (it cancels the call); the other errors
    # already say what happened, and a crash is a bug whose trace matters more.
    if held.lost and not held.committed and result.error_type in _RESTATED_WHEN_LOST:
        # Under a lost lease another call may have changed what this one saw or did. A tool
        # whose commit passed the fence (write_file, edit_file) landed under the lock: its
        # success stands.
        advice = (
            "Call it again." if tool.is_read_only
            else "Check its effects before calling it again."
        )  # fmt: skip
        ended = f" It ended with: {result.content[:300]}" if result.is_error else ""
        return _finish(
            call, tool, env.settings, started, ErrorType.LOCK_LOST,
            f"{tool.name!r} ran, but the lock was lost while it ran, so its result may be "
            f"inconsistent with concurrent changes. {advice}{ended}",
        )  # fmt: skip
    return result


def _execute(
    call: ToolCall,
    tool: Tool,
    arguments: dict[str, Any],
    env: CallEnvironment,
    started: float,
    fence: Callable[[], None],
) -> ToolResult:
    limit = time_limit(tool, arguments)
    context = ToolContext(
        workspace=env.workspace,
        settings=env.settings,
        call_id=call.id,
        tool_name=tool.name,
        deadline=time.monotonic() + limit,
        cancelled=env.cancelled or threading.Event(),
        fence=fence,
    )
    if context.cancelled.is_set():
        return _finish(call, tool, env.settings, started, ErrorType.CANCELLED,
                       f"{tool.name!r} did not run: the call was cancelled.")  # fmt: skip
    outcome = _Outcome()
    thread = threading.Thread(
        target=_invoke, args=(tool, context, arguments, outcome), name=f"tool-{call.id}",
        daemon=True,
    )  # fmt: skip
    thread.start()
    thread.join(limit)
    if thread.is_alive() and context.stop():
        # Its write landed just as the time ran out: the tool is only returning, and its
        # answer is the truth, where "stopped" would have the model redo a done write.
        thread.join(CLEANUP_GRACE)
    if thread.is_alive():
        landed = " after its write was committed" if context.committed else ""
        return _finish(
            call, tool, env.settings, started, ErrorType.TIMEOUT,
            f"Tool {tool.name!r} did not finish within {limit:g} s and was stopped{landed}. "
            "Try a smaller request.",
        )  # fmt: skip
    if outcome.error is not None:
        return _finish(call, tool, env.settings, started, *_classify(tool, outcome.error),
                       keep=env.keep_full_output)  # fmt: skip
    return _finish(call, tool, env.settings, started, None, _to_text(outcome.value),
                   keep=env.keep_full_output)  # fmt: skip


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None


def _invoke(tool: Tool, context: ToolContext, arguments: dict[str, Any], out: _Outcome) -> None:
    try:
        out.value = tool.invoke(context, arguments)
    except BaseException as exc:  # a tool calling sys.exit() must not end the worker
        out.error = exc


def _classify(tool: Tool, error: BaseException) -> tuple[ErrorType, str]:
    if isinstance(error, FenceError):
        return ErrorType.LOCK_LOST, str(error)
    if isinstance(error, ToolError):
        return ErrorType.TOOL_ERROR, str(error)
    return (
        ErrorType.UNEXPECTED_ERROR,
        f"Tool {tool.name!r} failed unexpectedly: {type(error).__name__}: {error}",
    )


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False, default=str)


def _finish(
    call: ToolCall,
    tool: Tool | None,
    settings: Settings,
    started: float,
    error_type: ErrorType | None,
    text: str,
    keep: KeepFullOutput | None = None,
) -> ToolResult:
    policy = settings.truncation
    limit = policy.limit_for(tool.max_result_chars if tool else None)
    note = None
    if len(text) > limit and keep is not None:
        note = keep(call, text)
    cut = truncate(text, limit, policy.head_ratio, note)
    return ToolResult(
        call_id=call.id,
        name=call.name,
        status=ToolStatus.OK if error_type is None else ToolStatus.ERROR,
        content=cut.text,
        truncated=cut.truncated,
        original_chars=cut.original_chars,
        dropped_chars=cut.dropped_chars,
        dropped_lines=cut.dropped_lines,
        error_type=error_type,
        error_message=None if error_type is None else truncate(text, 1000).text,
        duration_ms=round((time.monotonic() - started) * 1000, 3),
    )
