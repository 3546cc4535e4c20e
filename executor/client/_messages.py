"""Tool results as the messages LLM APIs expect back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from executor.wire import ToolResult


def openai_tool_messages(results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    """One ``{"role": "tool", ...}`` message per result, for the Chat Completions API."""
    return [
        {"role": "tool", "tool_call_id": result.call_id, "content": result.content}
        for result in results
    ]


def anthropic_tool_results(results: Sequence[ToolResult]) -> dict[str, Any]:
    """One user message with a ``tool_result`` block per result, for the Messages API."""
    return {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": result.call_id,
                "content": result.content,
                "is_error": result.is_error,
            }
            for result in results
        ],
    }
