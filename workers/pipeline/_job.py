"""The one function toolpool workers run: ``execute`` (``executor._rq.jobs.ENTRY_POINT``).

RQ imports it by name, so it cannot take the worker's runtime as an argument; the worker
process installs its runtime here once at start (``install``), before it takes any job.
"""

from __future__ import annotations

from typing import Any

from workers.pipeline._runtime import WorkerRuntime
from workers.sessions import SessionAdmin

_runtime: WorkerRuntime | None = None
_admin: SessionAdmin | None = None


def install(runtime: WorkerRuntime) -> None:
    """Make ``runtime`` the one that runs this process's calls."""
    global _runtime, _admin  # noqa: PLW0603 -- one runtime per worker process, set once
    _runtime = runtime
    _admin = SessionAdmin(
        runtime.client, runtime.keys, runtime.settings.worker.sessions_root, runtime.host
    )


def execute(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one call (a ``CallJob`` as JSON); or, for a ``session_op`` payload, create or delete
    a session's folder on this host. Returns, for a call, only its id and outcome: the result
    itself is stored under toolpool's own key, and RQ keeps no copy of what a finished call
    returned (``executor._rq.worker.ToolpoolJob``)."""
    if _runtime is None or _admin is None:
        raise RuntimeError(
            "This process has no toolpool runtime: start workers with `toolpool worker`."
        )
    if "session_op" in payload:
        return _admin.handle(payload)
    result = _runtime.execute(payload)
    return {key: result.get(key) for key in ("call_id", "status", "error_type")}
