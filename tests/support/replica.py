"""A private primary with one replica (``redis-server --replicaof``), for the acknowledged
writes and the epochs: ``pause_replica`` freezes replication (WAIT then counts 0), ``promote``
makes the replica a primary the way a failover does (``REPLICAOF NO ONE``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis

from tests.support.waiting import wait_for
from workers._embedded_redis import RedisServer


@dataclass
class Pair:
    """A primary and its replica, both ours."""

    primary: RedisServer
    replica: RedisServer
    _clients: dict[str, redis.Redis] = field(default_factory=dict)

    def client(self, server: RedisServer) -> redis.Redis:
        """One test client per server, closed with the pair."""
        found = self._clients.get(server.url)
        if found is None:
            found = self._clients[server.url] = server.client()
        return found

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def synced(self) -> bool:
        """Whether the replica is linked and has every write the primary made."""
        info = self.client(self.replica).info("replication")
        if info.get("master_link_status") != "up":
            return False
        offset = self.client(self.primary).info("replication")["master_repl_offset"]
        return int(info.get("slave_repl_offset", -1)) >= int(offset)

    def wait_synced(self) -> None:
        wait_for(self.synced, what="the replica to catch up with the primary")

    @contextlib.contextmanager
    def replica_paused(self) -> Iterator[None]:
        """Replication frozen (the replica SIGSTOPped) inside the block."""
        self.replica.pause()
        try:
            yield
        finally:
            self.replica.resume()

    def promote(self) -> redis.Redis:
        """The replica made a primary (a new replication id); a client to it."""
        client = self.client(self.replica)
        client.replicaof("NO", "ONE")
        wait_for(lambda: client.info("replication")["role"] == "master", what="the promotion")
        return client


@contextlib.contextmanager
def primary_and_replica() -> Iterator[Pair]:
    """A primary and a synced replica on free TCP ports, stopped at the end."""
    with RedisServer(tcp=True) as primary:
        assert primary.port is not None
        args = ("--replicaof", "127.0.0.1", str(primary.port))
        with RedisServer(tcp=True, extra_args=args) as replica:
            pair = Pair(primary, replica)
            try:
                pair.wait_synced()
                yield pair
            finally:
                pair.close()
