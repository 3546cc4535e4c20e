"""A session's own network namespace on this host: one loopback all its commands share.

Sandboxed commands otherwise get a fresh, empty network each; a server started in the
background would then be out of reach of the session's next command. So a session's commands
(``bash`` and its background processes) join one namespace of the session's own, held open by
a small holder process: its loopback is up, nothing else is in it, and no other session can
reach it. The holder lives until the session is deleted or expires, or the pool on this host
stops; the next command makes a new one. It starts light: bubblewrap makes the namespace
(its loopback up) and runs the shell that keeps it, a few milliseconds; without bubblewrap, a
Python of the standard library alone (``python -I -S -c _HOLD FOLDER``, about 20 ms, where one
importing toolpool takes 100 ms and more) makes it and becomes that shell.

A background process (``join``) starts the holder at once. A bash command finds it with
``current``; where there is none yet, the session has nothing serving on a loopback, so the
command runs in a network of its own (the same, empty) while ``start_soon`` starts the holder
off its path, for the next command.

Joining another process's namespace takes ``CAP_SYS_ADMIN``: a worker running as root does it
with ``nsenter``. Elsewhere ``join`` says why it cannot, and each command keeps its own empty
network (the tools say so in their answer).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path

from executor import ToolError
from workers.processes._daemon import NETNS_OF, daemon_env, start_daemon
from workers.processes._place import NETNS_PID, daemon_alive

log = logging.getLogger(__name__)

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def join(host_folder: Path, make: bool = True) -> tuple[list[str], str]:
    """The command prefix that joins the session's namespace (made if need be), and "";
    or ``[]`` and why the session cannot have one here. ``make`` False: its host folder
    must be there (``FileNotFoundError``: the session is gone, or being deleted)."""
    why = _why_not()
    if why:
        return [], why
    nsenter = _nsenter()
    assert nsenter is not None  # _why_not says so
    if make:
        host_folder.mkdir(parents=True, exist_ok=True)
    marker = str(host_folder)
    with _locked(host_folder / f"{NETNS_PID}.lock"):
        pid = _holder(host_folder)
        if pid is None or not daemon_alive(pid, marker):
            pid = _start_holder(marker)
            (host_folder / NETNS_PID).write_text(str(pid))
    return _prefix(nsenter, pid), ""


def _start_holder(marker: str) -> int:
    """Start a holder for the host folder ``marker``: with bubblewrap where there is one (a
    few ms), else (or where it fails) with a Python of the standard library (20 ms and more)."""
    env = daemon_env({NETNS_OF: marker})
    bwrap = _bwrap()
    if bwrap is not None:
        with contextlib.suppress(ToolError):
            argv = ["/bin/sh", "-c", _DETACHED, bwrap, _READY_THEN_KEEP, marker]
            return start_daemon(argv, env, "the session network")
    argv = [sys.executable, "-I", "-S", "-c", _HOLD, marker]
    return start_daemon(argv, env, "the session network")


def current(host_folder: Path) -> list[str] | None:
    """The prefix that joins the session's namespace if its holder runs (waiting for a start
    of this process under way); ``[]`` where the session cannot have one here; None: none
    yet. Without the lock: a holder is only ever started whole, under it."""
    if _why_not():
        return []
    with _starts_lock:
        starting = _starts.get(host_folder)
    if starting is not None:
        starting.join()
    try:
        stamp = _stamp(os.stat(host_folder / NETNS_PID))
    except OSError:
        return None
    known = _known.get(host_folder)
    if known is not None and known.stamp == stamp and known.alive():
        return known.prefix
    pid = _holder(host_folder)
    nsenter = _nsenter()
    if pid is None or nsenter is None:
        return None
    # The pidfd first, then the check: the holder it pins is the one checked, not a later
    # process given the same pid.
    found = _Known(stamp, _prefix(nsenter, pid), _pidfd(pid))
    if not daemon_alive(pid, str(host_folder)):
        found.close()
        return None
    _remember(host_folder, found)
    return found.prefix


class _Known:
    """A holder found running: while its pid file is the same file, unchanged, and it has not
    exited (its pidfd not readable), it is the session's holder still."""

    def __init__(self, stamp: tuple[int, int, int], prefix: list[str], pidfd: int | None) -> None:
        self.stamp, self.prefix, self.pidfd = stamp, prefix, pidfd

    def alive(self) -> bool:
        if self.pidfd is None:
            return False  # no pidfd here: checked in full each time
        try:
            return not select.select([self.pidfd], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


def _remember(host_folder: Path, found: _Known) -> None:
    with _starts_lock:
        old = _known.pop(host_folder, None)
        _known[host_folder] = found
        gone = [old] if old is not None else []
        while len(_known) > _KNOWN_MAX:
            gone.append(_known.pop(next(iter(_known))))
    for known in gone:
        known.close()


def _stamp(found: os.stat_result) -> tuple[int, int, int]:
    # A holder's pid file is written whole once per holder: another holder, another stamp.
    return found.st_ino, found.st_mtime_ns, found.st_size


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def start_soon(host_folder: Path, then: Callable[[list[str]], None]) -> None:
    """Start the session's holder in a thread of this process, unless one is on its way, and
    hand its prefix to ``then``. In a forked worker (whose threads end with its job) now."""
    with _starts_lock:
        if host_folder in _starts:
            return
        thread = threading.Thread(
            target=_start, args=(host_folder, then), name="session-network", daemon=True
        )
        if not _forked:
            _starts[host_folder] = thread
    if _forked:
        _start(host_folder, then)
    else:
        thread.start()


def _start(host_folder: Path, then: Callable[[list[str]], None]) -> None:
    try:
        prefix, _ = join(host_folder)
        if prefix:
            then(prefix)
    except Exception as exc:  # the thread must end quietly: the next command starts its own
        log.warning("toolpool: the session network of %s could not start: %s", host_folder, exc)
    finally:
        with _starts_lock:
            _starts.pop(host_folder, None)


def _why_not() -> str:
    if os.geteuid() != 0:
        return "a session network of its own needs a worker running as root"
    if _nsenter() is None:
        return "a session network of its own needs nsenter (util-linux) on the worker"
    return ""


@cache
def _nsenter() -> str | None:
    return shutil.which("nsenter")


@cache
def _bwrap() -> str | None:
    return shutil.which("bwrap")


def _prefix(nsenter: str, pid: int) -> list[str]:
    return [nsenter, f"--net=/proc/{pid}/ns/net", "--"]


# The holders this process is starting (``start_soon``), by host folder.
_starts: dict[Path, threading.Thread] = {}
# The holders ``current`` found running, by host folder (each holds a pidfd), the latest last.
_known: dict[Path, _Known] = {}
_KNOWN_MAX = 256
_starts_lock = threading.Lock()
_forked = False


def _in_forked_child() -> None:
    # The parent's starts are not the child's, and its lock may have been held at the fork.
    global _forked, _starts_lock  # noqa: PLW0603 -- set once, in a forked child
    _forked = True
    _starts.clear()
    _starts_lock = threading.Lock()


os.register_at_fork(after_in_child=_in_forked_child)


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

# Said by the shell, so that a holder reported ready is the shell already (its command line
# the one ``daemon_alive`` checks, not one half-way through the exec).
_READY_THEN_KEEP = 'echo "ready $$"; exec >/dev/null; ' + _KEEP

# The holder with bubblewrap (``sh -c _DETACHED BWRAP _READY_THEN_KEEP FOLDER``): bubblewrap
# makes the namespace with its loopback up and runs the shell in it; the first shell exits at
# once (the starter reaps it) and bubblewrap stays as the shell's parent. The system as it is
# (``--dev-bind / /``), no capability kept.
_DETACHED = (
    '"$0" --dev-bind / / --unshare-net --cap-drop ALL -- /bin/sh -c "$1" toolpool-netns "$2" '
    "& exit 0"
)

# The holder without bubblewrap (``python -I -S -c _HOLD FOLDER``), of the standard library
# alone. As any daemon of ours (``workers.processes._daemon``): it forks, its first process
# exiting at once; says ``ready PID`` (the shell it becomes) or ``error MESSAGE`` on its
# standard output, then stops writing there. Its namespace made with the loopback up, it
# becomes the shell that keeps it: the same pid, the folder still an argument of its own
# (``daemon_alive``).
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
os.execv("/bin/sh", ["sh", "-c", {_READY_THEN_KEEP!r}, "toolpool-netns", sys.argv[1]])
"""
