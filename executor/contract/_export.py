"""Tool schemas in the formats model APIs take: OpenAI, Anthropic and MCP."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from executor.contract._info import ToolInfo
from executor.contract._tool import Tool

Described = Tool | ToolInfo

SchemaFormat = Literal["openai", "anthropic", "mcp"]
FORMATS: tuple[SchemaFormat, ...] = ("openai", "anthropic", "mcp")


def to_openai(tool: Described) -> dict[str, Any]:
    """An OpenAI Chat Completions function tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def to_anthropic(tool: Described) -> dict[str, Any]:
    """An Anthropic Messages API tool (``input_schema``)."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def to_mcp(tool: Described) -> dict[str, Any]:
    """An MCP tool (``inputSchema``) with behaviour hints derived from the tool's flags.

    ``readOnlyHint`` is ``is_read_only``; a tool that writes is marked destructive (it may
    overwrite), and only read-only tools are idempotent: calling them twice changes nothing.
    """
    return {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.parameters,
        "annotations": {
            "readOnlyHint": tool.is_read_only,
            "destructiveHint": not tool.is_read_only,
            "idempotentHint": tool.is_read_only,
        },
    }


_EXPORTERS = {"openai": to_openai, "anthropic": to_anthropic, "mcp": to_mcp}


def export_tools(tools: Iterable[Described], fmt: SchemaFormat) -> list[dict[str, Any]]:
    """Every tool in ``fmt``; raises ``ValueError`` for an unknown format."""
    try:
        exporter = _EXPORTERS[fmt]
    except KeyError:
        raise ValueError(f"Unknown schema format {fmt!r}; choose one of {FORMATS}") from None
    return [exporter(t) for t in tools]
