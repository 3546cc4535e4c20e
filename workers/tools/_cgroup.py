"""A cgroup per bash command: limits on its whole process tree, and what hit them.

A per-process limit (``ulimit``) cannot bound a fork bomb or the memory of many processes;
a cgroup can. Each command gets a fresh cgroup under the worker's own, one per controller:
``pids`` (the number of processes), ``memory`` (resident memory, swap included where the
kernel accounts it) and the CPU time used, on cgroup v2 or on the controllers a v1 (or
hybrid) machine mounts. The launcher joins it before it runs anything (``procs_files``);
afterwards the counters say which limit was reached, and every process left in the cgroup,
``setsid`` ones included, is killed.

Creating cgroups needs write access to the worker's cgroup: a root worker, or a delegated
cgroup (systemd ``Delegate=yes``). Without it ``find_cgroups`` says why, and bash falls back
to per-process limits.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# The controllers used, by the name the v1 mount options give them.
_V1_NAMES = {"pids": "pids", "memory": "memory", "cpu": "cpuacct"}
_PREFIX = "toolpool-call-"
_counter = itertools.count(1)
# How long remove() waits for the killed processes to leave the cgroup.
_EMPTY_WAIT = 2.0


@dataclass(frozen=True)
class Limits:
    """What one command may use; 0 means no limit."""

    processes: int = 0
    memory_bytes: int = 0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class _Place:
    """Where one controller's per-call cgroups are made, and on which cgroup version."""

    parent: Path
    version: int


@dataclass(frozen=True)
class Cgroups:
    """The controllers this worker can confine commands with (``None``: not available)."""

    pids: _Place | None
    memory: _Place | None
    cpu: _Place | None
    # Why a controller is missing, for the worker's start-up message.
    missing: tuple[str, ...] = ()

    def describe(self, controller: str) -> str:
        place: _Place | None = getattr(self, controller)
        return "no cgroup" if place is None else f"cgroup v{place.version}"


@cache
def find_cgroups() -> Cgroups:
    """Find writable cgroups for this process, once per process."""
    cgroups = discover(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup"))
    for place in (cgroups.pids, cgroups.memory, cgroups.cpu):
        if place is not None:
            _sweep(place.parent)
    return cgroups


def discover(mountinfo: str, own_cgroups: str) -> Cgroups:
    """The controllers usable, from ``/proc/self/mountinfo`` and ``/proc/self/cgroup``."""
    mounts = _cgroup_mounts(mountinfo)
    own = _own_cgroups(own_cgroups)
    places: dict[str, _Place | None] = {}
    missing: list[str] = []
    for controller in ("pids", "memory", "cpu"):
        place, why = _place_for(controller, mounts, own)
        places[controller] = place
        if place is None:
            missing.append(f"{controller}: {why}")
    return Cgroups(places["pids"], places["memory"], places["cpu"], tuple(missing))


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, root inside the hierarchy, super options) of each cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((after[0], Path(_unescape(fields[4])), fields[3], set(after[2].split(","))))
    return found


