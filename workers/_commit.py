"""The workspace's commit lock: what closes the gap between a fence check and a rename.

A fence check asks Redis whether a call still holds the exclusive lock; the rename that makes
its write visible is a second step, on the file system, which cannot check a fence. A writer
paused between the two past its lease would land its write after the next holder was granted.
So every commit happens under an exclusive ``flock`` on the workspace root directory, and
inside it the writer checks the fence, renames, and checks the fence again, undoing the rename
if the lease was lost meanwhile. Every call passes a barrier (the same lock taken shared and let
go at once) right after its distributed lock is granted, so no call that starts after a grant
can see a write that is then undone: a commit in flight finishes or undoes itself first.

The lock is on the directory itself, not on a file in it, so the model cannot replace or delete
it. ``flock`` needs one kernel to see every process: workers on one host, or containers sharing
a volume; on NFS it is emulated with POSIX locks, which does not cover directories.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from executor import ToolError
from executor import _texts as texts

# Polling, because flock has no timeout of its own: short first (commits last milliseconds).
_FIRST_POLL_S = 0.0005
_MAX_POLL_S = 0.02


class CommitBusy(ToolError):
    """The workspace's commit lock could not be taken in time."""


@contextlib.contextmanager
def exclusive_commit(root: Path, timeout: float) -> Iterator[None]:
    """Hold the workspace's commit lock exclusively: one commit at a time, across processes."""
    fd = _open(root)
    try:
        _take(fd, fcntl.LOCK_EX, root, timeout)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def commit_barrier(root: Path, timeout: float) -> None:
    """Wait until no commit is in flight in the workspace (take the lock shared, let it go)."""
    fd = _open(root)
    try:
        _take(fd, fcntl.LOCK_SH, root, timeout)
    finally:
        os.close(fd)


def _open(root: Path) -> int:
    return os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)


def _take(fd: int, mode: int, root: Path, timeout: float) -> None:
    deadline = time.monotonic() + max(0.0, timeout)
    pause = _FIRST_POLL_S
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:
            raise ToolError(texts.no_file_locks(str(root), exc.strerror or str(exc))) from None
        left = deadline - time.monotonic()
        if left <= 0:
            raise CommitBusy(texts.commit_busy(str(root), timeout))
        time.sleep(min(pause, left))
        pause = min(pause * 2, _MAX_POLL_S)
