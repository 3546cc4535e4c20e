"""toolpool's worker side: the built-in tools (and, with distributed execution, the runtime)."""

from workers.tools import BUILTIN_TOOLS, builtin_registry

__all__ = ["BUILTIN_TOOLS", "builtin_registry"]
