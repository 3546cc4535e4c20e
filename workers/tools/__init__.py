"""The nine built-in tools, and the registry that holds them.

Each name loads its module on first use, so importing a module of this package loads no tool
it does not import itself (grep's helper process imports its search modules with the standard
library alone). No module here bears a tool's name: once imported, it would take the tool's
place in this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import face

if TYPE_CHECKING:
    from workers.tools._builtin import BUILTIN_TOOLS, builtin_registry
    from workers.tools.arithmetic import calculator
    from workers.tools.files import edit_file, list_directory, read_file, write_file
    from workers.tools.search import glob, grep
    from workers.tools.shell import bash
    from workers.tools.weather import get_weather

__all__ = [
    "BUILTIN_TOOLS",
    "bash",
    "builtin_registry",
    "calculator",
    "edit_file",
    "get_weather",
    "glob",
    "grep",
    "list_directory",
    "read_file",
    "write_file",
]

# Where each public name is defined: ``__getattr__`` imports that module on first use.
_MODULE_OF: dict[str, str] = {
    "BUILTIN_TOOLS": "workers.tools._builtin",
    "bash": "workers.tools.shell",
    "builtin_registry": "workers.tools._builtin",
    "calculator": "workers.tools.arithmetic",
    "edit_file": "workers.tools.files",
    "get_weather": "workers.tools.weather",
    "glob": "workers.tools.search",
    "grep": "workers.tools.search",
    "list_directory": "workers.tools.files",
    "read_file": "workers.tools.files",
    "write_file": "workers.tools.files",
}

if not TYPE_CHECKING:
    # For the interpreter only: a type checker that saw a module ``__getattr__`` would accept
    # any name from here, a misspelt one included, as an ``object``.
    __getattr__, __dir__ = face(__name__, _MODULE_OF, globals(), __all__)
