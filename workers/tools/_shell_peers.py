"""Sandboxes made ahead for the sessions this host's workers ran bash in lately.

A session's calls come round to each worker of its host, so a worker that ran none of its
calls yet would make its sandbox in the call: bubblewrap's namespaces and mounts, about 10 ms
on a quiet machine and many times that on a busy one. So each bash call in a session notes the
session's name in a small file of the host's (``RECENT`` in the host folders' parent, one name
a line, appended); beside a command, at most once a second, a worker reads that file's end
and has the sandboxes of the last ``BashSettings.warm`` sessions named there made ahead
(``_shell_warm``), each checked as any unit is when a call takes it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from workers.processes._netns import current
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_warm import make_ahead

RECENT = "bash-recent"
# How often a worker reads the file, and how much of its end.
_READ_EVERY_S = 1.0
_TAIL = 4096
# Past this size the file starts again: only its last names matter.
_MAX_BYTES = 64 * 1024
# How often one worker notes the same session.
_NOTE_EVERY_S = 1.0


class Peers:
    """What one worker process noted and read of its host's recent sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._noted: dict[tuple[Path, str], float] = {}
        self._read: dict[Path, float] = {}

    def note(self, host_root: Path, name: str) -> None:
        """Note that session ``name`` (whose host folder is in ``host_root``) runs bash."""
        now = time.monotonic()
        with self._lock:
            if now - self._noted.get((host_root, name), -_NOTE_EVERY_S) < _NOTE_EVERY_S:
                return
            self._noted[(host_root, name)] = now
            if len(self._noted) > 4096:
                self._noted.clear()
        with contextlib.suppress(OSError):  # a note lost only costs a sandbox made in a call
            handle = os.open(
                host_root / RECENT, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
            try:
                if os.fstat(handle).st_size > _MAX_BYTES:
                    os.ftruncate(handle, 0)
                os.write(handle, f"{name}\n".encode())
            finally:
                os.close(handle)

    def ahead(self, host_root: Path, count: int, want: Callable[[str], None]) -> None:
        """Hand ``want`` each of the last ``count`` sessions noted in ``host_root``, in a
        thread of its own, at most once every ``_READ_EVERY_S``."""
        now = time.monotonic()
        with self._lock:
            if count <= 0 or now - self._read.get(host_root, -_READ_EVERY_S) < _READ_EVERY_S:
                return
            self._read[host_root] = now
        threading.Thread(
            target=_each, args=(host_root, count, want), name="bash-peers", daemon=True
        ).start()


def ahead_of_peers(
    settings: BashSettings,
    bwrap: str,
    session: str,
    host_folder: Path,
    workspace: Path,
    worker_folders: tuple[Path, ...],
) -> None:
    """Note that ``session`` (its host folder and workspace as given) runs bash here, and have
    the sandboxes of the host's other recent sessions made ahead on this worker."""
    host_root, sessions_root = host_folder.parent, workspace.parent
    _peers.note(host_root, session)

    def want(name: str) -> None:
        folder = sessions_root / name
        if name == session or not folder.is_dir():
            return  # its own sandbox is asked for as the call takes its launch
        network: list[str] = []
        if not settings.network:
            joined = current(host_root / name)
            if joined is None:
                return  # its network is not there yet: its next call starts it
            network = joined
        make_ahead(settings, bwrap, folder, worker_folders, network, True)

    _peers.ahead(host_root, settings.warm, want)


def recent(host_root: Path, count: int) -> list[str]:
    """The last ``count`` different session names noted in ``host_root``, the latest first."""
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
        if name and "/" not in name and not name.startswith(".") and name not in names:
            names.append(name)
            if len(names) == count:
                break
    return names


def _each(host_root: Path, count: int, want: Callable[[str], None]) -> None:
    for name in recent(host_root, count):
        with contextlib.suppress(Exception):  # the thread must end quietly: one less made
            want(name)


_peers = Peers()


def peers() -> Peers:
    """This worker process's notes of its host's sessions."""
    return _peers
