"""The tools a worker serves: the built-ins plus every registry named with ``--tools``."""

from __future__ import annotations

import click

from executor import ToolRegistry, load_registry
from workers.tools import builtin_registry

tools_option = click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    envvar="TOOLPOOL_TOOLS",
    metavar="MODULE:ATTR",
    help="Add a registry of your own tools (repeatable; env TOOLPOOL_TOOLS, space-separated).",
)


def build_registry(tool_specs: tuple[str, ...]) -> ToolRegistry:
    """The built-in tools plus every registry named with ``--tools`` (space-separated too)."""
    registry = builtin_registry()
    for spec in tool_specs:
        for name_spec in spec.split():
            registry = registry.merged(load_registry(name_spec))
    return registry