def _unescape(path: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def _own_cgroups(text: str) -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            own[name] = parts[2]
    return own


def _place_for(
    controller: str, mounts: list[tuple[str, Path, str, set[str]]], own: dict[str, str]
) -> tuple[_Place | None, str]:
    why = "no cgroup hierarchy offers it"
    for fstype, point, root, options in mounts:
        if fstype == "cgroup2":
            if "" not in own:
                continue
            parent = _inside(point, root, own[""])
            if parent is None:
                continue
            ok, why = _v2_ready(parent, controller)
            if ok:
                return _Place(parent, 2), ""
        elif _V1_NAMES[controller] in options:
            path = own.get(_V1_NAMES[controller])
            parent = None if path is None else _inside(point, root, path)
            if parent is None:
                continue
            if os.access(parent, os.W_OK):
                return _Place(parent, 1), ""
            why = f"{parent} is not writable by this worker"
    return None, why


def _inside(point: Path, root: str, path: str) -> Path | None:
    """The folder of cgroup ``path`` under a mount of the hierarchy's ``root`` at ``point``."""
    relative = os.path.relpath(path, root)
    if relative.startswith(".."):
        return None
    folder = point / relative if relative != "." else point
    return folder if folder.is_dir() else None


def _v2_ready(parent: Path, controller: str) -> tuple[bool, str]:
    """Whether children of ``parent`` get the v2 ``controller``, enabling it if need be."""
    if controller == "cpu":
        # cpu.stat (the usage read here) exists in every v2 cgroup, with or without "cpu".
        ok = os.access(parent, os.W_OK)
        return ok, "" if ok else f"{parent} is not writable by this worker"
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if controller in enabled:
            return os.access(parent, os.W_OK), f"{parent} is not writable by this worker"
        (parent / "cgroup.subtree_control").write_text(f"+{controller}")
    except OSError as exc:
        # EBUSY: the worker's own cgroup holds processes, so (cgroup v2's rule) it cannot also
        # hand controllers to children. A delegated cgroup with the worker in a leaf can.
        return False, f"cannot enable it under {parent} ({exc.strerror})"
    return True, ""


def _sweep(parent: Path) -> None:
    """Remove per-call cgroups that workers no longer alive left behind (empty ones only)."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(_PREFIX) and not _pid_alive(_owner(entry.name)):
                with contextlib.suppress(OSError):
                    entry.rmdir()


def _owner(name: str) -> int:
    try:
        return int(name[len(_PREFIX) :].split("-", 1)[0])
    except ValueError:
        return 0


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CallCgroup:
    """One command's cgroups: created with the limits, joined by the launcher, then removed."""

    def __init__(self, cgroups: Cgroups, limits: Limits, track: bool = False) -> None:
        """Make the cgroups ``limits`` need; with ``track``, at least one that lists the
        command's processes, to kill those that leave its process group."""
        self._cgroups = cgroups
        self.limits = limits
        # The random part: a cgroup left by an earlier process of the same (reused) pid.
        name = f"{_PREFIX}{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"
        self._dirs: dict[str, Path] = {}
        try:
            for controller in self.needed(cgroups, limits, track):
                place: _Place | None = getattr(cgroups, controller)
                assert place is not None  # needed() names only controllers that exist
                folder = place.parent / name
                if folder not in self._dirs.values():  # v2: one folder for all controllers
                    folder.mkdir()
                self._dirs[controller] = folder
            self._write_limits()
        except OSError:
            self.remove()
            raise

    @staticmethod
    def needed(cgroups: Cgroups, limits: Limits, track: bool = False) -> list[str]:
        """The controllers to use: each limit's own, where the machine has it. Joining a
        cgroup is not free (on some kernels a sleeping process wakes late in one), so a
        limit set to 0 costs nothing."""
        wanted = {
            "pids": bool(limits.processes),
            "memory": bool(limits.memory_bytes),
            "cpu": bool(limits.cpu_seconds),
        }
        chosen = [name for name, want in wanted.items() if want and getattr(cgroups, name)]
        if track and not chosen:
            chosen = [name for name in wanted if getattr(cgroups, name)][:1]
        return chosen

    @property
    def procs_files(self) -> list[str]:
        """The files the launcher writes its pid to, before it runs the command."""
        return [str(folder / "cgroup.procs") for folder in dict.fromkeys(self._dirs.values())]

    def _write_limits(self) -> None:
        pids, memory = self._dirs.get("pids"), self._dirs.get("memory")
        if pids is not None and self.limits.processes:
            (pids / "pids.max").write_text(str(self.limits.processes))
        if memory is not None and self.limits.memory_bytes:
            size = str(self.limits.memory_bytes)
            # The swap files exist only where the kernel accounts swap (creating one is EACCES).
            if self._version("memory") == 2:
                (memory / "memory.max").write_text(size)
                if (memory / "memory.swap.max").exists():
                    (memory / "memory.swap.max").write_text("0")
            else:
                (memory / "memory.limit_in_bytes").write_text(size)
                if (memory / "memory.memsw.limit_in_bytes").exists():
                    (memory / "memory.memsw.limit_in_bytes").write_text(size)

    def _version(self, controller: str) -> int:
        place: _Place | None = getattr(self._cgroups, controller)
        return 0 if place is None else place.version

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by every process of the command, or None where not counted."""
        folder = self._dirs.get("cpu")
        try:
            if folder is None:
                return None
            if self._version("cpu") == 2:
                return _counter_in(folder / "cpu.stat", "usage_usec") / 1e6
            return int(_small(folder / "cpuacct.usage")) / 1e9
        except (OSError, ValueError):
            return None

    def processes_refused(self) -> int:
        """How many times a fork was refused because the processes limit was reached."""
        folder = self._dirs.get("pids")
        return 0 if folder is None else _counter_in(folder / "pids.events", "max")

    def memory_kills(self) -> int:
        """How many processes the kernel killed for reaching the memory limit."""
        folder = self._dirs.get("memory")
        if folder is None:
            return 0
        name = "memory.events" if self._version("memory") == 2 else "memory.oom_control"
        return _counter_in(folder / name, "oom_kill")

    def pids(self) -> set[int]:
        """The processes still in the command's cgroups."""
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(line) for line in _small(path).split())
        return found

    def kill(self, spare: Callable[[int], bool] | None = None) -> bool:
        """SIGKILL every process left in the cgroups and wait until they are gone; True if
        there was one. A process ``spare`` names is killed but not waited for (a sandbox's
        init, which runs no command code and takes its namespaces down as it goes)."""
        killed = False
        end = time.monotonic() + _EMPTY_WAIT
        ended: set[int] = set()
        while (left := self.pids() - ended) and time.monotonic() < end:
            killed = True
            waits = {}
            for pid in left:
                try:
                    handle = _pidfd(pid)
                except ProcessLookupError:
                    ended.add(pid)  # gone since the list was read: nothing to kill
                    continue
                _sigkill(pid, handle)
                if handle is None:
                    continue
                if spare is not None and spare(pid):
                    os.close(handle)
                    ended.add(pid)
                else:
                    waits[handle] = pid
            if not waits and left - ended:
                time.sleep(0.01)  # no pidfds here: the kernel removes an exiting process shortly
            # A pidfd is readable once its process has exited (a zombie listed a while yet).
            ended.update(_exited(waits, end - time.monotonic()))
        return killed

    def remove(self) -> None:
        """Kill what is left and remove the cgroups (a leftover is swept by a later worker)."""
        self.kill()
        for folder in dict.fromkeys(self._dirs.values()):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._dirs.clear()


