"""Ending background processes with what owns them: a session, or the pool on this host.

A session's processes stop when it is deleted or idles out, before its folder goes: each
keeper is asked to stop (its process gets SIGTERM, then SIGKILL), its network holder ends,
and its host folder is removed. A pool that stops stops the processes its workers started
(the keepers and holders carrying its mark), each recorded with why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from workers.processes import _place as place
from workers.processes._daemon import KEEPER_OF, NETNS_OF, POOL_MARK
from workers.processes._netns import stop_holder
from workers.processes._place import STOP_GRACE
from workers.processes._table import ask_stop, entry_of

# Beyond the grace: time for a keeper to kill, drain and record.
_RECORD_S = 5.0
_KEEPER = f"\0{KEEPER_OF}=".encode()


def end_session(sessions_root: Path, name: str, reason: str) -> int:
    """Stop session ``name``'s processes on this host and remove its host folder; how many."""
    folder = place.session_host_folder(sessions_root, name)
    if not folder.exists():
        return 0
    keepers = []
    for process in place.process_folders(folder):
        found = place.read_record(process)
        if found is not None and found[0].state in ("starting", "running"):
            ask_stop(process, found[1], reason)
            keepers.append((found[1], str(process)))
    _wait_gone(keepers)
    for process in place.process_folders(folder):
        entry_of(process)  # a keeper that died (or was killed just now): kill what it left
    stop_holder(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return len(keepers)


def end_pool(pool_id: str, reason: str) -> int:
    """Stop the background processes and session networks the pool ``pool_id``'s workers
    started on this host; how many processes were stopped."""
    needle = f"\0{POOL_MARK}={pool_id}\0".encode()
    keepers = []
    for pid, environ in _marked(needle):
        if _KEEPER in environ:
            folder = _value(environ, KEEPER_OF)
            ask_stop(Path(folder), pid, reason)
            keepers.append((pid, folder))
        else:  # a session's network holder
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
    _wait_gone(keepers)
    for _, folder in keepers:
        entry_of(Path(folder))  # a keeper killed past the wait: kill what it left
    return len(keepers)


def end_under(folder: Path, reason: str) -> int:
    """Stop every keeper and session network of sessions roots under ``folder`` (a test's
    temporary folder, whose workers were no pool); how many processes were stopped."""
    prefix = (str(folder).rstrip("/") + "/").encode()
    keepers = []
    for key in (KEEPER_OF, NETNS_OF):
        for pid, environ in _marked(f"\0{key}=".encode() + prefix):
            served = _value(environ, key)
            if key == KEEPER_OF:
                ask_stop(Path(served), pid, reason)
                keepers.append((pid, served))
            else:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
    _wait_gone(keepers)
    return len(keepers)


def _value(environ: bytes, key: str) -> str:
    start = environ.index(f"\0{key}=".encode()) + len(key) + 2
    return environ[start : environ.index(b"\0", start)].decode(errors="replace")


def _marked(needle: bytes) -> list[tuple[int, bytes]]:
    """The processes whose environment holds ``needle``, with their environments."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = b"\0" + (entry / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if needle in environ:
            found.append((int(entry.name), environ))
    return found


def _wait_gone(keepers: list[tuple[int, str]]) -> None:
    """Wait for the keepers to record their end; SIGKILL those that do not in time."""
    end = time.monotonic() + STOP_GRACE + _RECORD_S
    while time.monotonic() < end:
        if not any(place.daemon_alive(pid, marker) for pid, marker in keepers):
            return
        time.sleep(0.02)
    for pid, marker in keepers:
        if place.daemon_alive(pid, marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
