"""Idle sessions expire, and session sizes are measured, by one worker of each host at a time.

Every worker that serves sessions runs a sweeper thread; each pass, the one that takes the
host's sweep key (``SET NX`` with an expiry) does the work: a ready session of this host idle
past its TTL, with no call waiting or running, is deleted (folder and keys), and a session used
since its size was last measured is measured again.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import redis

from executor.wire import DELETING, READY, Keys, SessionStore
from workers.processes._place import session_host_folder
from workers.processes._table import host_entries, publish_entry
from workers.sessions._admin import remove
from workers.sessions._folders import folder_size

log = logging.getLogger(__name__)


class SessionSweeper:
    """Expires idle sessions of one host and keeps their sizes; ``sweep()`` is one pass."""

    def __init__(
        self, client: redis.Redis, keys: Keys, sessions_root: Path, host: str, every_s: float
    ) -> None:
        self._client = client
        self._keys = keys
        self._store = SessionStore(client, keys)
        self._root = sessions_root
        self._host = host
        self._every_s = every_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="toolpool-sweep", daemon=True)

    def start(self) -> None:
        """Sweep every ``every_s`` seconds until ``stop``."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sweeping (a pass in progress finishes first)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stopped.wait(self._every_s):
            try:
                if self._client.set(
                    self._keys.session_sweep(self._host),
                    "1",
                    nx=True,
                    px=max(1, int(self._every_s * 900)),
                ):
                    self.sweep()
            except redis.RedisError as exc:
                log.warning("toolpool: session sweep skipped: %s", exc)

    def _refresh_processes(self, name: str) -> None:
        """Bring the session's process records in Redis up to what this host's disk says:
        output sizes, ends the keepers could not record, keepers that died (lost)."""

        def publish(process_id: str, record_json: str) -> bool:
            return self._store.set_process_json(name, process_id, record_json)

        for entry in host_entries(session_host_folder(self._root, name)):
            publish_entry(entry, publish)

    def sweep(self) -> list[str]:
        """One pass over this host's sessions; returns the names of those it expired."""
        expired = []
        now = time.time()
        for info in self._store.read_many(self._store.names()):
            if info.host != self._host or info.state != READY:
                continue
            ends = info.expires_at
            if ends is not None and ends <= now and info.pending == 0:
                if (
                    self._store.move(info.name, [READY], DELETING, last_used=info.last_used_raw)
                    is not None
                ):
                    remove(self._store, self._root, info.name, "idle past its TTL")
                    expired.append(info.name)
                continue
            if info.size_at is None or (info.last_used > info.size_at):
                self._store.set_size(info.name, folder_size(self._root / info.name))
            self._refresh_processes(info.name)
        return expired
