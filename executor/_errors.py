"""Exceptions raised by toolpool.

Every exception toolpool raises on purpose derives from ``ToolpoolError``::

    ToolpoolError
    ├── ConfigurationError        bad settings, a registry import string that does not load
    ├── ToolDefinitionError       a tool declared wrongly (bad name, schema that is not JSON Schema)
    ├── DuplicateToolError        two tools registered under one name
    ├── UnknownToolError          a look-up of a name the registry does not hold
    ├── InvalidArgumentsError     arguments that fail a tool's parameter schema
    ├── RedisUnavailable          the orchestrator could not reach Redis (names the turn)
    ├── SessionError              a session name that is invalid, unknown, taken or busy
    └── ToolError                 raised *inside* a tool: an expected failure whose message is
        │                         shown to the model as it is ("File not found: a.txt")
        ├── WorkspaceError        a path that escapes the workspace root
        └── FenceError            a fenced commit refused because the lock was lost

Errors raised inside a tool never escape the runner: they become a ``ToolResult`` with
``status="error"`` (see ``workers.pipeline._runner``).
"""

from __future__ import annotations

from collections.abc import Iterable


class ToolpoolError(Exception):
    """Base class of every exception toolpool raises on purpose."""


class ConfigurationError(ToolpoolError):
    """Settings or a registry import string that cannot be used."""


class ToolDefinitionError(ToolpoolError):
    """A tool declared in a way toolpool cannot serve."""


class DuplicateToolError(ToolpoolError):
    """A second tool registered under a name that is taken."""


class UnknownToolError(ToolpoolError):
    """A tool name that the registry does not hold."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        listed = ", ".join(self.available) if self.available else "(none)"
        super().__init__(f"Unknown tool {name!r}. Available tools: {listed}.")


class SessionError(ToolpoolError):
    """A session that cannot be used or managed as asked: bad name, unknown, taken, busy."""


class ToolError(ToolpoolError):
    """An expected failure inside a tool; its message is what the model reads."""


class WorkspaceError(ToolError):
    """A path that resolves outside the workspace root."""


class FenceError(ToolError):
    """A write refused because this call no longer holds the exclusive lock."""


class InvalidArgumentsError(ToolpoolError):
    """Arguments that do not match a tool's parameters; ``problems`` lists each one."""

    def __init__(self, tool_name: str, problems: list[str]) -> None:
        self.tool_name = tool_name
        self.problems = problems
        super().__init__(f"Invalid arguments for tool {tool_name!r}: " + "; ".join(problems))


class RedisUnavailable(ToolpoolError):
    """Redis could not be reached; ``turn_id`` names the turn concerned, if one exists."""

    def __init__(self, message: str, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.turn_id = turn_id
