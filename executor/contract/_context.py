"""What a running tool may know about its call: workspace, settings, deadline, fence, shell."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from executor._errors import ConfigurationError
from executor._settings import SettingsGroup
from executor.contract._workspace import Workspace

G = TypeVar("G", bound=SettingsGroup)


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


@dataclass(frozen=True)
class SessionPlace:
    """The session a call runs in, as a tool that keeps state on the session's host sees it.

    ``host_folder`` is the session's own folder on this host beside (not inside) its
    workspace, out of its commands' sight: background processes and the session's network
    live there. ``redis_env`` holds the ``TOOLPOOL_REDIS_*`` variables with which a process
    of the tool's (a background process's keeper) reaches the pool's Redis.
    ``publish(process_id, record_json)`` keeps a background process's record where every
    process sees it (the session's record in Redis); False if it could not, never raising.
    """

    name: str
    host: str
    host_folder: Path
    redis_env: dict[str, str] = field(default_factory=dict)
    publish: Callable[[str, str], bool] = lambda process_id, record_json: True


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
    #: The tool's own settings, of the group its ``@tool(settings=...)`` names, as the worker
    #: read them (``TOOLPOOL_*``); None: that group's defaults. Read it with ``settings_as``.
    settings: SettingsGroup | None = None
    call_id: str = ""
    tool_name: str = ""
    deadline: float = float("inf")
    cancelled: threading.Event = field(default_factory=threading.Event)
    fence: Callable[[], None] = no_fence
    commit_gate: threading.Lock = field(default_factory=threading.Lock)
    committed: bool = False
    #: In a session: the shell state ``bash`` continues; None outside sessions.
    shell: ShellState | None = None
    #: In a session: which one, and its folder on this host; None outside sessions.
    session: SessionPlace | None = None
    #: The worker's own folders (its pool workspace, its sessions root), which hold other
    #: calls' files: a tool that lets a command roam the disk hides them, but for ``workspace``.
    worker_folders: tuple[Path, ...] = ()

    def settings_as(self, group: type[G]) -> G:
        """The tool's own settings, of class ``group`` (its defaults when none were given)."""
        if self.settings is None:
            return group()
        if type(self.settings) is not group:
            raise ConfigurationError(
                f"Tool {self.tool_name!r} was given {type(self.settings).__name__}, not "
                f"{group.__name__}: declare it with @tool(settings={group.__name__})"
            )
        return self.settings

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
