"""The model-facing answers to a call that cannot run as given: one fixed text per class.

The client answers them before enqueueing (no round trip) and the worker again before running
(its registry has the last word); both use these texts, so a model reads the same either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from executor._errors import UnknownToolError
from executor.wire._models import ErrorType, ToolCall, ToolResult


def unknown_tool_text(exc: UnknownToolError) -> str:
    """What the model reads for a tool that is not served: the tools it can call instead."""
    return f"{exc} Call one of the available tools instead."


def invalid_arguments_text(tool_name: str, problems: Sequence[str]) -> str:
    """What the model reads for arguments that do not fit: each problem, then what to do."""
    listed = "\n".join(f"- {problem}" for problem in problems)
    return (
        f"Invalid arguments for tool {tool_name!r}:\n{listed}\n"
        "Fix the arguments and call the tool again."
    )


def unknown_tool(call: ToolCall, exc: UnknownToolError) -> ToolResult:
    """The ``unknown_tool`` result for ``call``."""
    return ToolResult.failure(call.id, call.name, ErrorType.UNKNOWN_TOOL, unknown_tool_text(exc))


def invalid_arguments(call: ToolCall, problems: Sequence[str]) -> ToolResult:
    """The ``invalid_arguments`` result for ``call``."""
    text = invalid_arguments_text(call.name, problems)
    return ToolResult.failure(call.id, call.name, ErrorType.INVALID_ARGUMENTS, text)
