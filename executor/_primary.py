"""Following the Redis primary: every pooled connection dropped when the primary behind a pool
changes, so that nothing keeps talking to an old one.

A pool of ``executor._connect`` is one of the pools below; its connections are the connection
classes below. A switch of primary is seen three ways:

- a connection gets a ``READONLY`` reply, or a blocked command's ``UNBLOCKED`` one (its server
  is a replica now): every idle connection
  of the pool is closed, the ones in use are closed when they come back, and the command
  raises ``redis.ConnectionError`` so that every outage path retries it;
- a new connection reads ``INFO replication`` (one round trip per connection, no more): a
  server that is a replica is refused with a ``ConnectionError``; a primary whose
  ``master_replid`` differs from the one the pool knew drops every other connection the same
  way (a primary endpoint behind a DNS name or a proxy that moved; a restarted Redis);
- for a Sentinel URL, redis-py asks a Sentinel for the primary's address before every new
  connection and closes the idle ones when the address changed (``redis.sentinel``); and one
  thread per process and set of Sentinels (``SwitchListener``) waits on a Sentinel for
  ``+switch-master``: every pool of that service closes its idle connections, and each one
  in use is closed as it is returned or checked out again. At idle it is one blocked read.

A server that refuses ``INFO`` (an ACL user without it, a renamed command) is used as before,
without the replication id check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.connection
import redis.sentinel
from redis.exceptions import ReadOnlyError, RedisError, ResponseError

log = logging.getLogger("executor.redis")


# What this process runs when any of its pools sees the primary switch (``on_switch``).
_SWITCH_CALLBACKS: list[Callable[[], None]] = []


def on_switch(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` (on the thread that saw it; keep it short) whenever a pool of this
    process sees its primary switch: a new replication id, READONLY, or Sentinel's
    announcement. What a worker must write again at once hooks in here (its catalog entry).
    Returns what unhooks it."""
    _SWITCH_CALLBACKS.append(callback)

    def unhook() -> None:
        with contextlib.suppress(ValueError):
            _SWITCH_CALLBACKS.remove(callback)

    return unhook


def _switched() -> None:
    for callback in list(_SWITCH_CALLBACKS):
        try:
            callback()
        except Exception:  # one hook failing must not stop a connection, nor the others
            log.exception("toolpool: a primary-switch hook failed")


