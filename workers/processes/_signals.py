"""Signals to a background process: to the command's own processes, not to its sandbox.

The command is its process group (the keeper's child leads it). In the sandbox, bubblewrap's
own two processes are members too, and a signal that ends them (SIGINT, SIGHUP, SIGTERM, ...)
would end the whole sandbox at once, with no chance for the command to act on it. So a
signal goes to the members that are not bubblewrap; only SIGKILL goes to the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_SANDBOX = "bwrap"
# How per-call cgroups are named (``workers.tools._cgroup._PREFIX``; the tools' modules are
# above this package's layer); only these are ever emptied here.
_CALL_CGROUP = "toolpool-call-"
# How long the kernel gets to move killed processes out of their cgroup.
_EMPTY_WAIT = 2.0


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which may itself hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def signal_members(pgid: int, signum: signal.Signals) -> int:
    """Send ``signum`` to the group's processes but the sandbox's own; how many got it."""
    sent = 0
    for pid in group_members(pgid):
        if _is_sandbox(pid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
            sent += 1
    return sent


def _is_sandbox(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == _SANDBOX
    except OSError:
        return False


def kill_left_in(procs_files: list[str]) -> int:
    """SIGKILL what is left in the per-call cgroups whose ``cgroup.procs`` files these are,
    and remove them: for a command whose keeper died without doing it. Files of any other
    cgroup are left alone. How many processes were killed."""
    folders = [
        Path(path).parent
        for path in procs_files
        if Path(path).name == "cgroup.procs" and Path(path).parent.name.startswith(_CALL_CGROUP)
    ]
    killed: set[int] = set()
    end = time.monotonic() + _EMPTY_WAIT
    while folders and time.monotonic() < end:
        left: set[int] = set()
        for folder in folders:
            with contextlib.suppress(OSError, ValueError):
                left.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= left
        time.sleep(0.01)  # the kernel removes an exiting process from its cgroup shortly
    for folder in dict.fromkeys(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()
    return len(killed)
