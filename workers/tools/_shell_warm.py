"""bash's launch made ahead of its command, off the lock: a call pays for little beyond it.

Confining a command costs more than starting it: a process that joins a cgroup waits for the
kernel (on cgroup v1, an RCU grace period: 10 to 15 ms), and bubblewrap's namespaces and
mounts take about 5 ms more. None of it depends on the command, so it is done ahead, in a
*unit*: the launcher started, its cgroup made and joined, its limits set and, for a place
whose commands run in a sandbox, the sandbox made (mounts, namespaces, the session's network),
with a ``/bin/sh`` at its end waiting for a script on its standard input. A call takes a unit
and writes it a few lines: the directory, the variables, ``exec bash -c COMMAND``. A unit
serves one command (its cgroup, PID namespace and ``/tmp`` are that command's) and is removed
after it: nothing passes from one call to the next.

- The *outside* unit is the launcher alone, outside any sandbox, and serves any call: an
  unconfined command runs in it directly; a sandboxed one starts the session's network and
  bubblewrap from it (the sandbox made in the call, but not the cgroup's wait).
- A *sandbox* unit belongs to one place: its workspace, its network, the settings. It is made
  when a call runs there, for the next call there on this worker process (a session's calls
  come round to each worker of its host), when a session's network has just started, and
  for the host's sessions just made (with ``TOOLPOOL_BASH_WARM_PEERS=all``, also those run
  in lately elsewhere: ``_shell_peers``).

A worker process keeps one outside unit per settings, and sandbox units for the last
``BashSettings.warm`` places, each at most ``IDLE_S``. A sandbox unit is checked when taken:
still waiting, its workspace the same folder, the same paths to hide, the session's network
the same namespace; otherwise it is removed and the call takes the outside unit. Units are
made and removed by a thread of their own: the thread that starts a sandbox is the parent its
``--die-with-parent`` watches, so it lives as long as the worker; a used unit's cgroup is
removed there, after the call has answered. A process forked from the worker (RQ's forking
worker) keeps none: each of its calls makes its launch itself.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from pathlib import Path

from executor import ToolError
from workers.tools._confine import Confinement, available_cgroups, hidden_paths
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_unit import Place, Unit, script

# A unit unused this long is removed: it holds a cgroup, a few small processes and, for a
# sandbox, its view of a workspace.
IDLE_S = 600.0
# How long a call waits for its place's unit that is being made, before it goes without.
_MAKING_WAIT_S = 2.0
# How long work a call asks for (a unit to make, its used one to remove) waits for the next
# command to start (``Units.wake``): it runs beside a command, not on the way to one or to
# an answer, and without a command within this time it runs anyway.
_DEFER_S = 0.1
# How a call's launch was had (``Units.counts``): its place's sandbox made ahead, the outside
# unit made ahead, or a unit made in the call.
SANDBOX_AHEAD, OUTSIDE_AHEAD, MADE_IN_CALL = "sandbox made ahead", "outside made ahead", "in call"


def take(
    settings: BashSettings,
    bwrap: str | None,
    workspace: Path,
    worker_folders: tuple[Path, ...],
    network: list[str],
    session: bool,
    ahead: bool = True,
) -> Unit:
    """The unit a call in ``workspace`` runs in: its place's sandbox unit where one fits,
    else the outside unit (made now if none is ready). Either way, one more is asked for
    (its place's sandbox unless not ``ahead``: a session's network about to start)."""
    cgroups = available_cgroups()
    keep = settings.warm
    if bwrap is not None:
        place = Place(settings, cgroups, bwrap, workspace, worker_folders, tuple(network), session)
        unit = _units.take(place)
        if unit is not None and not unit.fits(hidden_paths(settings, workspace, worker_folders)):
            _units.spend(unit)
            unit = None
        # A place's sandbox is made ahead from its first call here on: a session's calls come
        # round to each worker of its host, and its next one here should find it made.
        if ahead:
            _units.want(place, keep)
        if unit is not None:
            _units.served(SANDBOX_AHEAD)
            unit.prioritize()
            return unit
    # A session's shell files are made with the unit: the command inherits the one it writes.
    outside = Place(settings, cgroups, bwrap, session=session)
    unit = _units.take(outside)
    if unit is not None and unit.process.poll() is not None:
        _units.spend(unit)
        unit = None
    _units.want(outside, keep)
    if unit is not None:
        _units.served(OUTSIDE_AHEAD)
        unit.prioritize()
        return unit
    _units.served(MADE_IN_CALL)
    try:
        return Unit.make(outside)
    except OSError as exc:
        _units.wake()  # no command, so no call's ``wake`` or ``spend``: the wanted now
        raise ToolError(f"Could not start bash: {exc}. Try again later.") from None


def make_ahead(
    settings: BashSettings,
    bwrap: str | None,
    workspace: Path,
    worker_folders: tuple[Path, ...],
    network: list[str],
    session: bool,
) -> None:
    """Have the sandbox of a place made ahead, for its next call here (a session's network
    just started)."""
    if bwrap is not None:
        place = Place(
            settings, available_cgroups(), bwrap, workspace, worker_folders, tuple(network), session
        )
        _units.want(place, settings.warm, now=True)


def launch(
    unit: Unit,
    confinement: Confinement,
    cwd: Path,
    env: Mapping[str, str],
    argv: list[str],
    read_only_files: tuple[Path, ...] = (),
) -> bytes:
    """The script that runs ``argv`` in ``cwd`` with ``env`` in ``unit``, confined as
    ``confinement`` (the unit's, placed for this call) says."""
    if unit.place.workspace is not None or not confinement.sandboxed:
        # In the unit's sandbox, or unconfined: the command's process is the waiting shell.
        return script(argv, env, cwd)
    # The outside unit of a sandboxed call: the sandbox starts from it, its loader variables
    # set inside (``Confinement.outside_env``).
    sandbox = confinement.sandbox_argv(cwd, read_only_files, env)
    return script([*sandbox, *argv], confinement.outside_env(env))


class Units:
    """A worker process's units: taken by calls, made and removed by a thread of their own."""

    def __init__(self) -> None:
        self._reset(enabled=True)

    def _reset(self, enabled: bool) -> None:
        self._enabled = enabled
        self._changed = threading.Condition()
        self._ready: OrderedDict[Place, Unit] = OrderedDict()
        # Places to make a unit for, each with the number of sandbox units to keep.
        self._wanted: OrderedDict[Place, int] = OrderedDict()
        self._making: Place | None = None
        self._spent: list[Unit] = []
        # When the work waiting (wanted and spent units) is due; None: none waits.
        self._due: float | None = None
        self._busy = False
        self._thread: threading.Thread | None = None
        self._counts: Counter[str] = Counter()
        self._inherited: list[Unit] = []
        # When a call last took a unit or gave one back (``quiet``).
        self._used_at = float("-inf")

    def take(self, place: Place) -> Unit | None:
        """The unit ready for ``place`` (waiting a moment for one being made), or None."""
        deadline = time.monotonic() + _MAKING_WAIT_S
        with self._changed:
            while place == self._making and place not in self._ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            # Wanted but not begun: the caller makes its own sooner than the thread would.
            self._wanted.pop(place, None)
            return self._ready.pop(place, None)

    def want(self, place: Place, keep: int, now: bool = False) -> None:
        """Have a unit made for ``place``, unless one is ready or on its way; ``keep``: the
        sandbox units to keep, the longest unused removed first. ``now``: no call waits for
        its command to start (else at ``wake``, or after ``_DEFER_S``)."""
        with self._changed:
            if not self._enabled or keep <= 0:
                return
            if place in self._ready or place in self._wanted or place == self._making:
                return
            self._wanted[place] = keep
            # Deferred: the thread is not woken on the way to a command (a switch of threads
            # there costs the call); the call's ``wake`` or ``spend`` wakes it.
            self._asked(time.monotonic() + (0.0 if now else _DEFER_S), wake=now)

    def spend(self, unit: Unit) -> None:
        """Remove ``unit`` after its call, in the background (in the caller where there is
        no background: a forked worker)."""
        if not self._enabled:
            unit.close()
            return
        with self._changed:
            self._used_at = time.monotonic()
            self._spent.append(unit)
            self._asked(time.monotonic() + _DEFER_S)

    def wake(self) -> None:
        """A call's command has started: the work waiting may run now, beside it."""
        with self._changed:
            if self._due is not None:
                self._asked(time.monotonic())

    def served(self, how: str) -> None:
        """Count a call's launch by how it was had (``SANDBOX_AHEAD`` ...)."""
        with self._changed:
            self._counts[how] += 1
            self._used_at = time.monotonic()

    def quiet(self, seconds: float) -> bool:
        """Whether no call of this process has taken a unit or given one back for
        ``seconds``: it does not run bash back to back."""
        with self._changed:
            return time.monotonic() - self._used_at >= seconds

    def counts(self) -> dict[str, int]:
        """How this process's calls had their launch so far, by kind."""
        with self._changed:
            return dict(self._counts)

    def kept(self) -> list[Place]:
        """The places a unit is ready for, the longest kept first."""
        with self._changed:
            return list(self._ready)

    def settle(self, timeout: float) -> bool:
        """Wait until nothing is being made or removed; False if still busy at ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if self._due is not None:
                self._asked(time.monotonic())
            while self._wanted or self._spent or self._making is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self) -> None:
        """Remove every unit now, and make no more (the process is ending)."""
        with self._changed:
            self._enabled = False
            units = [*self._ready.values(), *self._spent]
            self._ready.clear()
            self._spent.clear()
            self._wanted.clear()
        for unit in units:
            unit.close()

    def _asked(self, due: float, wake: bool = True) -> None:
        """Have the thread do the work waiting by ``due`` (holding the condition); ``wake``
        False: it learns of it at the next ``_asked`` that wakes it."""
        self._due = due if self._due is None else min(self._due, due)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="bash-units", daemon=True)
            self._thread.start()
        if wake:
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                place, keep, spent = self._next_work()
                self._making, self._busy = place, True
            made = self._make(place)
            with self._changed:
                self._making = None
                gone = list(spent)
                if made is not None:
                    if self._enabled:
                        self._ready[made.place] = made
                        gone.extend(self._evicted(keep))
                    else:
                        gone.append(made)
                self._changed.notify_all()
            for unit in gone:
                with contextlib.suppress(Exception):  # the thread must go on
                    unit.close()
            with self._changed:
                self._busy = False
                self._changed.notify_all()

    def _next_work(self) -> tuple[Place | None, int, list[Unit]]:
        """Wait (holding the condition) for a place to make a unit for (and the sandbox
        units to keep), or else units to remove (a unit idle too long among them)."""
        while True:
            now = time.monotonic()
            expired = [p for p, u in self._ready.items() if now - u.made >= IDLE_S]
            for old in expired:
                self._spent.append(self._ready.pop(old))
            if not self._wanted and not self._spent:
                self._due = None
            elif self._due is None or self._due <= now:
                break
            wakes = [u.made + IDLE_S for u in self._ready.values()]
            if self._due is not None:
                wakes.append(self._due)
            self._changed.wait(min(wakes) - now if wakes else None)
        if self._wanted:  # a unit a call may wait for comes before a removal
            place, keep = self._wanted.popitem(last=False)
            return place, keep, []
        spent, self._spent = self._spent, []
        return None, 0, spent

    def _evicted(self, keep: int) -> list[Unit]:
        """The sandbox units beyond ``keep``, the least recently made first, taken out."""
        sandboxes = [p for p in self._ready if p.workspace is not None]
        return [self._ready.pop(p) for p in sandboxes[: max(0, len(sandboxes) - keep)]]

    @staticmethod
    def _make(place: Place | None) -> Unit | None:
        if place is None:
            return None
        try:
            return Unit.make(place, background=True)
        except Exception:  # the thread must go on: the next call there makes its own
            return None  # and says what failed

    def forget(self) -> None:
        """In a forked child: none of the parent's units (its children, not ours), no
        thread, and none made from now on; each call makes its launch itself. The parent's
        units are held, never used nor closed: a unit dropped here would close (and remove)
        what its parent still uses."""
        inherited = [*self._ready.values(), *self._spent]
        self._reset(enabled=False)
        self._inherited = inherited


_units = Units()


def units() -> Units:
    """This worker process's units."""
    return _units


# A forked child (RQ's forking worker) ends before a unit made in it would serve anything.
os.register_at_fork(after_in_child=_units.forget)
atexit.register(_units.close)
