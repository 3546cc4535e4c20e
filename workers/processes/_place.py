"""Where a session's host-side state lives on this host's disk, and how it is read and written.

A session's folder is its workspace; its host state sits beside the sessions, out of every
command's sight (the sandbox hides the sessions root but for the session's own folder):

    SESSIONS_ROOT/.toolpool-host/NAME/          the session's host state
        netns.pid                               the holder of its network namespace
        p1/ p2/ ...                             one folder per background process
            spec.json   what to run (written once by the worker that starts it)
            state.json  its ProcessRecord, its keeper's pid and, while it runs, its
                        cgroups (rewritten whole, by rename)
            output      what it wrote to its terminal, as written
            stdin       a FIFO: what a worker writes here, the keeper types into the terminal
            stop        why it is being stopped (written before the keeper is signalled)
            keeper.log  the keeper's own messages

Every worker of the host reads and drives a process through these files; the keeper that runs
it is named by the folder on its command line, so a pid that was reused is never taken for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from executor.wire import ProcessRecord

HOST_STATE = ".toolpool-host"
SPEC, STATE, OUTPUT, STDIN, STOP, LOG = (
    "spec.json",
    "state.json",
    "output",
    "stdin",
    "stop",
    "keeper.log",
)
NETNS_PID = "netns.pid"
# The key of state.json that lists the command's cgroup.procs files while it runs.
CGROUPS = "cgroups"
# Seconds a process's command gets between SIGTERM and SIGKILL when it is stopped.
STOP_GRACE = 2.0


def session_host_folder(sessions_root: Path, name: str) -> Path:
    """The folder of session ``name``'s host state (not created here)."""
    return sessions_root / HOST_STATE / name


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` whole or not at all (a reader never sees half of it)."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as stream:
            json.dump(data, stream)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None if it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def process_folders(host_folder: Path) -> list[Path]:
    """The session's process folders, oldest first (p1, p2, ..., p10)."""
    try:
        entries = [p for p in host_folder.iterdir() if p.name[:1] == "p" and p.name[1:].isdigit()]
    except OSError:
        return []
    return sorted(entries, key=lambda p: int(p.name[1:]))


def new_process_folder(host_folder: Path) -> Path:
    """Make the next process folder (``p<N>``); two workers never get the same one."""
    host_folder.mkdir(parents=True, exist_ok=True)
    existing = process_folders(host_folder)
    number = int(existing[-1].name[1:]) + 1 if existing else 1
    while True:
        folder = host_folder / f"p{number}"
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            number += 1
            continue
        return folder


def daemon_alive(pid: int, marker: str) -> bool:
    """True while ``pid`` runs a toolpool daemon whose command line names ``marker``."""
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat[stat.rfind(")") + 2 :][:1] in ("Z", "X"):
        return False  # exited, not yet reaped
    return marker.encode() in cmdline.split(b"\0")


def read_record(folder: Path) -> tuple[ProcessRecord, int] | None:
    """A process's record and its keeper's pid, as the keeper last wrote them."""
    # Here, not at the top: a keeper writes records as plain data and never loads pydantic.
    from executor.wire import ProcessRecord

    data = read_json(folder / STATE)
    if data is None:
        return None
    keeper = int(data.pop("keeper_pid", 0) or 0)
    try:
        return ProcessRecord.model_validate(data), keeper
    except ValueError:
        return None
