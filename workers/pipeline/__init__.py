"""The per-call path: validate, claim, lock, commit barrier, run, truncate, keep, store, emit.

Each name loads its module on first use: importing one module of the path loads what that
module imports, not the worker's whole runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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
