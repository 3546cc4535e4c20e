"""Run: the tool in a thread, within its time limit; nothing it does escapes.

The threads are reused (``workers.pipeline._tool_threads``); a tool still running at its
limit keeps its thread, and the next call gets another.

The last step: it answers with the tool's output (or its error), truncated, the full output
offered to the keeper when it is cut; or with a timeout when the tool does not return in time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from executor import FenceError, ToolCancelledError, ToolError, ToolTimeoutError
from executor import _texts as texts
from executor.contract import Tool, ToolContext
from executor.wire import ErrorType, ToolResult
from workers.pipeline._chain import CallState
from workers.pipeline._tool_threads import ToolThreads
from workers.pipeline._truncate import finish

# Time a tool that enforces its own limit (bash) gets beyond it to clean up and report.
CLEANUP_GRACE = 5.0

# A tool still running after this long has its start announced (the events a guard left,
# ``CallState.announce``); a quicker one's go with its answer, one round trip fewer.
ANNOUNCE_AFTER_S = 0.005

_THREADS = ToolThreads()


def time_limit(tool: Tool, arguments: dict[str, Any]) -> float:
    """Seconds the call may run: the tool's limit, or longer if its own timeout asks more."""
    own = arguments.get(tool.timeout_argument) if tool.timeout_argument else None
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return max(tool.timeout, float(own) + CLEANUP_GRACE)
    return tool.timeout


def run(state: CallState) -> ToolResult:
    """Step (the last): run the tool and answer with what it returned or raised."""
    call, tool, arguments = state.call, state.checked_tool(), state.arguments
    limit = time_limit(tool, arguments)
    own = None if tool.settings_class is None else state.settings.tool(tool.settings_class)
    context = ToolContext(
        workspace=state.workspace,
        settings=own,
        call_id=call.id,
        tool_name=tool.name,
        deadline=time.monotonic() + limit,
        cancelled=state.cancelled,
        fence=state.held.check_fence if state.held is not None else state.fence,
        shell=state.shell,
        session=state.session,
        worker_folders=state.settings.worker.folders,
    )
    if context.cancelled.is_set():
        return finish(
            call,
            tool,
            state.settings,
            state.started,
            ErrorType.CANCELLED,
            texts.turn_cancelled(tool.name),
        )
    outcome = _Outcome()
    task = _THREADS.start(lambda: _invoke(tool, context, arguments, outcome))
    first = min(limit, ANNOUNCE_AFTER_S)
    done = task.wait(first)
    if not done:
        state.announce()
        done = task.wait(limit - first)
    if not done and context.stop():
        # Its write landed just as the time ran out: the tool is only returning, and its
        # answer is the truth, where "stopped" would have the model redo a done write.
        done = task.wait(CLEANUP_GRACE)
    if not done:
        return finish(
            call,
            tool,
            state.settings,
            state.started,
            ErrorType.TIMEOUT,
            texts.time_limit(tool.name, limit, context.committed),
        )
    keep = state.keep_full_output
    if outcome.error is not None:
        lost = state.held is not None and state.held.lost
        return finish(
            call,
            tool,
            state.settings,
            state.started,
            *_classify(tool, outcome.error, lease_lost=lost),
            keep=keep,
        )
    return finish(
        call, tool, state.settings, state.started, None, _to_text(outcome.value), keep=keep
    )


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None


def _invoke(tool: Tool, context: ToolContext, arguments: dict[str, Any], out: _Outcome) -> None:
    try:
        out.value = tool.invoke(context, arguments)
    except BaseException as exc:  # a tool calling sys.exit() must not end the worker
        out.error = exc


def _classify(tool: Tool, error: BaseException, *, lease_lost: bool) -> tuple[ErrorType, str]:
    """The error kind of what a tool raised. A tool stopped by a lost lease (the loss sets
    the cancel flag) stays a ``tool_error``: ``restate`` says it as the lock's loss."""
    if isinstance(error, FenceError):
        return ErrorType.LOCK_LOST, str(error)
    if isinstance(error, ToolTimeoutError):
        return ErrorType.TIMEOUT, str(error)
    if isinstance(error, ToolCancelledError) and not lease_lost:
        return ErrorType.CANCELLED, str(error)
    if isinstance(error, ToolError):
        return ErrorType.TOOL_ERROR, str(error)
    return ErrorType.UNEXPECTED_ERROR, texts.tool_crashed(tool.name, error)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False, default=str)
