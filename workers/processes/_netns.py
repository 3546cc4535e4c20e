"""A session's own network namespace on this host: one loopback all its commands share.

Sandboxed commands otherwise get a fresh, empty network each; a server started in the
background would then be out of reach of the session's next command. So a session's commands
(``bash`` and its background processes) join one namespace of the session's own, held open by
a small holder process: its loopback is up, nothing else is in it, and no other session can
reach it. The holder lives until the session is deleted or expires, or the pool on this host
stops; the next command makes a new one. It is started by the session's first command, so it
starts light: a Python of the standard library alone (``python -I -S -c _HOLD FOLDER``, about
20 ms, where one importing toolpool takes 100 ms and more), which makes the namespace and
becomes the shell that keeps it.

Joining another process's namespace takes ``CAP_SYS_ADMIN``: a worker running as root does it
with ``nsenter``. Elsewhere ``join`` says why it cannot, and each command keeps its own empty
network (the tools say so in their answer).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
from pathlib import Path

from workers.processes._daemon import NETNS_OF, daemon_env, start_daemon
from workers.processes._place import NETNS_PID, daemon_alive

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def join(host_folder: Path) -> tuple[list[str], str]:
    """The command prefix that joins the session's namespace (made if need be), and "";
    or ``[]`` and why the session cannot have one here."""
    nsenter = shutil.which("nsenter")
    if os.geteuid() != 0:
        return [], "a session network of its own needs a worker running as root"
    if nsenter is None:
        return [], "a session network of its own needs nsenter (util-linux) on the worker"
    host_folder.mkdir(parents=True, exist_ok=True)
    marker = str(host_folder)
    with _locked(host_folder / f"{NETNS_PID}.lock"):
        pid = _holder(host_folder)
        if pid is None or not daemon_alive(pid, marker):
            argv = [sys.executable, "-I", "-S", "-c", _HOLD, marker]
            env = daemon_env({NETNS_OF: marker})
            pid = start_daemon(argv, env, "the session network")
            (host_folder / NETNS_PID).write_text(str(pid))
    return [nsenter, f"--net=/proc/{pid}/ns/net", "--"], ""


def stop_holder(host_folder: Path) -> None:
    """End the session's holder, if one runs (its namespace goes with its last process)."""
    pid = _holder(host_folder)
    if pid is not None and daemon_alive(pid, str(host_folder)):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def _holder(host_folder: Path) -> int | None:
    try:
        return int((host_folder / NETNS_PID).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _locked(path: Path):  # type: ignore[no-untyped-def]
    with open(path, "a") as stream:
        fcntl.flock(stream, fcntl.LOCK_EX)
        yield


# What the holder becomes once its namespace is made: a shell that keeps it (a Python would
# hold 20 MiB for nothing) while the session's host folder exists, until SIGTERM.
_KEEP = "trap 'kill $! 2>/dev/null; exit 0' TERM; while [ -d \"$1\" ]; do sleep 30 & wait $!; done"

# The holder (``python -I -S -c _HOLD FOLDER``), of the standard library alone. As any daemon
# of ours (``workers.processes._daemon``): it forks, its first process exiting at once; says
# ``ready PID`` or ``error MESSAGE`` on its standard output, then stops writing there. Its
# namespace made with the loopback up, it becomes the shell that keeps it: the same pid, and
# the folder still an argument of its own (``daemon_alive``).
_HOLD = f"""
import ctypes, fcntl, os, socket, struct, sys
if os.fork():
    os._exit(0)
def say(line):
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
try:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare({_CLONE_NEWNET}) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, {_SIOCGIFFLAGS}, asked))[1]
        up = struct.pack("16sH14s", b"lo", flags | {_IFF_UP}, b"")
        fcntl.ioctl(sock, {_SIOCSIFFLAGS}, up)
except OSError as exc:
    say("error " + " ".join(f"the session network could not be made: {{exc}}".split()))
    sys.exit(1)
os.setsid()
say(f"ready {{os.getpid()}}")
os.execv("/bin/sh", ["sh", "-c", {_KEEP!r}, "toolpool-netns", sys.argv[1]])
"""
