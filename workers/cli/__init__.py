"""The worker side's commands, added to ``toolpool`` through the ``toolpool.commands`` entry points.

``worker`` and ``up`` run a pool in the foreground, ``demo`` shows a pool at work on a private
Redis, and ``exec`` runs one call in this process.
"""

from workers.cli._demo import demo_command
from workers.cli._exec import exec_command
from workers.cli._worker import up_command, worker_command

__all__ = ["demo_command", "exec_command", "up_command", "worker_command"]
