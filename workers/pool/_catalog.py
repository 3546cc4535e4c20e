"""A worker's entry in the tool catalog, published at start and refreshed while it lives, and
written again at once when the primary switches (a failover can lose it)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from executor._primary import on_switch
from executor.wire import Keys, WorkerCatalog, publish_catalog, withdraw_catalog
from executor.wire._catalog import REFRESH_S

log = logging.getLogger(__name__)

# After a switch of primary, how often a publish that failed is tried again, and for how long
# (a failover takes a few seconds; after that the usual refresh goes on).
_SWITCH_RETRY_S = 0.25
_SWITCH_RETRY_FOR_S = 30.0


class CatalogPublisher:
    """Keeps one worker's catalog entry alive until ``stop``, which withdraws it.

    A thread refreshes the entry every ``refresh_s``; a worker killed outright stops
    refreshing, and its entry expires by itself. When a pool of the process sees the primary
    switch (``executor._primary.on_switch``) the entry is written again at once, and retried
    quickly while the new primary does not answer yet: clients that see no entry refuse calls
    (``NoWorkerError``).
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, entry: WorkerCatalog, *, refresh_s: float = REFRESH_S
    ) -> None:
        self._client = client
        self._keys = keys
        self._entry = entry
        self._refresh_s = refresh_s
        self._stopped = False
        self._wake = threading.Event()
        self._unhook: Callable[[], None] = _nothing
        self._thread = threading.Thread(target=self._loop, name="toolpool-catalog", daemon=True)

    def start(self) -> None:
        """Publish now (so a client sees the worker before it takes a job), then keep it."""
        self._publish()
        self._unhook = on_switch(self._wake.set)
        self._thread.start()

    def stop(self) -> None:
        """Stop refreshing and withdraw the entry."""
        self._unhook()
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            withdraw_catalog(self._client, self._keys, self._entry.worker)
        except redis.RedisError as exc:
            log.warning(
                "toolpool: could not withdraw the catalog of %s: %s", self._entry.worker, exc
            )

    def _loop(self) -> None:
        retry_until = 0.0
        while True:
            quick = time.monotonic() < retry_until
            switched = self._wake.wait(_SWITCH_RETRY_S if quick else self._refresh_s)
            if self._stopped:
                return
            if switched:
                self._wake.clear()
                retry_until = time.monotonic() + _SWITCH_RETRY_FOR_S
                log.info("toolpool: the primary switched; publishing %s again", self._entry.worker)
            if self._publish():
                retry_until = 0.0

    def _publish(self) -> bool:
        try:
            publish_catalog(self._client, self._keys, self._entry)
        except redis.RedisError as exc:
            # Redis is away: the worker cannot take calls either; the next refresh retries.
            log.warning(
                "toolpool: could not publish the catalog of %s: %s", self._entry.worker, exc
            )
            return False
        return True


def _nothing() -> None:
    """What ``stop`` unhooks before ``start`` hooked anything."""
