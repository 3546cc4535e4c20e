"""Sandboxes made ahead for the sessions this host made (or ran bash in) lately.

A session's calls come round to each worker of its host, so a worker that ran none of its calls
yet would make its sandbox in the call: bubblewrap's namespaces and mounts, about 10 ms on a
quiet machine and many times that on a busy one, and every session's first call would pay it. So
the host notes its sessions in a small file (``workers.processes._recent``): a session's name
when it is made (the worker that makes its folder) and, with ``TOOLPOOL_BASH_WARM_PEERS`` "all",
each bash call in a session, at most once every 5 s per worker. A worker process that ran bash
in the host's sessions watches that file, and as it changes has the sandboxes of the last
``BashSettings.warm`` sessions made there (with "all": or run in) made ahead (``_shell_warm``),
each checked as any unit is when a call takes it; a session's network holder is started first
where it has none yet (a session just made), so that the sandbox is made in it. Sessions just
made are acted on only while the host runs no bash back to back (``_quiet_soon``). At most
``warm`` sessions new to a worker are acted on a second: a burst of sessions made does not make
a sandbox each. Where the file cannot be watched, a worker reads its end beside a command, once
a second.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from workers.processes._netns import current, join
from workers.processes._recent import RECENT, mark_ran, note, ran_lately, recent, watch
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_warm import make_ahead, units

__all__ = ["RECENT", "Peers", "ahead_of_peers", "peers", "recent"]

# How often a worker without a watch reads the file, and how often one notes the same session
# (each note wakes every watching worker of the host).
_READ_EVERY_S = 1.0
_NOTE_EVERY_S = 5.0
# The window in which at most ``warm`` sessions new to a watching worker are acted on.
_NEW_EVERY_S = 1.0
# How many session names a worker remembers having acted on.
_SEEN = 4096
# A session just made is acted on once no worker of the host has started bash for _QUIET_S
# (and, with ``BashSettings.warm_peers_idle``, the machine's CPUs were that idle over that
# time), looked at every _QUIET_POLL_S for at most _QUIET_WAIT_S: on a host busy with calls,
# CPU goes to them (a burst of sessions made beside four agents calling bash back to back
# cost them a third of their calls/s).
_QUIET_S, _QUIET_POLL_S, _QUIET_WAIT_S = 0.1, 0.05, 2.0


class _Watched:
    """What a worker's watch of one host acts with: the latest call's way to want a sandbox."""

    def __init__(self, want: Callable[[str], None], count: int, ran: bool, idle: float) -> None:
        self.want, self.count, self.ran, self.idle = want, count, ran, idle
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.new_at: list[float] = []


class Peers:
    """What one worker process noted and read of its host's recent sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._noted: dict[tuple[Path, str], float] = {}
        self._read: dict[Path, float] = {}
        self._watched: dict[Path, _Watched | None] = {}

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
            note(host_root, name, ran=True)

    def serve(
        self,
        host_root: Path,
        count: int,
        want: Callable[[str], None],
        ran: bool = False,
        idle: float = 0.0,
    ) -> None:
        """Hand ``want`` the last ``count`` sessions noted in ``host_root`` as they were made
        (and, with ``ran``, as they ran bash) as they change (a watch, started on the first
        call), else at most once every ``_READ_EVERY_S``. Without ``ran``, the watch acts
        only while the host runs no bash back to back and, with ``idle`` above 0, that share
        of the machine's CPU is idle (``_quiet_soon``)."""
        if count <= 0:
            return
        with self._lock:
            watched = self._watched.get(host_root, False)
            if isinstance(watched, _Watched):
                # The latest settings and folders.
                watched.want, watched.count, watched.ran = want, count, ran
                watched.idle = idle
                return
            if watched is False:
                state = _Watched(want, count, ran, idle)
                if watch(
                    host_root,
                    lambda: self._changed(host_root, state),
                    lambda: self._unwatched(host_root),
                ):
                    self._watched[host_root] = state
                    return
                self._watched[host_root] = None  # cannot watch: read beside commands
        self.ahead(host_root, count, want, ran)

    def _unwatched(self, host_root: Path) -> None:
        with self._lock:
            self._watched.pop(host_root, None)  # the folder went: a later call watches anew

    def _changed(self, host_root: Path, state: _Watched) -> None:
        if not state.ran and not _quiet_soon(state.idle, host_root):
            return  # left to their first calls here (and seen again at the next change)
        now = time.monotonic()
        for name in recent(host_root, state.count, state.ran):
            with self._lock:
                if name not in state.seen:
                    state.new_at = [at for at in state.new_at if now - at < _NEW_EVERY_S]
                    if len(state.new_at) >= state.count:
                        continue  # a burst of new sessions: the rest wait for their calls
                    state.new_at.append(now)
                    state.seen[name] = None
                    if len(state.seen) > _SEEN:
                        state.seen.popitem(last=False)
                want = state.want
            with contextlib.suppress(Exception):  # one less made ahead: its call makes it
                want(name)

    def ahead(
        self, host_root: Path, count: int, want: Callable[[str], None], ran: bool = False
    ) -> None:
        """Hand ``want`` each of the last ``count`` sessions noted in ``host_root`` (``ran``:
        as ``serve``), in a thread of its own, at most once every ``_READ_EVERY_S``."""
        now = time.monotonic()
        with self._lock:
            if count <= 0 or now - self._read.get(host_root, -_READ_EVERY_S) < _READ_EVERY_S:
                return
            self._read[host_root] = now
        threading.Thread(
            target=_each, args=(host_root, count, want, ran), name="bash-peers", daemon=True
        ).start()

    def forget(self) -> None:
        """In a forked child: no watch of the parent's runs here (nor is needed)."""
        self._lock = threading.Lock()
        self._watched = dict.fromkeys(self._watched)


