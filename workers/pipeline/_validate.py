"""Validate: a job's payload, then the call's tool and arguments.

The orchestrator checks a call before enqueueing it (a bad call costs no round trip); the
worker checks it again before running it, since its registry has the last word.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from executor import InvalidArgumentsError, Settings, UnknownToolError
from executor.contract import Tool, ToolRegistry
from executor.wire import (
    CallJob,
    ErrorType,
    ToolCall,
    ToolResult,
    invalid_arguments_text,
    unknown_tool_text,
)
from workers.pipeline._chain import CallState, Proceed
from workers.pipeline._truncate import finish

log = logging.getLogger(__name__)


def parse_job(payload: dict[str, Any]) -> CallJob:
    """The ``CallJob`` in a job's payload; ``ValueError`` (the RQ job fails) if it is none."""
    try:
        return CallJob.model_validate(payload)
    except ValidationError as exc:
        # Only someone writing jobs by hand gets here; there is no call id to answer to.
        log.error("toolpool: refusing a malformed job payload: %s", exc)
        raise ValueError(f"Malformed toolpool job payload: {exc}") from None


def check_call(
    call: ToolCall, registry: ToolRegistry, settings: Settings | None = None
) -> tuple[Tool, dict[str, Any]] | ToolResult:
    """The tool and validated arguments of ``call``, or the error result that answers it.

    The answers read as the orchestrator's, which checks the call before enqueueing it
    against the published catalog; here the worker's own registry has the last word.
    """
    started = time.monotonic()
    settings = settings or Settings()
    try:
        tool = registry.get(call.name)
    except UnknownToolError as exc:
        return finish(
            call,
            None,
            settings,
            started,
            ErrorType.UNKNOWN_TOOL,
            unknown_tool_text(exc),
        )
    try:
        return tool, tool.validate(call.arguments)
    except InvalidArgumentsError as exc:
        return finish(
            call,
            tool,
            settings,
            started,
            ErrorType.INVALID_ARGUMENTS,
            invalid_arguments_text(tool.name, exc.problems),
        )


def validate(state: CallState, proceed: Proceed) -> ToolResult:
    """Step: find the tool and check the arguments; a call that fails is answered here.

    The run's clock starts here: a result's ``duration_ms`` counts the wait for the lock.
    """
    state.started = time.monotonic()
    checked = check_call(state.call, state.registry, state.settings)
    if isinstance(checked, ToolResult):
        return checked
    state.tool, state.arguments = checked
    return proceed(state)
