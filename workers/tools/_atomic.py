"""Atomic, fenced replacement of a file's content, shared by write_file and edit_file."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from executor import FenceError, ToolError
from executor import _texts as texts
from executor.contract import ToolContext
from workers._commit import exclusive_commit

log = logging.getLogger(__name__)

# How long a commit waits for another one in flight (which takes milliseconds unless its
# process is stopped), within the call's own time limit.
COMMIT_WAIT_S = 30.0

# A temp name must stay under NAME_MAX (255) whatever the target's name is.
_NAME_PART = 64


@dataclass(frozen=True)
class FileIdentity:
    """What tells one version of a file from another: every write renames a new inode in."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        return cls(
            status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns
        )


def replace_file(
    ctx: ToolContext, target: Path, data: bytes, *, expect: FileIdentity | None = None
) -> None:
    """Give ``target`` the content ``data`` all at once, or leave it as it was.

    The bytes go to a hidden temporary file in the target's directory (a rename within one
    directory cannot cross file systems) and are synced to disk. Then, under the workspace's
    commit lock (``workers._commit``): the call must not be cancelled, the fence must
    hold, and
    the target must still be the version ``expect`` names (when given: an edit was computed from
    it); the temporary file is renamed over the target, and the fence is checked again. If the
    lease was lost in between, the rename is undone before the lock is let go, so a write never
    stays that landed after the next holder's grant. A reader sees the old content or the new,
    never a mix. An existing target keeps its permission bits; a new one gets the usual
    ``0o666 & ~umask``.

    ``OSError`` (no space, no permission) propagates for the caller to word.
    """
    mode = _existing_mode(target)
    temp = _sibling(target, "tmp")
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
        wait = max(0.0, min(ctx.remaining(), COMMIT_WAIT_S))
        with exclusive_commit(ctx.workspace.root, wait), ctx.commit_gate:
            _commit(ctx, temp, target, expect)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _sync_directory(target.parent)


def _commit(ctx: ToolContext, temp: Path, target: Path, expect: FileIdentity | None) -> None:
    """Rename ``temp`` over ``target`` under the fence; the caller holds the commit lock."""
    if ctx.cancelled.is_set():
        # The runner has already told the model this call timed out or was cancelled;
        # landing the write now would contradict that.
        raise ToolError("The call was cancelled before its write was committed.")
    ctx.check_fence()
    if expect is not None and _identity(target) != expect:
        shown = ctx.workspace.relative(target)
        raise ToolError(
            f"{shown} changed while this edit was being made (another write landed in "
            "between); the edit was not applied. Read the file again and redo the edit."
        )
    backup = _keep_old(target)
    try:
        os.replace(temp, target)
        try:
            ctx.check_fence()
        except BaseException:
            # The lease ended between the two checks: the next holder may already be
            # running, so this write must not stay. Nobody has seen it: readers pass the
            # commit barrier, which waits for this lock.
            _undo(target, backup)
            raise
        ctx.committed = True
    finally:
        if backup is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backup)


def _identity(target: Path) -> FileIdentity | None:
    try:
        return FileIdentity.of(os.stat(target))
    except FileNotFoundError:
        return None


def _keep_old(target: Path) -> Path | None:
    """A second name for the target's current version, so the rename can be undone."""
    backup = _sibling(target, "old")
    try:
        os.link(target, backup)
    except FileNotFoundError:
        return None  # a new file: undoing means removing it
    except OSError:
        # A file system without hard links: a copy restores the content, if not the inode.
        shutil.copy2(target, backup)
    return backup


def _undo(target: Path, backup: Path | None) -> None:
    try:
        if backup is None:
            os.unlink(target)
        else:
            os.replace(backup, target)
    except OSError as exc:
        log.error(
            "toolpool: could not undo the write to %s after the lease was lost: %s", target, exc
        )
        raise FenceError(texts.write_not_undone(exc.strerror or str(exc))) from None


def _sibling(target: Path, kind: str) -> Path:
    return target.parent / f".{target.name[:_NAME_PART]}.{secrets.token_hex(6)}.{kind}"


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
