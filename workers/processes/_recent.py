"""The sessions of this host lately made or run in: a small file of the host's, and a watch on it.

Each worker process keeps its own launches of bash made ahead (``workers.tools._shell_warm``),
and a session's calls come round to each worker of its host; so what one worker learns of a
session (it was just made, a command ran in it) is written where the host's other workers
see it: ``RECENT`` in the host folders' parent, one session name a line, appended (with
`` ran`` after it where a command ran in it). ``watch`` has a thread of a worker wait
(inotify: no polling) for that file to be written to. ``ACTIVE``, beside it, is touched as a
worker starts bash in one of the host's sessions: whether the host's workers are busy with
bash (``ran_lately``), for work on speculation to wait for.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

RECENT = "bash-recent"
ACTIVE = "bash-active"
# How much of the file's end is read; past _MAX_BYTES it starts again (only its end matters).
_TAIL = 4096
_MAX_BYTES = 64 * 1024
# inotify: the flags of inotify_init1 and of the events watched, and an event's header.
_IN_CLOEXEC = 0o2000000
_IN_MODIFY, _IN_CREATE, _IN_MOVED_TO, _IN_IGNORED = 0x2, 0x100, 0x80, 0x8000
_EVENT = struct.Struct("iIII")
# A watcher acts on a write at once, then on those of the next this-many seconds together.
_GAP_S = 0.05


# After a session's name on its line: a command ran in it (else: it was just made).
_RAN = " ran"


def note(host_root: Path, name: str, ran: bool = False) -> None:
    """Append ``name`` to the host's file (made with its folder if need be): just made, or
    ``ran`` a command."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        handle = os.open(host_root / RECENT, flags, 0o600)
    except FileNotFoundError:
        host_root.mkdir(parents=True, exist_ok=True)
        handle = os.open(host_root / RECENT, flags, 0o600)
    try:
        if os.fstat(handle).st_size > _MAX_BYTES:
            os.ftruncate(handle, 0)
        os.write(handle, f"{name}{_RAN if ran else ''}\n".encode())
    finally:
        os.close(handle)


def mark_ran(host_root: Path) -> None:
    """Say that a worker of the host starts bash in one of its sessions now."""
    try:
        os.utime(host_root / ACTIVE)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.close(os.open(host_root / ACTIVE, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    except OSError:
        pass  # a mark lost only lets a sandbox be made ahead beside a call


def ran_lately(host_root: Path, seconds: float) -> bool:
    """Whether a worker of the host started bash in one of its sessions within ``seconds``."""
    try:
        return time.time() - os.stat(host_root / ACTIVE).st_mtime < seconds
    except OSError:
        return False


def recent(host_root: Path, count: int, ran: bool = True) -> list[str]:
    """The last ``count`` different session names noted in ``host_root``, the latest first:
    as they were made and, with ``ran``, as commands ran in them."""
    try:
        with open(host_root / RECENT, "rb") as stream:
            start = max(0, os.fstat(stream.fileno()).st_size - _TAIL)
            stream.seek(start)
            lines = stream.read(_TAIL).split(b"\n")[:-1]
    except OSError:
        return []
    names: list[str] = []
    for line in reversed(lines[1:] if start else lines):  # a first line read in part: cut
        name = line.decode(errors="replace")
        if name.endswith(_RAN):
            if not ran:
                continue
            name = name[: -len(_RAN)]
        if name and "/" not in name and not name.startswith(".") and name not in names:
            names.append(name)
            if len(names) == count:
                break
    return names


def watch(host_root: Path, changed: Callable[[], None], ended: Callable[[], None]) -> bool:
    """Call ``changed`` in a thread of its own as it starts and each time the host's file is
    written to (the writes of ``_GAP_S`` after a call at once), and ``ended`` once the folder
    is gone; False where it cannot be watched (no inotify)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        handle = libc.inotify_init1(_IN_CLOEXEC)
        if handle < 0:
            return False
        host_root.mkdir(parents=True, exist_ok=True)
        mask = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO
        if libc.inotify_add_watch(handle, os.fsencode(host_root), mask) < 0:
            os.close(handle)
            return False
    except (OSError, AttributeError):
        return False
    threading.Thread(
        target=_watching, args=(handle, changed, ended), name="bash-recent", daemon=True
    ).start()
    return True


def _watching(handle: int, changed: Callable[[], None], ended: Callable[[], None]) -> None:
    wanted, first = RECENT.encode(), True
    try:
        while True:
            if not first:
                names, gone = _events(os.read(handle, 65536))
                if gone:
                    return  # the folder was removed (the watch with it)
                if wanted not in names:
                    continue
            first = False
            try:
                changed()
            except Exception as exc:  # the thread must go on: one change less acted on
                log.warning("toolpool: acting on %s failed: %s", RECENT, exc)
            # A burst of writes (sessions made one after another) queues meanwhile: one read.
            time.sleep(_GAP_S)
    except OSError:
        return
    finally:
        with contextlib.suppress(OSError):
            os.close(handle)
        ended()


def _events(data: bytes) -> tuple[set[bytes], bool]:
    """The file names of the inotify events in ``data``, and whether the watch ended."""
    found, gone, at = set(), False, 0
    while at + _EVENT.size <= len(data):
        _, mask, _, size = _EVENT.unpack_from(data, at)
        gone = gone or bool(mask & _IN_IGNORED)
        found.add(data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0"))
        at += _EVENT.size + size
    return found, gone
