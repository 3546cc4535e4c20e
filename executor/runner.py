"""Running one call in this process: validate, execute within a time limit, truncate.

This is the per-call path that every execution goes through, locally (``toolpool call
--local``) and on a worker. Whatever happens, it returns a ``ToolResult``; nothing a tool
does escapes as an exception.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from executor.context import ToolContext, _no_fence
from executor.contract import Tool
from executor.errors import (
    FenceError,
    InvalidArgumentsError,
    ToolError,
    UnknownToolError,
)
from executor.models import ErrorType, ToolCall, ToolResult, ToolStatus
from executor.registry import ToolRegistry
from executor.settings import Settings
from executor.truncation import truncate
from executor.workspace import Workspace

# Time a tool that enforces its own limit (bash) gets beyond it to clean up and report.
CLEANUP_GRACE = 5.0

KeepFullOutput = Callable[[ToolCall, str], "str | None"]


@dataclass
class CallEnvironment:
    """Where calls run: the workspace, the settings and, under the lock, the fence."""

    workspace: Workspace
    settings: Settings = field(default_factory=Settings)
    fence: Callable[[], None] = _no_fence
    cancelled: threading.Event | None = None
    keep_full_output: KeepFullOutput | None = None


def time_limit(tool: Tool, arguments: dict[str, Any]) -> float:
    """Seconds the call may run: the tool's limit, or longer if its own timeout asks more."""
    own = arguments.get(tool.timeout_argument) if tool.timeout_argument else None
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return max(tool.timeout, float(own) + CLEANUP_GRACE)
    return tool.timeout


def run_call(call: ToolCall, registry: ToolRegistry, env: CallEnvironment) -> ToolResult:
    """Execute ``call`` and return its result; never raises for anything the call does."""
    started = time.monotonic()
    try:
        tool = registry.get(call.name)
    except UnknownToolError as exc:
        return _finish(
            call, None, env, started, ErrorType.UNKNOWN_TOOL,
            f"{exc} Call one of the available tools instead.",
        )  # fmt: skip
    try:
        arguments = tool.validate(call.arguments)
    except InvalidArgumentsError as exc:
        listed = "\n".join(f"- {problem}" for problem in exc.problems)
        return _finish(
            call, tool, env, started, ErrorType.INVALID_ARGUMENTS,
            f"Invalid arguments for tool {tool.name!r}:\n{listed}\n"
            "Fix the arguments and call the tool again.",
        )  # fmt: skip
    limit = time_limit(tool, arguments)
    context = ToolContext(
        workspace=env.workspace,
        settings=env.settings,
        call_id=call.id,
        tool_name=tool.name,
        deadline=started + limit,
        cancelled=env.cancelled or threading.Event(),
        fence=env.fence,
    )
    outcome = _Outcome()
    thread = threading.Thread(
        target=_invoke, args=(tool, context, arguments, outcome), name=f"tool-{call.id}",
        daemon=True,
    )  # fmt: skip
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        context.cancelled.set()
        return _finish(
            call, tool, env, started, ErrorType.TIMEOUT,
            f"Tool {tool.name!r} did not finish within {limit:g} s and was stopped. "
            "Try a smaller request.",
        )  # fmt: skip
    if outcome.error is not None:
        return _finish(call, tool, env, started, *_classify(tool, outcome.error))
    return _finish(call, tool, env, started, None, _to_text(outcome.value))


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
    env: CallEnvironment,
    started: float,
    error_type: ErrorType | None,
    text: str,
) -> ToolResult:
    policy = env.settings.truncation
    limit = policy.limit_for(tool.max_result_chars if tool else None)
    note = None
    if len(text) > limit and env.keep_full_output is not None:
        note = env.keep_full_output(call, text)
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
