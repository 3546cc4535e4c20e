"""Following the primary without Sentinel: a primary endpoint (a proxy here, as a DNS name
would be) re-pointed at a new primary, a READONLY reply from a demoted one, a replica refused;
each drops every pooled connection to the old server (``executor/_primary.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from executor._connect import ORCHESTRATOR, STANDARD, connect, connect_async
from tests.support.fault.proxy import TcpProxy
from tests.support.waiting import PATIENCE_S, wait_for
from workers._embedded_redis import RedisServer

pytestmark = pytest.mark.proof

_names = itertools.count()


class Pair:
    """A primary and its replica, each a redis-server of our own on a loopback port."""

    def __init__(self, primary: RedisServer, replica: RedisServer) -> None:
        self.primary = primary
        self.replica = replica
        self.raw_primary = primary.client()
        self.raw_replica = replica.client()

    def wait_synced(self) -> None:
        def synced() -> bool:
            info = self.raw_replica.info("replication")
            return info.get("master_link_status") == "up"

        wait_for(synced, "the replica to sync")

    def promote_replica(self) -> None:
        """The replica becomes a primary; the old primary is left as it is (a split)."""
        self.raw_replica.replicaof("NO", "ONE")

    def demote_primary(self) -> None:
        """The replica becomes the primary and the old primary its replica (clients kept)."""
        self.promote_replica()
        self.raw_primary.replicaof("127.0.0.1", str(self.replica.port))

    def point(self, proxy: TcpProxy) -> None:
        """New connections through ``proxy`` go to the replica (the new primary) from now on."""
        assert self.replica.port is not None
        proxy.target = ("127.0.0.1", self.replica.port)

    def ours(self, server: redis.Redis, name: str) -> int:
        """How many connections named ``name`` the server has."""
        return sum(1 for client in server.client_list() if client.get("name") == name)


# A replica's first sync starts at once, not after the default 5 s wait for more replicas.
_NO_SYNC_DELAY = ["--repl-diskless-sync-delay", "0"]


@pytest.fixture
def pair() -> Iterator[Pair]:
    with RedisServer(tcp=True, extra_args=_NO_SYNC_DELAY) as primary:
        replica_args = [*_NO_SYNC_DELAY, "--replicaof", "127.0.0.1", str(primary.port)]
        with RedisServer(tcp=True, extra_args=replica_args) as replica:
            made = Pair(primary, replica)
            made.wait_synced()
            try:
                yield made
            finally:
                made.raw_primary.close()
                made.raw_replica.close()


@pytest.fixture
def proxy(pair: Pair) -> Iterator[TcpProxy]:
    assert pair.primary.port is not None
    started = TcpProxy("127.0.0.1", pair.primary.port).start()
    try:
        yield started
    finally:
        started.stop()


def _name() -> str:
    return f"switch-test-{next(_names)}"


def test_a_proxy_moved_to_a_new_primary_drops_every_old_connection(
    pair: Pair, proxy: TcpProxy
) -> None:
    name = _name()
    client = connect(f"{proxy.url}/0?client_name={name}", role=STANDARD)
    pool: Any = client.connection_pool
    held = [pool.get_connection() for _ in range(3)]
    pool.release(held.pop())
    pool.release(held.pop())  # two idle, one in use
    wait_for(lambda: pair.ours(pair.raw_primary, name) == 3, "three connections to the primary")
    # The old primary stays writable: only the new replication id tells the switch.
    pair.promote_replica()
    pair.point(proxy)
    # Two idle ones come back first; the third checkout is a new connection, to the new primary.
    again = [pool.get_connection() for _ in range(3)]
    for connection in again:
        pool.release(connection)
    # Every connection that reached the old primary was closed, but the one still in use.
    wait_for(lambda: pair.ours(pair.raw_primary, name) == 1, "idle connections to be dropped")
    pool.release(held.pop())
    wait_for(lambda: pair.ours(pair.raw_primary, name) == 0, "the in-use one to be dropped")
    client.set("after-switch", "new")
    assert pair.raw_replica.get("after-switch") == b"new"
    assert pair.raw_primary.get("after-switch") is None
    assert pair.ours(pair.raw_primary, name) == 0
    assert pool.primary.switches == 1
    client.close()


def test_an_async_client_behind_a_moved_proxy_drops_its_old_connections(
    pair: Pair, proxy: TcpProxy
) -> None:
    name = _name()

    async def run() -> None:
        client = connect_async(f"{proxy.url}/0?client_name={name}", role=ORCHESTRATOR)
        pool: Any = client.connection_pool
        try:
            held = [await pool.get_connection() for _ in range(3)]
            for connection in held[1:]:
                await pool.release(connection)
            wait_for(lambda: pair.ours(pair.raw_primary, name) == 3, "three connections")
            pair.promote_replica()
            pair.point(proxy)
            again = [await pool.get_connection() for _ in range(3)]
            for connection in again:
                await pool.release(connection)
            await asyncio.to_thread(
                wait_for, lambda: pair.ours(pair.raw_primary, name) == 1, "idle ones dropped"
            )
            await pool.release(held[0])
            await asyncio.to_thread(
                wait_for, lambda: pair.ours(pair.raw_primary, name) == 0, "in-use one dropped"
            )
            await client.set("after-switch", "async")
            assert pair.raw_replica.get("after-switch") == b"async"
        finally:
            await client.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_readonly_reply_drops_the_pool_and_is_an_outage(
    pair: Pair, proxy: TcpProxy, asynchronous: bool
) -> None:
    name = _name()
    url = f"{proxy.url}/0?client_name={name}"

    def check_dropped() -> None:
        wait_for(lambda: pair.ours(pair.raw_primary, name) == 0, "every connection dropped")

    if not asynchronous:
        client = connect(url, role=ORCHESTRATOR)
        pool: Any = client.connection_pool
        held = [pool.get_connection() for _ in range(3)]
        for connection in held:
            pool.release(connection)
        wait_for(lambda: pair.ours(pair.raw_primary, name) == 3, "three connections")
        # Demoted in place, connections kept: the next write is answered READONLY, and the
        # retry's new connection finds a replica.
        pair.demote_primary()
        with pytest.raises(redis.ConnectionError, match="replica"):
            client.set("k", "v")
        check_dropped()
        assert pool.primary.switches >= 1
        pair.point(proxy)
        client.set("k", "v")  # outage over: the new primary answers
        assert pair.raw_replica.get("k") == b"v"
        client.close()
        return

    async def run() -> None:
        client = connect_async(url, role=ORCHESTRATOR)
        pool: Any = client.connection_pool
        try:
            held = [await pool.get_connection() for _ in range(3)]
            for connection in held:
                await pool.release(connection)
            wait_for(lambda: pair.ours(pair.raw_primary, name) == 3, "three connections")
            pair.demote_primary()
            with pytest.raises(redis.ConnectionError, match="replica"):
                await client.set("k", "v")
            await asyncio.to_thread(check_dropped)
            pair.point(proxy)
            await client.set("k", "v")
            assert pair.raw_replica.get("k") == b"v"
        finally:
            await client.aclose()

    asyncio.run(run())


def test_a_blocked_command_on_a_demoted_primary_is_an_outage(pair: Pair, proxy: TcpProxy) -> None:
    """A worker's BLMOVE waiting on the primary when it is demoted gets UNBLOCKED: taken as
    READONLY is, so the dequeue's outage path reconnects instead of failing on a reply."""
    name = _name()
    client = connect(f"{proxy.url}/0?client_name={name}", role=STANDARD.waiting(30.0))
    pool: Any = client.connection_pool
    for connection in [pool.get_connection(), pool.get_connection()]:
        pool.release(connection)  # one for the BLMOVE, one idle beside it
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            client.blmove("q", "q2", 25)
        except BaseException as error:  # what the waiter got is the oracle
            outcome.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_for(lambda: any(c.get("cmd") == "blmove" for c in pair.raw_primary.client_list()))
    pair.demote_primary()
    waiter.join(timeout=PATIENCE_S)
    assert not waiter.is_alive()
    [error] = outcome
    assert isinstance(error, redis.ConnectionError), repr(error)
    assert "replica" in str(error)
    assert pool.primary.switches == 1
    wait_for(lambda: pair.ours(pair.raw_primary, name) == 0, "the idle one dropped too")
    client.close()


def test_a_replica_is_refused_as_the_primary(pair: Pair) -> None:
    client = connect(f"redis://127.0.0.1:{pair.replica.port}/0", role=STANDARD)
    with pytest.raises(redis.ConnectionError, match="is a replica, not the primary"):
        client.get("k")
    client.close()


def test_a_user_without_info_is_served_without_the_check() -> None:
    args = ["--user", "default", "off", "--user", "app", "on", ">pw", "~*", "+@all", "-info"]
    with RedisServer(tcp=True, extra_args=args) as server:
        client = connect(f"redis://app:pw@127.0.0.1:{server.port}/0", role=STANDARD)
        client.set("k", "v")
        assert client.get("k") == b"v"
        assert client.connection_pool.primary.replid is None  # type: ignore[attr-defined]
        client.close()
