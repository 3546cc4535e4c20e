"""Policy hooks for ``toolpool mcp --check/--approve`` in the tests."""

from __future__ import annotations

from executor import ToolCall, ToolInfo

NOT_A_FUNCTION = "a string"


def no_secrets(call: ToolCall, tool: ToolInfo) -> str | None:
    """Refuse any call whose arguments mention a secret."""
    if "secret" in str(call.arguments).lower():
        return f"{call.name} may not touch secrets"
    return None


def approve_nothing(call: ToolCall, tool: ToolInfo) -> bool:
    """Refuse every call that is asked about."""
    return False


def broken(call: ToolCall, tool: ToolInfo) -> str | None:
    """A hook with a bug of its own."""
    raise KeyError("the hook's own bug")
