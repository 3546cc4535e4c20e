"""The worker side's commands, added to ``toolpool`` through the ``toolpool.commands`` entry points.

``worker`` and ``up`` run a pool in the foreground, ``demo`` shows a pool at work on a private
Redis, and ``exec`` runs one call in this process. Each command loads its module on first use:
a worker process, which imports this package's registry module, loads neither the demo nor the
client it drives.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.cli._demo import demo_command
    from workers.cli._exec import exec_command
    from workers.cli._worker import up_command, worker_command

__all__ = ["demo_command", "exec_command", "up_command", "worker_command"]

# Where each public name is defined: ``__getattr__`` imports that module on first use.
_MODULE_OF: dict[str, str] = {
    "demo_command": "workers.cli._demo",
    "exec_command": "workers.cli._exec",
    "up_command": "workers.cli._worker",
    "worker_command": "workers.cli._worker",
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
