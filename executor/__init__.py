"""toolpool's orchestrator side and the core shared with the workers."""

from executor.context import ToolContext
from executor.contract import Tool, tool
from executor.errors import (
    ConfigurationError,
    DuplicateToolError,
    FenceError,
    InvalidArgumentsError,
    RedisUnavailable,
    ToolDefinitionError,
    ToolError,
    ToolpoolError,
    UnknownToolError,
    WorkspaceError,
)
from executor.models import ErrorType, ToolCall, ToolResult, ToolStatus
from executor.registry import ToolRegistry, load_registry
from executor.runner import CallEnvironment, run_call
from executor.settings import Settings, TruncationPolicy
from executor.truncation import Truncation, truncate
from executor.workspace import Workspace

__all__ = [
    "CallEnvironment",
    "ConfigurationError",
    "DuplicateToolError",
    "ErrorType",
    "FenceError",
    "InvalidArgumentsError",
    "RedisUnavailable",
    "Settings",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolStatus",
    "ToolpoolError",
    "Truncation",
    "TruncationPolicy",
    "UnknownToolError",
    "Workspace",
    "WorkspaceError",
    "load_registry",
    "run_call",
    "tool",
    "truncate",
]
