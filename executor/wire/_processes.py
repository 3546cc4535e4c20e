"""A session's background process as every process sees it: its record in Redis.

The process itself lives on the session's host (``workers.processes``); the keeper that runs
it writes this record at each change of state, so ``toolpool session show`` and the dashboard
can list a session's processes from anywhere. The host's disk stays the truth for the tools.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

RUNNING, EXITED, STOPPED, LOST = "running", "exited", "stopped", "lost"
ProcessState = Literal["starting", "running", "exited", "stopped", "lost"]


class ProcessRecord(BaseModel):
    """One background process of a session: what runs, since when, and how it ended.

    ``state``: ``running``; ``exited`` (it ended by itself, ``exit_code`` set, or killed by
    ``signal``); ``stopped`` (toolpool ended it, ``reason`` says why: a stop call, a limit,
    the session's end or the pool's); ``lost`` (its keeper died without recording an end).
    """

    model_config = ConfigDict(extra="ignore")

    id: str
    session: str
    command: str
    host: str = ""
    state: ProcessState = "running"
    pid: int = 0
    started_at: float = 0.0
    ended_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    reason: str = ""
    output_bytes: int = 0

    @property
    def age_s(self) -> float:
        """Seconds since it started (until now, or until it ended)."""
        end = self.ended_at if self.ended_at is not None else time.time()
        return max(0.0, end - self.started_at)

    def ending(self) -> str:
        """How it ended, in words ("" while it runs)."""
        if self.state in ("running", "starting"):
            return ""
        if self.state == "exited":
            if self.signal:
                return f"killed by {self.signal}"
            return f"exit code {self.exit_code}"
        return self.reason or self.state
