"""A supervised pool of worker processes: N children, each replaced when it dies.

Each child is a fresh interpreter, ``python -m workers`` (one RQ worker, ``workers.__main__``),
configured by ``TOOLPOOL_*`` variables built from the pool's ``Settings``, under a stable slot
name: ``worker_name(slot)`` of the supervisor (host, supervisor pid, slot), unique on the Redis
and taken over by the replacement. A supervisor thread looks at the children every
``check_interval`` seconds; when one has died, before starting its replacement, it cleans up
after it (``workers.pool._reaper``): kills what the child left running, releases its lock leases,
answers its call in flight with a ``worker_lost`` result at once (the orchestrator would only
notice after ``call_liveness_s``), ends that call's RQ job and any other RQ still records as
started by the child, so the turn's next batch starts, puts back on the queue a job the child
took off but never started, and records the death with RQ so that the name can be registered
again. A child that keeps dying right after its start is restarted with a growing delay.

Children run in sessions of their own, so a terminal's Ctrl+C reaches the supervisor alone,
which stops them in order: SIGTERM once to each (RQ's warm shutdown: the call in flight
finishes), up to ``grace`` seconds of waiting, then SIGKILL for the rest, whose calls are
answered as above. A child whose supervisor vanished stops on its own (``workers.__main__``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import redis

from executor import ConfigurationError
from executor._settings import Settings
from workers.pool._process import worker_name
from workers.pool._reaper import DeadChild, Reaper
from workers.processes._daemon import TOKEN_ENV
from workers.processes._ending import end_pool

log = logging.getLogger(__name__)

# A child that dies sooner than this after its start counts as failing to start; from the
# second such death in a row, restarts wait (0.5 s, 1 s, 2 s, ... up to 30 s) instead of
# respawning in a tight loop.
_QUICK_DEATH_S = 5.0
_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 30.0
# How often the supervisor looks for jobs stranded between RQ's dequeue and a start while it
# sees jobs taken or running. After a look that saw none, the next waits twice as long, up to
# ``idle_sweep_s``: an idle pool sends next to nothing, and a job stranded after a quiet spell
# goes back within that plus the grace.
_SWEEP_INTERVAL_S = 1.0
IDLE_SWEEP_S = 30.0


@dataclass(frozen=True)
class PoolChild:
    """What the pool knows of one slot: its worker name, current pid, and whether it runs."""

    slot: int
    name: str
    pid: int | None
    alive: bool
    restarts: int


def settings_environment(settings: Settings) -> dict[str, str]:
    """The ``TOOLPOOL_*`` variables from which a child's ``Settings.from_env()`` rebuilds
    ``settings``, tools' own settings included (``Settings.environment``).

    Raises ``ConfigurationError`` if some field would not come back equal (a type that
    ``from_env`` cannot parse), rather than start children with other settings.
    """
    return settings.environment()


@dataclass
class _Slot:
    """One place in the pool and the process that fills it now."""

    index: int
    name: str
    process: subprocess.Popen[bytes] | None = None
    token: str = ""
    started_at: float = 0.0
    restarts: int = 0
    quick_deaths: int = 0
    respawn_at: float = 0.0
    last_pid: int | None = None
    dead: DeadChild | None = None


class WorkerPool:
    """N worker processes on one Redis, supervised; see the module docstring.

    ``start()`` spawns the children and a supervisor thread; ``stop(grace)`` stops them;
    ``run()`` does both around a wait for SIGINT/SIGTERM (the CLI's foreground mode). Also a
    context manager. ``forking`` picks RQ's forking worker (a process per call) instead of the
    in-process one. ``read_only`` and ``disabled_tools`` narrow what the children serve
    (``workers.pool._process.served_registry``). ``idle_sweep_s``: the longest wait between
    two looks for stranded jobs while none are seen. ``env`` adds variables to the children's
    environment.
    """

    def __init__(
        self,
        redis_url: str,
        settings: Settings,
        *,
        workers: int = 1,
        tool_specs: Sequence[str] = (),
        forking: bool = False,
        read_only: bool = False,
        disabled_tools: Sequence[str] = (),
        logging_level: str = "WARNING",
        grace: float = 60.0,
        check_interval: float = 0.5,
        idle_sweep_s: float = IDLE_SWEEP_S,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        if workers < 1:
            raise ConfigurationError(f"A pool needs at least one worker, got {workers}.")
        self.redis_url = redis_url
        root = settings.worker.sessions_root
        self.settings = settings.with_changes(
            redis_url=redis_url,
            workspace=Path(settings.worker.workspace).resolve(),
            sessions_root=None if root is None else Path(root).resolve(),
        )
        self.tool_specs = tuple(tool_specs)
        self.forking = forking
        self.read_only = read_only
        self.disabled_tools = tuple(disabled_tools)
        self.logging_level = logging_level.upper()
        self.grace = grace
        self.check_interval = check_interval
        self.idle_sweep_s = max(idle_sweep_s, _SWEEP_INTERVAL_S)
        self.python = python
        self._env = {**settings_environment(self.settings), **(env or {})}
        self._pool_id = uuid.uuid4().hex[:12]
        self._slots = [_Slot(index, worker_name(index)) for index in range(1, workers + 1)]
        self._reaper = Reaper(redis_url, self.settings, socket.gethostname())
        self._started = False
        self._halt = threading.Event()  # tells the supervisor thread to end
        self._next_sweep = 0.0
        self._sweep_every = _SWEEP_INTERVAL_S
        self._thread: threading.Thread | None = None
        # Set by signal handlers: plain attributes, since a handler must not take a lock
        # that the interrupted code may hold.
        self._stop_requested = False
        self._hurry = False

    # -- public ----------------------------------------------------------------------------

    @property
    def children(self) -> list[PoolChild]:
        """A snapshot of every slot."""
        snapshot = []
        for slot in self._slots:
            process = slot.process
            alive = process is not None and process.poll() is None
            pid = process.pid if process is not None else None
            snapshot.append(PoolChild(slot.index, slot.name, pid, alive, slot.restarts))
        return snapshot

    def start(self) -> None:
        """Spawn every child and the supervisor thread; returns at once."""
        if self._started:
            return
        self._started = True
        for slot in self._slots:
            self._spawn(slot)
        self._thread = threading.Thread(target=self._supervise, name="toolpool-pool", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every child has registered with RQ; ``TimeoutError`` past ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            missing = [c.name for c in self.children if not self._reaper.registered(c.name, c.pid)]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Workers not ready within {timeout:g} s: {', '.join(missing)}")
            time.sleep(0.05)

    def request_stop(self, *, hurry: bool = False) -> None:
        """Ask ``run()`` to stop (safe from a signal handler or another thread)."""
        self._hurry = self._hurry or hurry
        self._stop_requested = True

    def calls_in_flight(self) -> int | None:
        """How many calls the live children run now; None if Redis could not say."""
        alive = [c.name for c in self.children if c.alive]
        try:
            return self._reaper.calls_running(alive)
        except redis.RedisError:
            return None

    def stop(
        self, grace: float | None = None, *, on_hurry: Callable[[], None] | None = None
    ) -> None:
        """Stop every child: SIGTERM, up to ``grace`` s (default ``self.grace``), SIGKILL;
        ``on_hurry()`` is told if a second signal cuts the wait short."""
        self._stop_requested = True
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        limit = self.grace if grace is None else grace
        running = [s for s in self._slots if s.process is not None and s.process.poll() is None]
        for slot in running:
            _send(slot, signal.SIGTERM)
        deadline = time.monotonic() + limit
        while any(s.process.poll() is None for s in running if s.process is not None):
            if self._hurry:
                if on_hurry is not None:
                    on_hurry()
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for slot in running:
            if slot.process is not None and slot.process.poll() is None:
                why = "told to hurry" if self._hurry else f"still running after {limit:g} s"
                log.warning(
                    "toolpool: worker %s (pid %d) %s; killing it", slot.name, slot.process.pid, why
                )
                _send(slot, signal.SIGKILL)
                slot.process.wait()
        for slot in self._slots:
            if slot.process is not None:
                self._on_exit(slot, expected=True)
            if slot.dead is not None:
                self._bury(slot)
        host = self.settings.worker.host or socket.gethostname()
        stopped = end_pool(self._pool_id, f"the pool on host {host} stopped")
        if stopped:
            log.warning("toolpool: stopped %d background processes of this pool", stopped)
        self._reaper.close()

    def run(
        self,
        *,
        on_start: Callable[[list[PoolChild]], None] | None = None,
        on_stopping: Callable[[int | None], None] | None = None,
        on_hurry: Callable[[], None] | None = None,
    ) -> int:
        """Start, serve until SIGINT/SIGTERM or ``request_stop()``, stop; return 0.

        A second SIGINT/SIGTERM while stopping kills the children at once. Signal handlers
        are installed only when called from the main thread. ``on_stopping(calls)`` is told
        as the stop begins, with the calls in flight (None if Redis could not say);
        ``on_hurry()`` when a second signal ends the wait for them.
        """
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for stop_signal in (signal.SIGINT, signal.SIGTERM):
                previous[stop_signal] = signal.signal(stop_signal, self._on_signal)
        try:
            self.start()
            if on_start is not None:
                on_start(self.children)
            while not self._stop_requested:
                # Sleeping in short steps: a signal handler only sets a flag.
                time.sleep(0.05)
            log.info("toolpool: stopping %d workers (grace %g s)", len(self._slots), self.grace)
            if on_stopping is not None:
                on_stopping(self.calls_in_flight())
            self.stop(on_hurry=on_hurry)
        finally:
            for stop_signal, handler in previous.items():
                signal.signal(stop_signal, handler)
        return 0

    def __enter__(self) -> WorkerPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- supervision -----------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(hurry=self._stop_requested)

    def _supervise(self) -> None:
        while not self._halt.wait(self.check_interval):
            try:
                self._check()
            except Exception:
                # The supervisor must outlive any one failure; the next round tries again.
                log.exception("toolpool: pool supervision round failed")

    def _check(self) -> None:
        """One supervision round: dead children, replacements when due, stranded jobs."""
        if time.monotonic() >= self._next_sweep:
            try:
                busy = self._reaper.sweep_dequeued()
            except redis.RedisError as exc:
                busy = True
                log.debug("toolpool: sweep of dequeued jobs skipped: %s", exc)
            self._sweep_every = (
                _SWEEP_INTERVAL_S if busy else min(2 * self._sweep_every, self.idle_sweep_s)
            )
            self._next_sweep = time.monotonic() + self._sweep_every
        for slot in self._slots:
            if slot.process is not None and slot.process.poll() is not None:
                self._on_exit(slot, expected=False)
            if slot.dead is not None and not self._bury(slot):
                continue  # Redis trouble: try again next round, before any replacement
            if (
                slot.process is None
                and not self._halt.is_set()
                and time.monotonic() >= slot.respawn_at
            ):
                self._spawn(slot)

    def _spawn(self, slot: _Slot) -> None:
        slot.token = f"{self._pool_id}.{slot.index}.{slot.restarts}"
        command = [
            self.python,
            "-m",
            "workers",
            "--name",
            slot.name,
            "--parent-pid",
            str(os.getpid()),
            "--log-level",
            self.logging_level,
        ]
        for spec in self.tool_specs:
            command += ["--tools", spec]
        if self.forking:
            command.append("--fork")
        if self.read_only:
            command.append("--read-only")
        for name in self.disabled_tools:
            command += ["--disable-tool", name]
        env = {**os.environ, **self._env, TOKEN_ENV: slot.token}
        try:
            slot.process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as exc:
            slot.quick_deaths += 1
            slot.respawn_at = time.monotonic() + _backoff(slot.quick_deaths)
            log.error("toolpool: cannot start worker %s: %s", slot.name, exc)
            return
        slot.started_at = time.monotonic()
        if slot.restarts:
            log.warning(
                "toolpool: worker %s restarted as pid %d (was %s)",
                slot.name,
                slot.process.pid,
                slot.last_pid,
            )

    def _on_exit(self, slot: _Slot, *, expected: bool) -> None:
        """Record that the slot's process ended; schedule its replacement."""
        process = slot.process
        assert process is not None
        assert process.returncode is not None
        slot.process = None
        slot.last_pid = process.pid
        code = process.returncode
        reason = (
            f"was killed by signal {signal.Signals(-code).name}"
            if code < 0
            else f"exited with code {code}"
        )
        ran_for = time.monotonic() - slot.started_at
        slot.dead = DeadChild(slot.name, process.pid, slot.token, reason)
        # It may leave a job taken and never started, for the sweeps to put back.
        self._sweep_every = _SWEEP_INTERVAL_S
        self._next_sweep = 0.0
        if expected:
            # SIGTERM itself kills a child that had not yet installed RQ's handlers.
            level = logging.INFO if code in (0, -signal.SIGTERM) else logging.WARNING
            log.log(level, "toolpool: worker %s (pid %d) %s", slot.name, process.pid, reason)
            return
        slot.restarts += 1
        slot.quick_deaths = slot.quick_deaths + 1 if ran_for < _QUICK_DEATH_S else 0
        delay = _backoff(slot.quick_deaths)
        slot.respawn_at = time.monotonic() + delay
        log.warning(
            "toolpool: worker %s (pid %d) %s after %.1f s; replacing it%s",
            slot.name,
            process.pid,
            reason,
            ran_for,
            f" in {delay:g} s" if delay else "",
        )

    def _bury(self, slot: _Slot) -> bool:
        """Clean up after the slot's dead process; False if Redis did not let us finish."""
        assert slot.dead is not None
        if not self._reaper.bury(slot.dead):
            return False
        slot.dead = None
        return True


def _backoff(quick_deaths: int) -> float:
    """The delay before a restart: none for a first death, then 0.5 s, 1 s, 2 s, ... 30 s."""
    if quick_deaths <= 1:
        return 0.0
    return min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2.0 ** (quick_deaths - 2))


def _send(slot: _Slot, signum: signal.Signals) -> None:
    if slot.process is not None:
        with contextlib.suppress(ProcessLookupError):
            slot.process.send_signal(signum)
