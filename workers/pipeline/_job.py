"""The one function toolpool workers run: ``execute`` (``executor.wire._jobs.ENTRY_POINT``).

RQ imports it by name, so it cannot take the worker's runtime as an argument; the worker
process installs its runtime here once at start (``install``), before it takes any job.
"""

from __future__ import annotations

from typing import Any

from workers.pipeline._runtime import WorkerRuntime

_runtime: WorkerRuntime | None = None


def install(runtime: WorkerRuntime) -> None:
    """Make ``runtime`` the one that runs this process's calls."""
    global _runtime  # noqa: PLW0603 -- one runtime per worker process, set once at start
    _runtime = runtime


def execute(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one call (a ``CallJob`` as JSON) and return its ``ToolResult`` as JSON."""
    if _runtime is None:
        raise RuntimeError(
            "This process has no toolpool runtime: start workers with `toolpool worker`."
        )
    return _runtime.execute(payload)
