"""The nine built-in tools, in their listed order, and the registry that holds them."""

from __future__ import annotations

from executor.contract import ToolRegistry
from workers.tools.arithmetic import calculator
from workers.tools.files import edit_file, list_directory, read_file, write_file
from workers.tools.processes import PROCESS_TOOLS
from workers.tools.search import glob, grep
from workers.tools.shell import bash
from workers.tools.weather import get_weather

BUILTIN_TOOLS = (
    get_weather,
    calculator,
    read_file,
    write_file,
    list_directory,
    edit_file,
    glob,
    grep,
    bash,
    *PROCESS_TOOLS,
)


def builtin_registry() -> ToolRegistry:
    """A new registry with the nine built-in tools, in their listed order."""
    return ToolRegistry(BUILTIN_TOOLS)