def ahead_of_peers(
    settings: BashSettings,
    bwrap: str,
    session: str,
    host_folder: Path,
    workspace: Path,
    worker_folders: tuple[Path, ...],
) -> None:
    """Have the sandboxes of the host's sessions just made (``warm_peers`` "new") made ahead on
    this worker; with "all", also of those that ran bash lately, noting that ``session`` (its
    host folder and workspace as given) runs bash here."""
    host_root, sessions_root = host_folder.parent, workspace.parent

    def want(name: str) -> None:
        folder = sessions_root / name
        if not folder.is_dir():
            return  # deleted since, or never made on this host
        joined = [] if settings.network else current(host_root / name)
        if joined is not None:
            make_ahead(settings, bwrap, folder, worker_folders, joined, True)
            return

        def start() -> None:
            network = _started(host_root / name)
            if network is not None:
                make_ahead(settings, bwrap, folder, worker_folders, network, True)

        # Sessions just made start their networks side by side (each about 20 ms of CPU).
        threading.Thread(target=start, name="bash-peer-network", daemon=True).start()

    mark_ran(host_root)
    ran = settings.warm_peers == "all"
    if ran:
        _peers.note(host_root, session)
    _peers.serve(host_root, settings.warm, want, ran, settings.warm_peers_idle)


def _started(host_folder: Path) -> list[str] | None:
    """Start the network of a session that has none yet (just made): its prefix, or None.
    Not where its host folder is gone: a session being deleted gets no network again."""
    with contextlib.suppress(FileNotFoundError):
        prefix, _ = join(host_folder, make=False)
        return prefix
    return None


def _quiet_soon(idle: float, host_root: Path) -> bool:
    """Whether the host's workers run no bash back to back (this one included) and the
    machine's CPU is at least ``idle`` idle, now or within ``_QUIET_WAIT_S``."""
    started = time.monotonic()
    samples = [(started, _cpu_times() if idle > 0 else None)]
    while True:
        now, times = time.monotonic(), _cpu_times() if idle > 0 else None
        old = [sample for at, sample in samples if now - at >= _QUIET_S]
        spare = idle <= 0 or (bool(old) and _idle_share(old[-1], times) >= idle)
        if spare and units().quiet(_QUIET_S) and not ran_lately(host_root, _QUIET_S):
            return True
        if now - started >= _QUIET_WAIT_S:
            return False
        samples.append((now, times))
        time.sleep(_QUIET_POLL_S)


def _cpu_times() -> tuple[int, int] | None:
    """The machine's CPU time so far, idle and in all, in ticks (``/proc/stat``)."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = [int(field) for field in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal: idle and iowait are time to spare.
        return fields[3] + fields[4], sum(fields[:8])
    except (OSError, ValueError, IndexError):
        return None


def _idle_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The share of CPU time idle between two ``_cpu_times``: 1.0 where unknown."""
    if before is None or after is None or after[1] <= before[1]:
        return 1.0
    return (after[0] - before[0]) / (after[1] - before[1])


def _each(host_root: Path, count: int, want: Callable[[str], None], ran: bool) -> None:
    for name in recent(host_root, count, ran):
        with contextlib.suppress(Exception):  # the thread must end quietly: one less made
            want(name)


_peers = Peers()
os.register_at_fork(after_in_child=_peers.forget)


def peers() -> Peers:
    """This worker process's notes of its host's sessions."""
    return _peers
