"""Truncate: every answer the steps give becomes a ``ToolResult`` cut to the policy.

Whichever step answers (a bad argument, a lock not had, the tool's own output, a lost lease),
its text goes through ``finish``: head and tail kept, the middle dropped with a marker. Only
the tool's own output is offered to the keeper (``keep``) when it is cut.
"""

from __future__ import annotations

import time

from executor import Settings, truncate
from executor.contract import Tool
from executor.wire import ErrorType, ToolCall, ToolResult, ToolStatus
from workers.pipeline._keep import KeepFullOutput


def finish(
    call: ToolCall,
    tool: Tool | None,
    settings: Settings,
    started: float,
    error_type: ErrorType | None,
    text: str,
    keep: KeepFullOutput | None = None,
) -> ToolResult:
    """The result of ``call`` saying ``text``: cut to the tool's limit, timed from ``started``."""
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