def _pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``; None where pidfds are missing or refused (``ProcessLookupError``:
    the process is gone)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except ProcessLookupError:
        raise
    except OSError:
        return None
    return fd


def _sigkill(pid: int, handle: int | None) -> None:
    # Through the pidfd where there is one: the pid cannot have been reused meanwhile.
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if handle is not None:
            signal.pidfd_send_signal(handle, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _exited(waits: dict[int, int], timeout: float) -> set[int]:
    """Wait up to ``timeout`` for the processes of the pidfds ``waits`` to exit; the pids of
    those that did. Closes every pidfd."""
    done: set[int] = set()
    try:
        with selectors.DefaultSelector() as selector:
            for handle in waits:
                selector.register(handle, selectors.EVENT_READ)
            end = time.monotonic() + max(timeout, 0.0)
            while len(done) < len(waits) and (left := end - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    selector.unregister(key.fd)
                    done.add(waits[key.fd])
    finally:
        for handle in waits:
            os.close(handle)
    return done


def _counter_in(path: Path, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file ("key value" lines); 0 if absent."""
    try:
        for line in _small(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return 0
    return 0


def _small(path: Path | str) -> str:
    """A small file's text (a cgroup's list or counters), read without a text layer."""
    with open(path, "rb", buffering=0) as stream:
        return stream.read().decode()
