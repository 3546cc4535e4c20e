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

Each name loads its module on first use (``executor.X``, ``from executor import X``), so
importing ``executor`` or one of its subpackages loads only what that code needs: a worker,
which imports ``executor.contract`` and ``executor.wire``, never loads the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import face

if TYPE_CHECKING:
    from executor._errors import (
        ConfigurationError,
        DuplicateToolError,
        FenceError,
        InvalidArgumentsError,
        NoWorkerError,
        RedisUnavailable,
        SessionError,
        ToolCancelledError,
        ToolDefinitionError,
        ToolError,
        ToolpoolError,
        ToolTimeoutError,
        TurnError,
        UnknownToolError,
        WorkspaceError,
    )
    from executor._settings import Settings, SettingsGroup, TruncationPolicy, setting
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
        ProcessRecord,
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
    "ProcessRecord",
    "RedisUnavailable",
    "SessionError",
    "SessionInfo",
    "Sessions",
    "Settings",
    "SettingsGroup",
    "Tool",
    "ToolCall",
    "ToolCancelledError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolInfo",
    "ToolRegistry",
    "ToolResult",
    "ToolStatus",
    "ToolTimeoutError",
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
    "setting",
    "tool",
    "truncate",
]

# Where each public name is defined: ``__getattr__`` imports that module on first use. An explicit
# table, so a reader (and the test that resolves every name) sees where each name comes from.
_MODULE_OF: dict[str, str] = {
    "AsyncExecutor": "executor.client",
    "Catalog": "executor.wire",
    "ConfigurationError": "executor._errors",
    "DuplicateToolError": "executor._errors",
    "ErrorType": "executor.wire",
    "Executor": "executor.client",
    "FenceError": "executor._errors",
    "InvalidArgumentsError": "executor._errors",
    "NoWorkerError": "executor._errors",
    "ProcessRecord": "executor.wire",
    "RedisUnavailable": "executor._errors",
    "SessionError": "executor._errors",
    "SessionInfo": "executor.wire",
    "Sessions": "executor.client",
    "Settings": "executor._settings",
    "SettingsGroup": "executor._settings",
    "Tool": "executor.contract",
    "ToolCall": "executor.wire",
    "ToolCancelledError": "executor._errors",
    "ToolContext": "executor.contract",
    "ToolDefinitionError": "executor._errors",
    "ToolError": "executor._errors",
    "ToolInfo": "executor.contract",
    "ToolRegistry": "executor.contract",
    "ToolResult": "executor.wire",
    "ToolStatus": "executor.wire",
    "ToolTimeoutError": "executor._errors",
    "ToolpoolError": "executor._errors",
    "Truncation": "executor._truncation",
    "TruncationPolicy": "executor._settings",
    "Turn": "executor.client",
    "TurnError": "executor._errors",
    "UnknownToolError": "executor._errors",
    "Workspace": "executor.contract",
    "WorkspaceError": "executor._errors",
    "anthropic_tool_results": "executor.client",
    "export_tools": "executor.contract",
    "load_registry": "executor.contract",
    "openai_tool_messages": "executor.client",
    "setting": "executor._settings",
    "tool": "executor.contract",
    "truncate": "executor._truncation",
}

if not TYPE_CHECKING:
    # For the interpreter only: a type checker that saw a module ``__getattr__`` would accept
    # any name from here, a misspelt one included, as an ``object``.
    __getattr__, __dir__ = face(__name__, _MODULE_OF, globals(), __all__)
