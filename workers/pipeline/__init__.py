"""The per-call path: validate, claim, lock, commit barrier, run, truncate, keep, store, emit."""

from workers.pipeline._runner import CallEnvironment, check_call, run_call, time_limit
from workers.pipeline._runtime import WorkerRuntime

__all__ = ["CallEnvironment", "WorkerRuntime", "check_call", "run_call", "time_limit"]
