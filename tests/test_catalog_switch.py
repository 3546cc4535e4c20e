"""A worker's catalog entry is written again as soon as the primary switches.

The oracle: with the usual refresh set far away (10 minutes), an entry deleted from Redis
(as a failover can lose it) comes back only through the switch hook, and a hook unhooked by
``stop`` writes nothing more.
"""

from __future__ import annotations

from executor import _primary
from executor.wire import Keys, WorkerCatalog, read_entries
from tests.support.waiting import wait_for
from workers._embedded_redis import RedisServer
from workers.pool._catalog import CatalogPublisher


def test_the_entry_is_written_again_when_the_primary_switches() -> None:
    keys = Keys()
    entry = WorkerCatalog.build("w1", "toolpool:default", [], host="h", pid=1)
    with RedisServer() as server:
        client = server.client()
        publisher = CatalogPublisher(client, keys, entry, refresh_s=600.0)
        publisher.start()
        try:
            assert [e.worker for e in read_entries(client, keys)] == ["w1"]
            client.delete(keys.catalog("w1"))
            assert read_entries(client, keys) == []

            _primary.PrimaryTracker().demoted()  # what a pool does when its primary switches

            wait_for(lambda: read_entries(client, keys) != [], "the entry to be written again")
        finally:
            publisher.stop()
        _primary.PrimaryTracker().demoted()
        assert read_entries(client, keys) == []  # withdrawn, and not written again
        client.close()
