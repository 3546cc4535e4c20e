"""toolpool's worker side: the built-in tools (and, with distributed execution, the runtime),
and ``LocalPool``, a private Redis and worker pool started from Python.

``BUILTIN_TOOLS`` and ``builtin_registry`` load the tools on first use: importing a module of
this package (the runtime, the pool, grep's helper process) loads no tool it does not import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import face

if TYPE_CHECKING:
    from workers._local import LocalPool
    from workers.tools._builtin import BUILTIN_TOOLS, builtin_registry

__all__ = ["BUILTIN_TOOLS", "LocalPool", "builtin_registry"]

# Where each public name is defined: ``__getattr__`` imports that module on first use.
_MODULE_OF: dict[str, str] = {
    "BUILTIN_TOOLS": "workers.tools._builtin",
    "LocalPool": "workers._local",
    "builtin_registry": "workers.tools._builtin",
}

if not TYPE_CHECKING:
    # For the interpreter only: a type checker that saw a module ``__getattr__`` would accept
    # any name from here, a misspelt one included, as an ``object``.
    __getattr__, __dir__ = face(__name__, _MODULE_OF, globals(), __all__)
