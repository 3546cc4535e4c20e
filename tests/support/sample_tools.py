"""A user's own tools, loaded by import string in the registry and CLI tests."""

from __future__ import annotations

from executor import Tool, ToolRegistry, tool

registry = ToolRegistry()


@registry.tool(concurrency_safe=True, read_only=True)
def shout(text: str) -> str:
    """Return the text in capitals.

    Args:
        text: What to shout.
    """
    return text.upper()


@tool
def whisper(text: str) -> str:
    """Return the text in lower case."""
    return text.lower()


tool_list: list[Tool] = [whisper]


def make_registry() -> ToolRegistry:
    """A registry built by a function."""
    return ToolRegistry([whisper])


not_tools = 42
