"""Finding a test's processes by pid from outside, sandboxed ones included.

A sandboxed command has its own PID namespace, so the pid it sees (``$$``) is not the pid the
machine knows. Tests find its processes instead by a marker in their command line: a sleep
duration (``sleep_marker``) that no other process on the machine uses.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.support.waiting import gone


def sleep_marker() -> str:
    """A sleep duration no other process on the machine uses, to find ours in /proc."""
    return f"300.{uuid.uuid4().int % 10**9:09d}"


def processes_where(file: str, matches: Callable[[bytes], bool]) -> list[int]:
    """The live processes whose ``/proc/PID/<file>`` (``cmdline``, ``environ``) ``matches``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            content = (entry / file).read_bytes()
        except OSError:
            continue
        if matches(content) and not gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def processes_with(marker: str) -> list[int]:
    """The live processes whose command line holds ``marker``."""
    return processes_where("cmdline", lambda cmdline: marker.encode() in cmdline)


def sleeping(marker: str) -> list[int]:
    """The live ``sleep MARKER`` processes themselves (not the shells or sandboxes whose
    command lines also hold the marker on their way to running it)."""
    argv = b"sleep\0" + marker.encode() + b"\0"
    return processes_where("cmdline", lambda cmdline: cmdline == argv)


def survivors(marker: str, within: float = 5.0) -> list[int]:
    """PIDs still running ``marker`` once ``within`` seconds have passed (none: at once)."""
    deadline = time.monotonic() + within
    while True:
        left = processes_with(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def parent_of(pid: int) -> int | None:
    """The parent of ``pid``, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return None


def ancestors(pid: int) -> list[int]:
    """``pid``'s parent, its parent's parent, ... up to pid 1."""
    chain: list[int] = []
    while (parent := parent_of(pid)) not in (None, 0, 1):
        assert parent is not None
        chain.append(parent)
        pid = parent
    return chain
