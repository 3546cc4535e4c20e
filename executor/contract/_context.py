"""What a running tool may know about its call: workspace, settings, deadline, fence, shell."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from executor._settings import Settings
from executor.contract._workspace import Workspace


@dataclass
class ShellState:
    """The shell state of a session, carried from one ``bash`` call to the next.

    ``cwd`` is the working directory relative to the session's folder; ``env`` the variables
    its commands exported. ``save(cwd, env)`` keeps the state a command ended with, for the
    session's next call (on any worker); it returns False if the state could not be kept
    (Redis out of reach), and never raises.
    """

    cwd: str = "."
    env: dict[str, str] = field(default_factory=dict)
    save: Callable[[str, dict[str, str]], bool] = lambda cwd, env: True


def no_fence() -> None:
    """The fence of a call that holds no distributed lock: always passes."""


@dataclass
class ToolContext:
    """Passed to a tool whose first parameter is annotated ``ToolContext``.

    ``check_fence()`` must be called by a tool right before it makes a side effect visible
    (the rename of a written file): under the distributed lock it raises ``FenceError`` once
    this call no longer holds the exclusive lease. ``cancelled`` is set when the call's time is
    up or the call was cancelled; long-running tools should poll it.

    A tool makes its side effect visible inside ``commit_gate`` and sets ``committed`` there;
    the runner stops a call that ran out of time through ``stop()``, which waits for a commit in
    flight, so a call is never answered "stopped" while its write lands a moment later.
    """

    workspace: Workspace
    settings: Settings = field(default_factory=Settings)
    call_id: str = ""
    tool_name: str = ""
    deadline: float = float("inf")
    cancelled: threading.Event = field(default_factory=threading.Event)
    fence: Callable[[], None] = no_fence
    commit_gate: threading.Lock = field(default_factory=threading.Lock)
    committed: bool = False
    #: In a session: the shell state ``bash`` continues; None outside sessions.
    shell: ShellState | None = None

    def check_fence(self) -> None:
        """Raise ``FenceError`` if this call's writes must no longer land."""
        self.fence()

    def stop(self) -> bool:
        """Cancel the call once no commit is in flight; True if its side effect has landed."""
        with self.commit_gate:
            self.cancelled.set()
            return self.committed

    def remaining(self) -> float:
        """Seconds left before the call's deadline (``inf`` without one)."""
        return self.deadline - time.monotonic()
