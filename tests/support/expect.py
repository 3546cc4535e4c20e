"""Assertions on ToolResults shared by the tool tests."""

from __future__ import annotations

from executor import ErrorType, ToolResult, ToolStatus


def ok(result: ToolResult) -> str:
    """The content of a successful result; fails the test with the content otherwise."""
    assert result.status is ToolStatus.OK, result.content
    return result.content


def tool_error(result: ToolResult) -> str:
    """The content of a result that failed with a ToolError (an expected failure)."""
    assert result.status is ToolStatus.ERROR, result.content
    assert result.error_type is ErrorType.TOOL_ERROR, result.error_type
    return result.content
