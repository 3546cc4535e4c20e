"""Running one call in this process: validate, hold the guard, run within a time limit, truncate.

This is the per-call path that every execution goes through, locally (``toolpool exec``) and
on a worker (``workers.pipeline._runtime`` puts its own steps around these). Whatever happens,
it returns a ``ToolResult``; nothing a tool does escapes as an exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from executor import Settings
from executor.contract import Tool, ToolRegistry, Workspace, no_fence
from executor.wire import ToolCall, ToolResult
from workers.pipeline._chain import CallState, Held, LockGuard, Step, chain
from workers.pipeline._keep import KeepFullOutput
from workers.pipeline._lock import lock
from workers.pipeline._lock_loss import restate
from workers.pipeline._run import CLEANUP_GRACE, run, time_limit
from workers.pipeline._validate import check_call, validate

__all__ = [
    "CALL_STEPS",
    "CLEANUP_GRACE",
    "CallEnvironment",
    "Guard",
    "Held",
    "KeepFullOutput",
    "check_call",
    "run_call",
    "time_limit",
]

Guard = Callable[[Tool, ToolCall], AbstractContextManager[Held]]


@dataclass
class CallEnvironment:
    """Where calls run: the workspace, the settings and, on a worker, the lock guard.

    ``guard`` is entered after the arguments are valid and left when the tool is done: the
    worker passes one that takes the distributed lock (shared for concurrency-safe tools,
    exclusive for the rest). A ``ToolpoolError`` from entering it (no lock within the wait)
    becomes a ``lock_unavailable`` result. ``cancelled`` is set from outside to stop the call.
    """

    workspace: Workspace
    settings: Settings = field(default_factory=Settings)
    fence: Callable[[], None] = no_fence
    cancelled: threading.Event | None = None
    keep_full_output: KeepFullOutput | None = None
    guard: Guard | None = None


#: The steps of every run of a call, outermost first; ``run`` (the tool) is the last.
#: validate: the tool and its arguments; restate: a result under a lost lock said as such;
#: lock: the guard held while the tool runs (truncation and keeping happen as ``run`` answers).
CALL_STEPS: tuple[Step, ...] = (validate, restate, lock)

_run_call = chain(CALL_STEPS, run)


def run_call(call: ToolCall, registry: ToolRegistry, env: CallEnvironment) -> ToolResult:
    """Execute ``call`` and return its result; never raises for anything the call does."""
    state = CallState(
        call=call,
        registry=registry,
        workspace=env.workspace,
        settings=env.settings,
        fence=env.fence,
        keep_full_output=env.keep_full_output,
        guard=None if env.guard is None else _by_state(env.guard),
        cancelled=env.cancelled or threading.Event(),
    )
    return _run_call(state)


def _by_state(guard: Guard) -> LockGuard:
    def enter(state: CallState) -> AbstractContextManager[Held]:
        return guard(state.checked_tool(), state.call)

    return enter
