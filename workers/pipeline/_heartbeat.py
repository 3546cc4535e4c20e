"""The claim's heartbeat: keep the running call's claim alive, and watch for its cancel.

One thread per worker process rather than one per call: a thread start and join on every
call costs more than the call itself under load. A forked work horse starts its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

import redis

from executor import Settings
from executor.wire import CallClaims, CallJob, Keys, ToolResult
from workers.pipeline._chain import CallState, Proceed

log = logging.getLogger(__name__)


class Heartbeat:
    """Step: while the steps inside run, renew the call's liveness key and watch for cancel.

    Each run of a call is watched on its own, with its own cancel flag (a rerun gets a fresh
    one); between runs nothing is watched.
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, settings: Settings, *, worker_name: str
    ) -> None:
        self._client = client
        self._keys = keys
        self._worker = worker_name
        self._interval = settings.client.call_heartbeat_s
        self._ttl_ms = int(settings.client.call_liveness_s * 1000)
        self._claims = CallClaims(client, keys)
        self._lock = threading.Lock()
        self._watched: tuple[CallJob, threading.Event] | None = None
        self._thread_pid: int | None = None

    def __call__(self, state: CallState, proceed: Proceed) -> ToolResult:
        with self.watching(state.the_job(), state.cancelled):
            return proceed(state)

    @contextlib.contextmanager
    def watching(self, job: CallJob, cancelled: threading.Event) -> Iterator[None]:
        """Keep ``job`` alive and ``cancelled`` up to date while the block runs."""
        with self._lock:
            self._watched = (job, cancelled)
            if self._thread_pid != os.getpid():
                self._thread_pid = os.getpid()
                threading.Thread(target=self._loop, name="toolpool-heartbeat", daemon=True).start()
        try:
            yield
        finally:
            with self._lock:
                self._watched = None

    def _loop(self) -> None:
        while True:
            time.sleep(self._interval)
            # Under the lock, so a beat never renews a call that has just ended.
            with self._lock:
                if self._watched is not None:
                    self._beat(*self._watched)

    def _beat(self, job: CallJob, cancelled: threading.Event) -> None:
        try:
            # Never over another delivery's claim: the lock grant decides between the two.
            found = self._claims.hold(job.call.id, job.turn_id, self._worker, self._ttl_ms)
            if found.cancelled:
                cancelled.set()
        except redis.RedisError as exc:
            log.warning("toolpool: call heartbeat failed: %s", exc)
