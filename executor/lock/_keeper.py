"""The one background thread per process that renews every lease the process holds.

One thread for all leases (not one per lock) keeps a worker with many leases cheap and gives
one place where renewal failures are caught: the thread catches everything and keeps going,
so a heartbeat can never die silently (python-redis-lock's issue #85). A lease whose renewal
keeps failing is declared lost at its local deadline by ``Lease.renew``.

``LeaseKeeper.shared()`` is the process-wide keeper that ``RWLock`` uses by default; it is the
one deliberate singleton of the lock, because "one renewal thread per process" is the point.
Tests may give an ``RWLock`` a keeper of their own and ``close()`` it.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from executor._errors import LockUnavailable
from executor.lock._scripts import LockScripts, ReleaseReason

if TYPE_CHECKING:
    from executor.lock._lease import Lease

logger = logging.getLogger(__name__)

# How long the keeper keeps trying to tell Redis about a lost lease, and how often.
_REPORT_HORIZON_S = 600.0
_REPORT_RETRY_S = 1.0
# A pause after an unexpected error, so a persistent fault cannot spin the thread.
_ERROR_PAUSE_S = 0.05


@dataclass(eq=False)
class _LossReport:
    """A release Redis must still be told of: a lost lease ("lost", counted once), or a
    release that did not reach Redis or its replicas ("release")."""

    scripts: LockScripts
    token: str
    give_up_at: float
    next_try: float
    reason: ReleaseReason = "lost"


class LeaseKeeper:
    """Renews leases at about a third of their length, on one daemon thread."""

    def __init__(self, name: str = "toolpool-lease-keeper") -> None:
        self.name = name
        self._reset()
        _KEEPERS.add(self)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._leases: set[Lease] = set()
        self._reports: list[_LossReport] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        # When the thread wakes next by itself: a lease due later needs no wake-up call
        # (a lock held a few milliseconds then costs no thread switch).
        self._wake_at = math.inf

    @classmethod
    def shared(cls) -> LeaseKeeper:
        """The process-wide keeper (re-created empty in a forked child)."""
        with _Process.lock:
            if _Process.keeper is None:
                _Process.keeper = cls()
            return _Process.keeper

    @property
    def lease_count(self) -> int:
        """How many leases this keeper renews now."""
        with self._cond:
            return len(self._leases)

    @property
    def pending_reports(self) -> int:
        """Lost leases whose loss Redis has not been told yet."""
        with self._cond:
            return len(self._reports)

    def add(self, lease: Lease) -> None:
        """Start renewing ``lease``."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"LeaseKeeper {self.name!r} is closed")
            self._leases.add(lease)
            self._ensure_thread()
            if lease.next_renewal_at < self._wake_at:
                self._cond.notify_all()

    def discard(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (released or lost)."""
        with self._cond:
            self._leases.discard(lease)

    def report_lost(self, scripts: LockScripts, token: str) -> None:
        """Tell Redis (as soon as it answers) that ``token``'s lease was lost."""
        self._report(scripts, token, "lost", first_try=time.monotonic())

    def retry_release(self, scripts: LockScripts, token: str) -> None:
        """Release ``token`` again until Redis (and its replicas, with acknowledged writes)
        takes it: a release lost in an outage or a failover would block the lock for a lease."""
        self._report(scripts, token, "release", first_try=time.monotonic() + _REPORT_RETRY_S)

    def _report(
        self, scripts: LockScripts, token: str, reason: ReleaseReason, *, first_try: float
    ) -> None:
        now = time.monotonic()
        report = _LossReport(scripts, token, now + _REPORT_HORIZON_S, first_try, reason)
        with self._cond:
            self._reports.append(report)
            if not self._closed:
                self._ensure_thread()
            self._cond.notify_all()

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until every lost lease has been reported to Redis; False if some are left.

        The thread is a daemon, so a process that exits right after losing a lease would take
        the report with it; the shared keeper is flushed at interpreter exit for that reason.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if not self._reports:
                    return True
                if self._closed or time.monotonic() >= deadline:
                    return False
                self._cond.notify_all()
            time.sleep(0.01)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread; leases it renewed will expire unless renewed by hand."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                if not self._tick():
                    return
            except Exception:
                logger.exception("Lease keeper %r: unexpected error; it keeps running", self.name)
                time.sleep(_ERROR_PAUSE_S)

    def _tick(self) -> bool:
        with self._cond:
            if self._closed:
                return False
            now = time.monotonic()
            due = [lease for lease in self._leases if lease.next_renewal_at <= now]
            reports = [r for r in self._reports if r.next_try <= now]
            if not due and not reports:
                times = [lease.next_renewal_at for lease in self._leases]
                times += [r.next_try for r in self._reports]
                self._wake_at = min(times, default=math.inf)
                self._cond.wait(self._wake_at - now if times else None)
                self._wake_at = -math.inf  # awake: whatever is added is seen by this pass
                return True
        for lease in due:
            self._renew(lease)
        for report in reports:
            self._send_report(report)
        return True

    def _renew(self, lease: Lease) -> None:
        try:
            lease.renew()
        except LockUnavailable as exc:
            logger.info("%s", exc)
        except Exception:
            logger.exception("Renewal of lease %s failed unexpectedly; retrying", lease.token)

    def _send_report(self, report: _LossReport) -> None:
        try:
            report.scripts.release(report.token, report.reason)
        except Exception as exc:
            now = time.monotonic()
            if now < report.give_up_at:
                report.next_try = now + _REPORT_RETRY_S
                return
            what = "the lost lease" if report.reason == "lost" else "the release of lease"
            logger.warning("Gave up reporting %s %s to Redis: %s", what, report.token, exc)
        with self._cond:
            if report in self._reports:
                self._reports.remove(report)


_KEEPERS: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


class _Process:
    """The process-wide keeper and the lock that guards its creation."""

    keeper: LeaseKeeper | None = None
    lock = threading.Lock()


def _after_fork_in_child() -> None:
    # The child inherits the parent's leases and locks but not its threads: the parent keeps
    # renewing its own leases, so the child starts empty.
    _Process.lock = threading.Lock()
    for keeper in list(_KEEPERS):
        keeper._reset()


def _flush_at_exit() -> None:
    keeper = _Process.keeper
    if keeper is not None and not keeper.flush(timeout=2.0):
        logger.warning(
            "Exiting with %d lost lease(s) not reported to Redis", keeper.pending_reports
        )


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_flush_at_exit)
