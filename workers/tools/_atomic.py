"""Atomic, fenced replacement of a file's content, shared by write_file and edit_file."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from executor.context import ToolContext
from executor.errors import ToolError

# A temp name must stay under NAME_MAX (255) whatever the target's name is.
_NAME_PART = 64


def replace_file(ctx: ToolContext, target: Path, data: bytes) -> None:
    """Give ``target`` the content ``data`` all at once, or leave it as it was.

    The bytes go to a hidden temporary file in the target's directory (a rename within one
    directory cannot cross file systems), are synced to disk, and only then is the fence
    checked and the temporary file renamed over the target. So a reader sees the old content or
    the new, never a mix; a call that lost the exclusive lock (``FenceError``) or was cancelled
    never lands its write; and the temporary file is removed on every failure path. An existing
    target keeps its permission bits; a new one gets the usual ``0o666 & ~umask``.

    ``OSError`` (no space, no permission) propagates for the caller to word.
    """
    mode = _existing_mode(target)
    temp = target.parent / f".{target.name[:_NAME_PART]}.{secrets.token_hex(6)}.tmp"
    # os.open with 0o666 lets the umask apply, unlike mkstemp's fixed 0o600.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if ctx.cancelled.is_set():
            # The runner has already told the model this call timed out or was cancelled;
            # landing the write now would contradict that.
            raise ToolError("The call was cancelled before its write was committed.")
        ctx.check_fence()
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _sync_directory(target.parent)


def _existing_mode(target: Path) -> int | None:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable; best effort, as some file systems refuse it."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
