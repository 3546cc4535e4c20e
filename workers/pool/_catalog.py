"""A worker's entry in the tool catalog, published at start and refreshed while it lives."""

from __future__ import annotations

import logging
import threading

import redis

from executor.wire import Keys, WorkerCatalog, publish_catalog, withdraw_catalog
from executor.wire._catalog import REFRESH_S

log = logging.getLogger(__name__)


class CatalogPublisher:
    """Keeps one worker's catalog entry alive until ``stop``, which withdraws it.

    A thread refreshes the entry every ``REFRESH_S``; a worker killed outright stops
    refreshing, and its entry expires by itself.
    """

    def __init__(self, client: redis.Redis, keys: Keys, entry: WorkerCatalog) -> None:
        self._client = client
        self._keys = keys
        self._entry = entry
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="toolpool-catalog", daemon=True)

    def start(self) -> None:
        """Publish now (so a client sees the worker before it takes a job), then keep it."""
        self._publish()
        self._thread.start()

    def stop(self) -> None:
        """Stop refreshing and withdraw the entry."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            withdraw_catalog(self._client, self._keys, self._entry.worker)
        except redis.RedisError as exc:
            log.warning(
                "toolpool: could not withdraw the catalog of %s: %s", self._entry.worker, exc
            )

    def _loop(self) -> None:
        while not self._stopped.wait(REFRESH_S):
            self._publish()

    def _publish(self) -> None:
        try:
            publish_catalog(self._client, self._keys, self._entry)
        except redis.RedisError as exc:
            # Redis is away: the worker cannot take calls either; the next refresh retries.
            log.warning(
                "toolpool: could not publish the catalog of %s: %s", self._entry.worker, exc
            )
