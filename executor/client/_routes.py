"""Where an executor's calls go: the tools of each queue, and the host queue of each session.

A queue's catalog (the tools its live workers publish) is read at most every ``REFRESH_S``,
and again when a call names a tool it lacks (a worker serving it may have just started). A
session's queue is its host's, read from the session's record and remembered for
``REFRESH_S``: a session does not move, and one deleted meanwhile is refused by the workers.
"""

from __future__ import annotations

import time

import redis

from executor import _texts as texts
from executor._settings import Settings
from executor.contract import ToolInfo
from executor.wire import READY, Catalog, Keys, NoWorkerError, SessionStore, read_catalog
from executor.wire._catalog import REFRESH_S

# How often a name missing from the catalog makes the client read it again.
_CATALOG_RECHECK_S = 0.5
# How often a client waiting for a live worker reads the catalog.
_WORKER_POLL_S = 0.25


class Routes:
    """The catalogs and session queues one executor has read, and when."""

    def __init__(
        self, client: redis.Redis, keys: Keys, settings: Settings, *, wait_for_workers: float
    ) -> None:
        self._client = client
        self._keys = keys
        self._settings = settings
        self._wait_s = wait_for_workers
        self._sessions = SessionStore(client, keys)
        self.catalogs: dict[str, tuple[Catalog, float]] = {}
        self._queues: dict[str, tuple[str, float]] = {}

    def session_queue(self, session: str) -> tuple[str | None, str]:
        """The queue of ``session``'s host, or (None, why its calls cannot run)."""
        known = self._queues.get(session)
        if known is not None and time.monotonic() - known[1] < REFRESH_S:
            return known[0], ""
        found = self._sessions.locate(session)
        if found is None:
            return None, texts.session_missing(session)
        state, host = found
        if state != READY:
            return None, texts.session_not_ready(session, state)
        queue = self._keys.host_queue_name(self._settings.client.queue, host)
        self._queues[session] = (queue, time.monotonic())
        return queue, ""

    def forget(self, session: str) -> None:
        """Read ``session``'s record again next time (it was found deleted)."""
        self._queues.pop(session, None)

    def tool(self, name: str, queue: str) -> ToolInfo:
        """The tool ``name`` as the live workers of ``queue`` publish it (``UnknownToolError``
        or ``NoWorkerError`` from the catalog otherwise)."""
        catalog, read_at = self._current(queue)
        if name not in catalog and read_at < time.monotonic() - _CATALOG_RECHECK_S:
            catalog = self.read(queue)
        return catalog.get(name)

    def read(self, queue: str) -> Catalog:
        """``queue``'s catalog, read now."""
        catalog = read_catalog(self._client, self._keys, queue)
        self.catalogs[queue] = (catalog, time.monotonic())
        return catalog

    def _current(self, queue: str) -> tuple[Catalog, float]:
        """``queue``'s catalog read at most ``REFRESH_S`` ago, and when it was read; waits up
        to ``wait_for_workers`` for a live worker if there is none."""
        known = self.catalogs.get(queue)
        if known is None or time.monotonic() - known[1] > REFRESH_S:
            self.read(queue)
            known = self.catalogs[queue]
        if known[0].workers:
            return known
        deadline = time.monotonic() + self._wait_s
        while time.monotonic() < deadline:
            time.sleep(_WORKER_POLL_S)
            if self.read(queue).workers:
                return self.catalogs[queue]
        raise NoWorkerError(queue, self._wait_s)
