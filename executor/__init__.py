"""toolpool: run an LLM agent's tool calls on a pool of workers, through Redis and RQ.

This module is the whole public API. An orchestrator needs only these names; a custom tool is
declared with ``tool`` (or a ``Tool``) in a ``ToolRegistry`` and loaded by the workers.

Every exception raised on purpose derives from ``ToolpoolError``; all live in
``executor._errors``, whose docstring draws the whole tree (the lock's own exceptions, exported
by ``executor.lock``, included)::

    ToolpoolError
    ├── ConfigurationError        bad settings, a registry import string that does not load
    ├── ToolDefinitionError       a tool declared wrongly
    ├── DuplicateToolError        two tools registered under one name
    ├── UnknownToolError          a look-up of a name the registry does not hold
    ├── InvalidArgumentsError     arguments that fail a tool's parameter schema
    ├── NoWorkerError             no live worker serves the queue
    ├── RedisUnavailable          the orchestrator could not reach Redis (names the turn)
    ├── SessionError              a session name that is invalid, unknown, taken or busy
    ├── TurnError                 a turn that cannot be submitted as given
    └── ToolError                 raised inside a tool: its message is shown to the model
        ├── WorkspaceError        a path that escapes the workspace root
        └── FenceError            a fenced commit refused because the lock was lost
"""

from executor._errors import (
    ConfigurationError,
    DuplicateToolError,
    FenceError,
    InvalidArgumentsError,
    NoWorkerError,
    RedisUnavailable,
    SessionError,
    ToolDefinitionError,
    ToolError,
    ToolpoolError,
    TurnError,
    UnknownToolError,
    WorkspaceError,
)
from executor._settings import Settings, TruncationPolicy
from executor._truncation import Truncation, truncate
from executor.client import (
    AsyncExecutor,
    Executor,
    Sessions,
    Turn,
    anthropic_tool_results,
    openai_tool_messages,
)
from executor.contract import (
    Tool,
    ToolContext,
    ToolInfo,
    ToolRegistry,
    Workspace,
    export_tools,
    load_registry,
    tool,
)
from executor.wire import (
    Catalog,
    ErrorType,
    SessionInfo,
    ToolCall,
    ToolResult,
    ToolStatus,
)

__all__ = [
    "AsyncExecutor",
    "Catalog",
    "ConfigurationError",
    "DuplicateToolError",
    "ErrorType",
    "Executor",
    "FenceError",
    "InvalidArgumentsError",
    "NoWorkerError",
    "RedisUnavailable",
    "SessionError",
    "SessionInfo",
    "Sessions",
    "Settings",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolInfo",
    "ToolRegistry",
    "ToolResult",
    "ToolStatus",
    "ToolpoolError",
    "Truncation",
    "TruncationPolicy",
    "Turn",
    "TurnError",
    "UnknownToolError",
    "Workspace",
    "WorkspaceError",
    "anthropic_tool_results",
    "export_tools",
    "load_registry",
    "openai_tool_messages",
    "tool",
    "truncate",
]