class PrimaryTracker:
    """What one pool knows of its primary: its replication id, and a generation that rises at
    every switch; a connection made in an older generation is closed when it is returned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.replid: str | None = None
        self.generation = 0
        self.switches = 0

    def connected(self, replid: str | None) -> tuple[int, bool]:
        """A new connection reached a primary with ``replid``: its generation, and whether the
        primary changed (the other connections are then to be dropped)."""
        with self._lock:
            switched = replid is not None and self.replid is not None and replid != self.replid
            if replid is not None:
                self.replid = replid
            if switched:
                self.generation += 1
                self.switches += 1
            generation = self.generation
        if switched:
            _switched()
        return generation, switched

    def demoted(self) -> None:
        """A connection's server answered READONLY, or Sentinel announced a new primary: every
        connection made so far is stale, and the next one learns the new replication id."""
        with self._lock:
            self.generation += 1
            self.switches += 1
            self.replid = None
        _switched()

    def is_stale(self, connection: Any) -> bool:
        return bool(connection.generation != self.generation)


def replication(info: Any) -> tuple[str | None, str | None]:
    """``(role, master_replid)`` from an ``INFO replication`` reply (bytes or str)."""
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    fields = dict(line.strip().partition(":")[::2] for line in text.splitlines() if ":" in line)
    return fields.get("role"), fields.get("master_replid")


def _where(connection: Any) -> str:
    path = getattr(connection, "path", None)
    return str(path) if path else f"{connection.host}:{connection.port}"


def _replica_error(connection: Any) -> redis.ConnectionError:
    return redis.ConnectionError(f"Redis at {_where(connection)} is a replica, not the primary")


def _readonly(error: BaseException) -> bool:
    """A reply saying the server is a replica now: READONLY (which redis-py's Sentinel
    connection turns into a ConnectionError of its own), or the UNBLOCKED error a blocked
    command (a worker's BLMOVE) gets when its primary is demoted under it."""
    if isinstance(error, ReadOnlyError) or isinstance(error.__context__, ReadOnlyError):
        return True
    text = str(error)
    return isinstance(error, ResponseError) and text.startswith("UNBLOCKED") and "replica" in text


_DEMOTED = "answered READONLY: it is a replica now; every pooled connection to it is dropped"


# -- connections ------------------------------------------------------------------------------

if TYPE_CHECKING:
    _SyncBase = redis.connection.Connection
    _AsyncBase = redis.asyncio.connection.Connection
else:
    _SyncBase = _AsyncBase = object


class _FollowsPrimary(_SyncBase):
    """A connection that reads its server's role and replication id once, when it connects."""

    primary: PrimaryTracker | None = None
    pool_ref: weakref.ReferenceType[Any] | None = None
    generation = 0

    def on_connect_check_health(self, check_health: bool = True) -> None:
        super().on_connect_check_health(check_health=check_health)
        tracker = self.primary
        if tracker is None:
            return
        this: Any = self  # redis-py's sync connection is not annotated
        this.send_command("INFO", "replication", check_health=False)
        try:
            role, replid = replication(self.read_response())
        except ResponseError:  # INFO refused: nothing to compare
            role, replid = None, None
        if role == "slave":
            raise _replica_error(self)
        self.generation, switched = tracker.connected(replid)
        if switched:
            self._drop_others()

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except (ResponseError, redis.ConnectionError) as error:
            if self.primary is None or not _readonly(error):
                raise
            self.primary.demoted()
            this: Any = self
            this.disconnect()
            self._drop_others()
            raise redis.ConnectionError(f"Redis at {_where(self)} {_DEMOTED}") from None

    def _drop_others(self) -> None:
        pool = self.pool_ref() if self.pool_ref is not None else None
        if pool is not None:
            # Idle ones now; the ones in use, this one included, are returned to the pool
            # marked for a reconnect (FollowingPool.release).
            pool.disconnect(inuse_connections=False)


class _AsyncFollowsPrimary(_AsyncBase):
    """``_FollowsPrimary`` on ``redis.asyncio``."""

    primary: PrimaryTracker | None = None
    pool_ref: weakref.ReferenceType[Any] | None = None
    generation = 0

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        await super().on_connect_check_health(check_health=check_health)
        tracker = self.primary
        if tracker is None:
            return
        await self.send_command("INFO", "replication", check_health=False)
        try:
            role, replid = replication(await self.read_response())
        except ResponseError:
            role, replid = None, None
        if role == "slave":
            raise _replica_error(self)
        self.generation, switched = tracker.connected(replid)
        if switched:
            await self._drop_others()

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except (ResponseError, redis.ConnectionError) as error:
            if self.primary is None or not _readonly(error):
                raise
            self.primary.demoted()
            await self.disconnect()
            await self._drop_others()
            raise redis.ConnectionError(f"Redis at {_where(self)} {_DEMOTED}") from None

    async def _drop_others(self) -> None:
        pool = self.pool_ref() if self.pool_ref is not None else None
        if pool is not None:
            await pool.disconnect(inuse_connections=False)


class Connection(_FollowsPrimary, redis.connection.Connection):
    pass


class SSLConnection(_FollowsPrimary, redis.connection.SSLConnection):
    pass


class UnixConnection(_FollowsPrimary, redis.connection.UnixDomainSocketConnection):
    pass


class SentinelConnection(_FollowsPrimary, redis.sentinel.SentinelManagedConnection):
    pass


class SentinelSSLConnection(_FollowsPrimary, redis.sentinel.SentinelManagedSSLConnection):
    pass


class AsyncConnection(_AsyncFollowsPrimary, redis.asyncio.connection.Connection):
    pass


class AsyncSSLConnection(_AsyncFollowsPrimary, redis.asyncio.connection.SSLConnection):
    pass


class AsyncUnixConnection(
    _AsyncFollowsPrimary, redis.asyncio.connection.UnixDomainSocketConnection
):
    pass


class AsyncSentinelConnection(
    _AsyncFollowsPrimary, redis.asyncio.sentinel.SentinelManagedConnection
):
    pass


class AsyncSentinelSSLConnection(
    _AsyncFollowsPrimary, redis.asyncio.sentinel.SentinelManagedSSLConnection
):
    pass


# -- pools ------------------------------------------------------------------------------------


class _FollowingPool(redis.ConnectionPool):
    """A pool whose connections share one ``PrimaryTracker``; a connection of an older
    generation is closed as it is returned, so its next command goes to the new primary."""

    def __init__(self, *args: Any, follows_primary: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.primary = PrimaryTracker() if follows_primary else None

    # Called once, as the first connection is made (a Sentinel pool starts listening then).
    on_first_connection: Callable[[], None] | None = None

    def make_connection(self) -> Any:
        start, self.on_first_connection = self.on_first_connection, None
        if start is not None:
            start()
        connection: Any = super().make_connection()
        connection.primary = self.primary
        connection.pool_ref = weakref.ref(self)
        return connection

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        parent: Any = super()  # redis-py's sync pool is not annotated
        connection = parent.get_connection(*args, **kwargs)
        if self.primary is not None and self.primary.is_stale(connection):
            # Made before a switch that Sentinel announced: reconnect, to the new primary.
            try:
                connection.disconnect()
                connection.connect()
            except BaseException:
                self.release(connection)
                raise
        return connection

    def release(self, connection: Any) -> None:
        if self.primary is not None and self.primary.is_stale(connection):
            connection.mark_for_reconnect()
        super().release(connection)


class FollowingPool(_FollowingPool):
    """The pool of a ``redis://``, ``rediss://`` or ``unix://`` URL."""


class FollowingSentinelPool(_FollowingPool, redis.sentinel.SentinelConnectionPool):
    """The pool of a ``redis+sentinel://`` URL; closing it closes its Sentinel clients too."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections=inuse_connections)
        if inuse_connections:  # the client is being closed
            self.sentinel_manager.close()


class _AsyncFollowingPool(redis.asyncio.ConnectionPool):
    """``_FollowingPool`` on ``redis.asyncio``."""

    def __init__(self, *args: Any, follows_primary: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.primary = PrimaryTracker() if follows_primary else None

    on_first_connection: Callable[[], None] | None = None

    def make_connection(self) -> Any:
        start, self.on_first_connection = self.on_first_connection, None
        if start is not None:
            start()
        parent: Any = super()  # redis-py's asyncio pool is not annotated here
        connection = parent.make_connection()
        connection.primary = self.primary
        connection.pool_ref = weakref.ref(self)
        return connection

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        parent: Any = super()
        connection = await parent.get_connection(*args, **kwargs)
        if self.primary is not None and self.primary.is_stale(connection):
            try:
                await connection.disconnect()
                await connection.connect()
            except BaseException:
                await self.release(connection)
                raise
        return connection

    async def release(self, connection: Any) -> None:
        if self.primary is not None and self.primary.is_stale(connection):
            connection.mark_for_reconnect()
        await super().release(connection)


class AsyncFollowingPool(_AsyncFollowingPool):
    """``FollowingPool`` on ``redis.asyncio``."""


class AsyncFollowingSentinelPool(
    _AsyncFollowingPool, redis.asyncio.sentinel.SentinelConnectionPool
):
    """``FollowingSentinelPool`` on ``redis.asyncio``."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections=inuse_connections)
        if inuse_connections:
            await self.sentinel_manager.aclose()


# -- Sentinel's announcements -----------------------------------------------------------------

# After every Sentinel failed, the next round of attempts waits this long.
_RETRY_S = 1.0
_SWITCH = "+switch-master"


class SwitchListener:
    """One thread per process and set of Sentinels, subscribed to ``+switch-master`` on one of
    them; it tells every pool of the announced service that its primary changed.

    A pool is told when the announced address is not the one redis-py last connected it to.
    After (re)subscribing the listener asks for the primary's address, so a switch announced
    while it was not listening is not missed. It ends once no pool it serves is left (at its
    next message or reconnect). A Sentinel that stops answering without closing the connection
    leaves it waiting; the other checks (READONLY, the replication id) still apply.
    """

    def __init__(self, sentinels: list[redis.Redis]) -> None:
        self._sentinels = sentinels
        self._lock = threading.Lock()
        self._pools: dict[str, weakref.WeakSet[Any]] = {}
        self._thread = threading.Thread(target=self._run, name="toolpool-sentinel", daemon=True)

    @classmethod
    def watch(
        cls, key: Hashable, service: str, pool: Any, sentinels: Callable[[], list[redis.Redis]]
    ) -> None:
        """Tell ``pool`` (a following Sentinel pool) of every switch of ``service``'s primary;
        ``sentinels()`` builds the listener's clients, once per ``key`` and process."""
        with _LISTENERS_LOCK:
            listener = _LISTENERS.get(key)
            if listener is None or not listener._thread.is_alive():  # none yet, or forked
                listener = cls(sentinels())
                _LISTENERS[key] = listener
                listener._add(service, pool)
                listener._thread.start()
            else:
                listener._add(service, pool)

    def _add(self, service: str, pool: Any) -> None:
        with self._lock:
            self._pools.setdefault(service, weakref.WeakSet()).add(pool)

    def _serving(self) -> bool:
        with self._lock:
            return any(len(pools) for pools in self._pools.values())

    def _run(self) -> None:
        while self._serving():
            for sentinel in self._sentinels:
                try:
                    self._listen(sentinel)
                except (RedisError, OSError, ValueError) as error:  # next Sentinel
                    log.debug("Sentinel listener: %s", error)
                if not self._serving():
                    return
            threading.Event().wait(_RETRY_S)

    def _listen(self, sentinel: redis.Redis) -> None:
        client: Any = sentinel  # redis-py's sync client is not annotated
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(_SWITCH)
            with self._lock:
                services = list(self._pools)
            for service in services:
                address: Any = sentinel.sentinel_get_master_addr_by_name(service)
                if address:
                    self._seen(service, (_text(address[0]), int(address[1])))
            for message in pubsub.listen():
                fields = _text(message.get("data")).split()
                if message.get("type") == "message" and len(fields) == 5:
                    self._seen(fields[0], (fields[3], int(fields[4])))
                if not self._serving():
                    return
        finally:
            pubsub.close()

    def _seen(self, service: str, address: tuple[str, int]) -> None:
        with self._lock:
            pools = list(self._pools.get(service, ()))
        for pool in pools:
            # The address redis-py last connected this pool to; None: no connection yet.
            known = pool.master_address
            if known is None or (_text(known[0]), int(known[1])) == address:
                continue
            if pool.primary is not None:
                pool.primary.demoted()
            if isinstance(pool, redis.ConnectionPool):
                pool.disconnect(inuse_connections=False)
            # An asyncio pool lives on its own loop: its connections are closed as they are
            # checked out (is_stale) or returned.


_LISTENERS: dict[Hashable, SwitchListener] = {}
_LISTENERS_LOCK = threading.Lock()


def _text(data: Any) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
