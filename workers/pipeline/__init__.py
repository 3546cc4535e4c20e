"""The per-call path: validate, claim, lock, commit barrier, run, truncate, keep, store, emit.

Each name loads its module on first use: importing one module of the path loads what that
module imports, not the worker's whole runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import face

if TYPE_CHECKING:
    from workers.pipeline._runner import CallEnvironment, check_call, run_call, time_limit
    from workers.pipeline._runtime import WorkerRuntime

__all__ = ["CallEnvironment", "WorkerRuntime", "check_call", "run_call", "time_limit"]

# Where each public name is defined: ``__getattr__`` imports that module on first use.
_MODULE_OF: dict[str, str] = {
    "CallEnvironment": "workers.pipeline._runner",
    "WorkerRuntime": "workers.pipeline._runtime",
    "check_call": "workers.pipeline._runner",
    "run_call": "workers.pipeline._runner",
    "time_limit": "workers.pipeline._runner",
}

if not TYPE_CHECKING:
    # For the interpreter only: a type checker that saw a module ``__getattr__`` would accept
    # any name from here, a misspelt one included, as an ``object``.
    __getattr__, __dir__ = face(__name__, _MODULE_OF, globals(), __all__)
