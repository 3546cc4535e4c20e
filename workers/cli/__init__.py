"""The worker side's commands, added to ``toolpool`` through the ``toolpool.commands`` entry points.

``worker`` and ``up`` run a pool in the foreground, ``demo`` shows a pool at work on a private
Redis, and ``exec`` runs one call in this process. Each command loads its module on first use:
a worker process, which imports this package's registry module, loads neither the demo nor the
client it drives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import face

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
    # For the interpreter only: a type checker that saw a module ``__getattr__`` would accept
    # any name from here, a misspelt one included, as an ``object``.
    __getattr__, __dir__ = face(__name__, _MODULE_OF, globals(), __all__)
