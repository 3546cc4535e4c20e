"""The tool contract: how a tool is declared, what it receives, how tools are collected.

Shared by both sides: workers run tools declared here; the orchestrator only reads their
published descriptions (see ``executor.wire``'s catalog).
"""

from executor.contract._context import SessionPlace, ShellState, ToolContext, no_fence
from executor.contract._export import FORMATS, SchemaFormat, export_tools
from executor.contract._info import ToolInfo
from executor.contract._registry import ToolRegistry, load_registry
from executor.contract._tool import Tool, tool
from executor.contract._workspace import Workspace

__all__ = [
    "FORMATS",
    "SchemaFormat",
    "SessionPlace",
    "ShellState",
    "Tool",
    "ToolContext",
    "ToolInfo",
    "ToolRegistry",
    "Workspace",
    "export_tools",
    "load_registry",
    "no_fence",
    "tool",
]
