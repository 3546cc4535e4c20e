"""A call on its way through the per-call steps, and how the steps are put together.

Each concern of the per-call path is one step: a function (or callable object) that takes the
call's state and ``proceed``, the steps after it. What a step does before it calls ``proceed``
is its before hook; what it does with the answer ``proceed`` returns is its after hook; a step
that answers the call itself (bad arguments, a lock it could not take) does not proceed. The
steps are listed once, outermost first, in ``workers.pipeline._runner`` (in this process) and
``workers.pipeline._runtime`` (on a worker), and put together by ``chain``: nothing else
decides what runs.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.client import Pipeline

from executor import Settings
from executor.contract import SessionPlace, ShellState, Tool, ToolRegistry, Workspace, no_fence
from executor.wire import CallJob, ToolCall, ToolResult
from workers.pipeline._keep import KeepFullOutput


class Held(Protocol):
    """What a guard holds while a tool runs (the worker's guard holds a lock lease)."""

    def check_fence(self) -> None:
        """Raise ``FenceError`` once the call's side effects must no longer land."""

    @property
    def lost(self) -> bool:
        """True once the guard no longer protects the call."""

    @property
    def committed(self) -> bool:
        """True once a fence check passed: the tool's side effect landed under the guard."""


LockGuard = Callable[["CallState"], AbstractContextManager[Held]]


class GrantCheck(Protocol):
    """What the lock guard checks at the grant: a command that rides on the grant's round
    trip (``queue``, ``read``: a ``Rider``), and ``confirm``, under the grant."""

    def queue(self, pipe: Pipeline) -> None:
        """Put the check's one command on the grant's pipeline."""

    def read(self, reply: object) -> None:
        """Take its reply (each try of the grant sends it; the last read is the grant's)."""

    def confirm(self, state: CallState) -> None:
        """Under the grant: raise ``ClaimLost`` if this delivery must not run the call."""


class ClaimLost(Exception):
    """Raised at the lock grant when this delivery of the call must not run it: another
    delivery holds its claim, or it is answered (``answer``). The claim step catches it and
    answers as a second delivery does; no step in between turns it into a result."""

    def __init__(self, answer: ToolResult | None) -> None:
        super().__init__("another delivery of the call holds its claim, or it is answered")
        self.answer = answer


@dataclass
class Closing:
    """What an inner step leaves for the store step to send with the result, in its one
    round trip (the lease's release): ``queue`` puts one command on the pipeline and returns
    what reads its reply; ``instead`` does the work alone when that round trip does not
    happen (the steps raised, or storing failed)."""

    queue: Callable[[Pipeline], Callable[[object], None]]
    instead: Callable[[], None]


@dataclass
class CallState:
    """One call on its way through the steps: what it is, where it runs, what was found.

    The fields up to ``cancelled`` are set when the call comes in; the rest belong to one run
    of it, filled in by the steps (``validate`` finds the tool, ``lock`` what it holds).
    ``again()`` starts a fresh run, for the one rerun of a read-only call that lost its lease.
    """

    call: ToolCall
    registry: ToolRegistry
    workspace: Workspace
    settings: Settings
    #: On a worker, the job the call came in (its turn, for events and the cancel flag).
    job: CallJob | None = None
    #: The fence when no guard holds one (a guard's replaces it).
    fence: Callable[[], None] = no_fence
    keep_full_output: KeepFullOutput | None = None
    #: Entered by the ``lock`` step once the arguments are valid; None: no lock.
    guard: LockGuard | None = None
    #: Set from outside (cancel, the heartbeat, a lost lease) to stop this run of the call.
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: In a session (set by the session step): its lock scope and shell state; None: the
    #: worker's own scope, no shell state.
    scope: str | None = None
    shell: ShellState | None = None
    session: SessionPlace | None = None
    #: The keys of the worker's claim on the call (set by the claim step); the store step
    #: deletes them in the round trip that stores the result, and says so.
    claim_keys: tuple[str, ...] = ()
    claim_released: bool = False
    #: Set by the claim step: sent with the lock's grant and confirmed by the lock guard
    #: before the tool starts; ``confirm`` raises ``ClaimLost`` if this delivery must not
    #: run the call.
    confirm_claim: GrantCheck | None = None
    #: Set (to a list) by the store step: what the steps inside leave for its round trip.
    #: None: no store step follows, so nothing may be left.
    closing: list[Closing] | None = None
    started: float = 0.0
    tool: Tool | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    held: Held | None = None
    #: Set by the lock guard: sends the call's opening events (its grant, its start). The run
    #: step calls it once the tool has taken ``ANNOUNCE_AFTER_S``; a quicker call's opening
    #: events go with its result, in the store step's round trip.
    announce: Callable[[], None] = lambda: None

    @property
    def turn_id(self) -> str:
        """The call's turn on a worker; empty in this process."""
        return self.job.turn_id if self.job is not None else ""

    def checked_tool(self) -> Tool:
        """The tool ``validate`` found: every step after it may rely on it."""
        if self.tool is None:
            raise RuntimeError(f"Call {self.call.id} reached a step after validate unchecked.")
        return self.tool

    def the_job(self) -> CallJob:
        """The job of a call on a worker: the worker's own steps rely on it."""
        if self.job is None:
            raise RuntimeError(f"Call {self.call.id} reached a worker's step without its job.")
        return self.job

    def again(self) -> CallState:
        """A fresh run of the same call: a cancel flag of its own, nothing found yet."""
        return dataclasses.replace(
            self, cancelled=threading.Event(), started=0.0, tool=None, arguments={}, held=None
        )


Proceed = Callable[[CallState], ToolResult]
Step = Callable[[CallState, Proceed], ToolResult]


def chain(steps: Sequence[Step], last: Proceed) -> Proceed:
    """``steps`` around ``last``, the outermost first: one function that runs a call through all.

    ``last`` answers without proceeding (it runs the tool). Composed once, when the path is
    built, so a call costs one Python call per step and nothing else.
    """
    proceed = last
    for step in reversed(steps):
        proceed = _around(step, proceed)
    return proceed


def _around(step: Step, inner: Proceed) -> Proceed:
    def through(state: CallState) -> ToolResult:
        return step(state, inner)

    return through
