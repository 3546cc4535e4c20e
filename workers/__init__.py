"""toolpool's worker side: the built-in tools (and, with distributed execution, the runtime).

``BUILTIN_TOOLS`` and ``builtin_registry`` load the tools on first use: importing a module of
this package (the runtime, the pool, grep's helper process) loads no tool it does not import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.tools._builtin import BUILTIN_TOOLS, builtin_registry

__all__ = ["BUILTIN_TOOLS", "builtin_registry"]

# Where each public name is defined: ``__getattr__`` imports that module on first use.
_MODULE_OF: dict[str, str] = {
    "BUILTIN_TOOLS": "workers.tools._builtin",
    "builtin_registry": "workers.tools._builtin",
}

if not TYPE_CHECKING:
    # For the interpreter only: a type checker that saw it would accept any name from here.
    def __getattr__(name: str) -> object:
        """A public name, imported from its module on first use and kept here after."""
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
