"""Waiting on a condition with a deadline, and telling whether a process is gone.

Tests never sleep and hope: they poll a condition until it holds and fail at a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

# Generous: a deadline only matters when something is broken, and CI machines are slow.
PATIENCE_S = 30.0


def wait_for(
    condition: Callable[[], object],
    what: str = "a condition",
    *,
    timeout: float = PATIENCE_S,
    interval: float = 0.01,
) -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(interval)


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
