"""Every Redis client of every toolpool process: the URL parsed once, the client built per role.

``RedisSettings.from_url(url)`` reads a Redis URL into a frozen settings object, or raises
``RedisURLError`` naming what is wrong. ``connect(url_or_settings, role=...)`` and
``connect_async(...)`` build a ``redis.Redis`` / ``redis.asyncio.Redis`` from it with the
role's timeouts and retries. Nothing else in ``executor/`` or ``workers/`` builds a Redis
client (``tests/test_connect.py`` scans the code for one that does).

URLs::

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]     TCP (HOST defaults to localhost, PORT to 6379)
    rediss://...                                   the same over TLS
    unix://[[USER]:PASSWORD@]/PATH/redis.sock      a unix socket (DB as ?db=N)
    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]
                                                   the primary of SERVICE, asked of these
                                                   Sentinels (PORT defaults to 26379)
    rediss+sentinel://...                          the same over TLS, to Sentinels and servers

Query options: ``db``, ``client_name``, ``health_check_interval`` (seconds; a PING before
using a connection idle that long); for the TLS schemes only, ``ssl_ca_certs``,
``ssl_ca_path``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_cert_reqs``
(none, optional, required), ``ssl_check_hostname`` and ``ssl_min_version`` (TLSv1_2,
TLSv1_3); for the Sentinel schemes only, ``sentinel_username`` and ``sentinel_password``, the
Sentinels' own login (the URL's USER and PASSWORD are the Redis servers'; without these
options the Sentinels are asked without one). Timeouts are not read from the URL: each role
sets its own, below, on the Sentinel connections as on the servers'.

Every pool follows the primary (``executor/_primary.py``, docs/failover.md): a ``READONLY``
reply, a new primary seen by a new connection, or Sentinel's ``+switch-master`` closes the
pool's connections to the old one.

Roles (socket timeout / connect timeout / immediate retries after a ConnectionError or
TimeoutError; a socket timeout of None waits as long as a blocking command takes):

- ``ORCHESTRATOR`` 10 s / 10 s / 1 — ``Executor``, ``AsyncExecutor``, ``Sessions``, the MCP
  server. ``ORCHESTRATOR.waiting(s)`` adds ``s`` to the socket timeout for a BLPOP of ``s``.
  A command fails within 10 s rather than never; the retry reconnects once at once after a
  restarted Redis closed the pooled connection (``executor/client/_outage.py``).
- ``lock_roles(lease_ms, recheck_s)``: the lock's scripts and renewals, a sixth of the lease
  (0.05-2 s) / the same / 1, so a hung Redis costs at most a third of the lease per attempt;
  its wake-up waits (BLPOP), ``recheck_s`` + 2 s / a sixth of the lease / 0.
- ``READER`` 10 s / 5 s / 0 — ``toolpool timeline`` and ``metrics``, the dashboard.
- ``FOLLOWER`` None / 5 s / 0 — event followers (``metrics``, the dashboard, ``events
  --follow``), whose XREAD BLOCK waits.
- ``STANDARD`` 5 s / 5 s / 0 (redis-py's defaults, written out) — the worker's own client
  (RQ raises its socket timeout above its dequeue wait), the reaper, ``toolpool status``,
  ``events`` and ``lock``.
- ``PROBE`` 3 s / 3 s / 0 — ``toolpool worker`` / ``up`` checking that Redis answers.
- ``STARTUP_PROBE`` 1 s / 5 s / 0 — the embedded redis-server's readiness PINGs; the one role
  that does not follow the primary (``Role.follows_primary``).

The seam for another kind of address: a parser in ``_PARSERS`` for its scheme, and a branch in
``_pool`` that builds its connection pool; ``connect``, ``connect_async`` and every call site
stay as they are.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor import _primary
from executor._errors import ConfigurationError
from executor._settings import shown_url

DEFAULT_PORT = 6379
SENTINEL_PORT = 26379
_SCHEMES = (
    "redis://HOST:PORT/DB, rediss://HOST:PORT/DB (TLS), unix:///PATH/redis.sock or "
    "redis+sentinel://HOST:PORT,HOST:PORT/SERVICE/DB"
)


class RedisURLError(ConfigurationError, ValueError):
    """A Redis URL that cannot be used; the message names the URL (password masked) and why.

    A ``ValueError`` too, as redis-py's own URL errors are.
    """

    def __init__(self, url: str, problem: str) -> None:
        self.url = shown_url(url)
        self.problem = problem
        super().__init__(f"Bad Redis URL {self.url}: {problem}")


CertReqs = Literal["none", "optional", "required"]


@dataclass(frozen=True)
class TLSOptions:
    """How a ``rediss://`` connection checks the server, and the client's own certificate."""

    ca_certs: str | None = None
    ca_path: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    password: str | None = field(default=None, repr=False)
    cert_reqs: CertReqs = "required"
    check_hostname: bool = True
    min_version: ssl.TLSVersion | None = None

    def kwargs(self) -> dict[str, Any]:
        """The redis-py ``ssl_*`` keyword arguments."""
        return {
            "ssl_ca_certs": self.ca_certs,
            "ssl_ca_path": self.ca_path,
            "ssl_certfile": self.certfile,
            "ssl_keyfile": self.keyfile,
            "ssl_password": self.password,
            "ssl_cert_reqs": self.cert_reqs,
            "ssl_check_hostname": self.check_hostname,
            "ssl_min_version": self.min_version,
        }


@dataclass(frozen=True)
class RedisSettings:
    """Where one Redis is and how to log in, parsed once from its URL (``from_url``)."""

    url: str = field(repr=False)
    transport: Literal["tcp", "unix", "sentinel"] = "tcp"
    host: str = "localhost"
    port: int = DEFAULT_PORT
    path: str | None = None  # the unix socket
    sentinels: tuple[tuple[str, int], ...] = ()  # (host, port) of each Sentinel
    service: str | None = None  # the Sentinel service name of the primary
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TLSOptions | None = None
    client_name: str | None = None
    health_check_interval: int = 0

    @classmethod
    def from_url(cls, url: str) -> RedisSettings:
        """``url`` parsed; ``RedisURLError`` saying what is wrong with it."""
        return _parse(url)

    @property
    def shown(self) -> str:
        """The URL with its password masked, for messages and logs."""
        return shown_url(self.url)

    def __repr__(self) -> str:
        return f"RedisSettings({self.shown!r})"


@dataclass(frozen=True)
class Role:
    """What one kind of connection needs: its time limits and retries (values: module doc)."""

    name: str
    socket_timeout: float | None  # None: a blocking command may wait as long as it asks
    connect_timeout: float
    retries: int = 0  # re-sends, at once, after a ConnectionError or TimeoutError
    # False: a connection may talk to a replica and is not dropped at a switch of primary
    # (the embedded server's own probe and client, which a test may start as a replica).
    follows_primary: bool = True

    def waiting(self, extra_s: float) -> Role:
        """This role for a client whose commands block up to ``extra_s`` (BLPOP's timeout)."""
        if self.socket_timeout is None or extra_s <= 0:
            return self
        return replace(self, socket_timeout=self.socket_timeout + extra_s)


ORCHESTRATOR = Role("orchestrator", socket_timeout=10.0, connect_timeout=10.0, retries=1)
READER = Role("reader", socket_timeout=10.0, connect_timeout=5.0)
FOLLOWER = Role("follower", socket_timeout=None, connect_timeout=5.0)
STANDARD = Role("standard", socket_timeout=5.0, connect_timeout=5.0)
PROBE = Role("probe", socket_timeout=3.0, connect_timeout=3.0)
STARTUP_PROBE = Role(
    "startup probe", socket_timeout=1.0, connect_timeout=5.0, follows_primary=False
)


def lock_roles(lease_ms: int, recheck_s: float) -> tuple[Role, Role]:
    """The lock's two roles: scripts and renewals, and waits for a wake-up (BLPOP).

    Scripts: a sixth of the lease (0.05-2 s) and one immediate retry, so a hung or cut-off
    Redis costs at most a third of the lease per attempt; redis-py's own connect timeout would
    keep a renewal blocked past the lease on a link that drops packets silently. Wake-ups: a
    socket timeout above ``recheck_s``, the longest a BLPOP waits.
    """
    script_s = min(2.0, max(0.05, lease_ms / 6000))
    scripts = Role("lock", socket_timeout=script_s, connect_timeout=script_s, retries=1)
    wakeups = Role("lock wake-ups", socket_timeout=recheck_s + 2.0, connect_timeout=script_s)
    return scripts, wakeups


def connect(target: str | RedisSettings, *, role: Role) -> redis.Redis:
    """A ``redis.Redis`` for ``target`` (a URL or parsed settings), with ``role``'s limits."""
    pool = _pool(_settings(target), role, asynchronous=False)
    assert isinstance(pool, redis.ConnectionPool)
    return redis.Redis.from_pool(pool)


def connect_async(target: str | RedisSettings, *, role: Role) -> redis.asyncio.Redis:
    """``connect``'s client on ``redis.asyncio``."""
    pool = _pool(_settings(target), role, asynchronous=True)
    assert isinstance(pool, redis.asyncio.ConnectionPool)
    return redis.asyncio.Redis.from_pool(pool)


# -- building ---------------------------------------------------------------------------------


def _settings(target: str | RedisSettings) -> RedisSettings:
    return target if isinstance(target, RedisSettings) else RedisSettings.from_url(target)


def _pool(
    settings: RedisSettings, role: Role, *, asynchronous: bool
) -> redis.ConnectionPool | redis.asyncio.ConnectionPool:
    """The connection pool behind a client: the one place a connection's options are set."""
    options: dict[str, Any] = {
        "db": settings.db,
        "username": settings.username,
        "password": settings.password,
        "client_name": settings.client_name,
        "health_check_interval": settings.health_check_interval,
        "follows_primary": role.follows_primary,
        **_limits(role, asynchronous),
    }
    tls = {} if settings.tls is None else settings.tls.kwargs()
    if settings.transport == "sentinel":
        return _sentinel_pool(settings, role, options, tls, asynchronous=asynchronous)
    tcp: type[Any]
    ssl_: type[Any]
    unix: type[Any]
    if asynchronous:
        pool_class: Any = _primary.AsyncFollowingPool
        tcp, ssl_, unix = (
            _primary.AsyncConnection,
            _primary.AsyncSSLConnection,
            _primary.AsyncUnixConnection,
        )
    else:
        pool_class = _primary.FollowingPool
        tcp, ssl_, unix = _primary.Connection, _primary.SSLConnection, _primary.UnixConnection
    connection_class: type[Any]
    if settings.transport == "unix":
        connection_class = unix
        options["path"] = settings.path
    else:
        options["host"] = settings.host
        options["port"] = settings.port
        connection_class = tcp if settings.tls is None else ssl_
        options.update(tls)
    pool: redis.ConnectionPool | redis.asyncio.ConnectionPool = pool_class(
        connection_class=connection_class, **options
    )
    return pool


def _limits(role: Role, asynchronous: bool) -> dict[str, Any]:
    return {
        "socket_timeout": role.socket_timeout,
        "socket_connect_timeout": role.connect_timeout,
        # Always a Retry of our own: without one, redis-py's default differs between
        # from_url (none) and the constructor (ten, with backoff).
        "retry": (AsyncRetry if asynchronous else Retry)(NoBackoff(), role.retries),
    }


def _sentinel_pool(
    settings: RedisSettings,
    role: Role,
    options: dict[str, Any],
    tls: dict[str, Any],
    *,
    asynchronous: bool,
) -> redis.ConnectionPool | redis.asyncio.ConnectionPool:
    # The Sentinels get the role's limits (a Retry each: one is not shared between clients),
    # TLS as the servers do, and their own login.
    sentinel_options: dict[str, Any] = {
        "username": settings.sentinel_username,
        "password": settings.sentinel_password,
        **_limits(role, asynchronous),
    }
    if settings.tls is not None:
        sentinel_options.update(tls, ssl=True)
    options.update(tls)
    addresses = list(settings.sentinels)
    pool: redis.ConnectionPool | redis.asyncio.ConnectionPool
    manager_class: Any  # redis-py's Sentinel classes are not annotated
    if asynchronous:
        manager_class = redis.asyncio.sentinel.Sentinel
        manager = manager_class(addresses, sentinel_kwargs=sentinel_options)
        pool = _primary.AsyncFollowingSentinelPool(
            settings.service,
            manager,
            connection_class=(
                _primary.AsyncSentinelConnection
                if settings.tls is None
                else _primary.AsyncSentinelSSLConnection
            ),
            **options,
        )
    else:
        manager_class = redis.sentinel.Sentinel
        manager = manager_class(addresses, sentinel_kwargs=sentinel_options)
        pool = _primary.FollowingSentinelPool(
            settings.service,
            manager,
            connection_class=(
                _primary.SentinelConnection
                if settings.tls is None
                else _primary.SentinelSSLConnection
            ),
            **options,
        )
    # The listener's Sentinel clients wait on a subscription: no socket timeout; always sync.
    listener_options = {**sentinel_options, **_limits(role, asynchronous=False)}
    listener_options["socket_timeout"] = None
    key = (settings.sentinels, settings.sentinel_username, settings.sentinel_password, settings.tls)

    def listener_clients() -> list[redis.Redis]:
        manager_class: Any = redis.sentinel.Sentinel
        return list(manager_class(addresses, sentinel_kwargs=listener_options).sentinels)

    if role.follows_primary:
        follower: Any = pool
        follower.on_first_connection = functools.partial(
            _primary.SwitchListener.watch, key, str(settings.service), pool, listener_clients
        )
    return pool


# -- parsing ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _parse(url: str) -> RedisSettings:
    if not url:
        raise RedisURLError(url, f"no URL given; use {_SCHEMES}")
    if "://" not in url:
        raise RedisURLError(url, f"not a URL (no scheme://); use {_SCHEMES}")
    parts = urlsplit(url)
    parser = _PARSERS.get(parts.scheme)
    if parser is None:
        raise RedisURLError(url, f"unknown scheme {parts.scheme + '://'!r}; use {_SCHEMES}")
    query = _query(url, parts)
    settings = parser(url, parts, query)
    return replace(settings, **_common_options(url, query))


def _parse_tcp(url: str, parts: SplitResult, query: dict[str, str]) -> RedisSettings:
    _no_sentinel_options(url, query, f"{parts.scheme}://")
    tls = _tls(url, query) if parts.scheme == "rediss" else None
    if tls is None:
        _no_tls_options(url, query, f"{parts.scheme}://")
    return RedisSettings(
        url=url,
        transport="tcp",
        host=unquote(parts.hostname or "") or "localhost",
        port=_port(url, parts),
        db=_db(url, parts.path, query),
        username=_credential(parts.username),
        password=_credential(parts.password),
        tls=tls,
    )


def _parse_unix(url: str, parts: SplitResult, query: dict[str, str]) -> RedisSettings:
    _no_tls_options(url, query, "unix://")
    _no_sentinel_options(url, query, "unix://")
    host = parts.netloc.rpartition("@")[2]
    if host:
        raise RedisURLError(
            url,
            f"a unix:// URL names no host ({host!r} here): the socket's absolute path "
            f"follows three slashes, as in unix:///{host}{parts.path}",
        )
    path = unquote(parts.path)
    if not path:
        raise RedisURLError(url, "no socket path; use unix:///PATH/redis.sock")
    return RedisSettings(
        url=url,
        transport="unix",
        path=path,
        db=_db(url, "", query),
        username=_credential(parts.username),
        password=_credential(parts.password),
    )


def _parse_sentinel(url: str, parts: SplitResult, query: dict[str, str]) -> RedisSettings:
    tls = _tls(url, query) if parts.scheme == "rediss+sentinel" else None
    if tls is None:
        _no_tls_options(url, query, f"{parts.scheme}://")
    login, _, hosts = parts.netloc.rpartition("@")
    user, _, password = login.partition(":")
    if not hosts:
        raise RedisURLError(url, "no Sentinels: give HOST[:PORT],HOST[:PORT]... before /SERVICE")
    service, _, db_path = unquote(parts.path).lstrip("/").partition("/")
    if not service:
        raise RedisURLError(
            url,
            "no service: name the Sentinels' service after them, as in "
            f"{parts.scheme}://HOST:26379,HOST:26379/SERVICE/DB",
        )
    return RedisSettings(
        url=url,
        transport="sentinel",
        sentinels=tuple(_sentinel_address(url, entry) for entry in hosts.split(",")),
        service=service,
        db=_db(url, db_path, query),
        username=_credential(user),
        password=_credential(password),
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
        tls=tls,
    )


def _sentinel_address(url: str, entry: str) -> tuple[str, int]:
    if not entry:
        raise RedisURLError(
            url, "bad Sentinel list: an empty entry; give HOST[:PORT],HOST[:PORT]..."
        )
    try:
        parts = urlsplit(f"//{entry}")
        host, port = parts.hostname, parts.port
    except ValueError:
        raw = entry.rpartition("]")[2].partition(":")[2]
        raise RedisURLError(
            url, f"bad port {raw!r} of Sentinel {entry!r}: a number from 1 to 65535"
        ) from None
    if not host:
        raise RedisURLError(url, f"bad Sentinel {entry!r}: no host")
    if port == 0 or (port is None and entry.endswith(":")):
        raw = entry.rpartition(":")[2]
        raise RedisURLError(
            url, f"bad port {raw!r} of Sentinel {entry!r}: a number from 1 to 65535"
        )
    return unquote(host), SENTINEL_PORT if port is None else port


# A parser per scheme; an address of another kind adds its scheme here.
_PARSERS: Mapping[str, Callable[[str, SplitResult, dict[str, str]], RedisSettings]] = {
    "redis": _parse_tcp,
    "rediss": _parse_tcp,
    "unix": _parse_unix,
    "redis+sentinel": _parse_sentinel,
    "rediss+sentinel": _parse_sentinel,
}

_TLS_OPTIONS = (
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
    "ssl_cert_reqs",
    "ssl_check_hostname",
    "ssl_min_version",
)
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
_OPTIONS = ("db", "client_name", "health_check_interval", *_TLS_OPTIONS, *_SENTINEL_OPTIONS)
_TIMEOUTS = ("socket_timeout", "socket_connect_timeout", "timeout", "retry_on_timeout")
_CERT_REQS: Mapping[str, CertReqs] = {
    "none": "none",
    "optional": "optional",
    "required": "required",
}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _query(url: str, parts: SplitResult) -> dict[str, str]:
    try:
        found = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise RedisURLError(url, f"the query {parts.query!r} is not NAME=VALUE&...") from None
    for name, values in found.items():
        if name in _TIMEOUTS:
            raise RedisURLError(
                url, f"{name} is not read from the URL: toolpool sets each connection's timeouts"
            )
        if name not in _OPTIONS:
            raise RedisURLError(
                url, f"unknown option {name!r}; the URL may set {', '.join(_OPTIONS)}"
            )
        if len(values) > 1:
            raise RedisURLError(url, f"{name} is given {len(values)} times")
    return {name: values[0] for name, values in found.items()}


def _common_options(url: str, query: dict[str, str]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if "client_name" in query:
        changes["client_name"] = query["client_name"] or None
    if "health_check_interval" in query:
        changes["health_check_interval"] = _count(
            url, "health_check_interval", query["health_check_interval"]
        )
    return changes


def _port(url: str, parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError:
        raw = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
        raise RedisURLError(url, f"bad port {raw!r}: a number from 1 to 65535") from None
    if port == 0:
        raise RedisURLError(url, "bad port '0': a number from 1 to 65535")
    if port is None and parts.netloc.endswith(":"):
        raise RedisURLError(url, "bad port '': a number from 1 to 65535, or none for 6379")
    return DEFAULT_PORT if port is None else port


def _db(url: str, path: str, query: dict[str, str]) -> int:
    raw_path = unquote(path).strip("/")
    from_path = _count(url, "database", raw_path, where=" in the path") if raw_path else None
    from_query = _count(url, "db", query["db"]) if "db" in query else None
    if from_path is not None and from_query is not None and from_path != from_query:
        raise RedisURLError(url, f"two databases: {from_path} in the path, db={from_query}")
    return from_query if from_query is not None else from_path or 0


def _count(url: str, name: str, raw: str, *, where: str = "") -> int:
    if not raw.isdigit() or not raw.isascii():
        raise RedisURLError(url, f"bad {name} {raw!r}{where}: a whole number, 0 or more")
    return int(raw)


def _credential(raw: str | None) -> str | None:
    # An empty user name (``redis://:PASSWORD@host``) is the default user, as in redis-py.
    return unquote(raw) if raw else None


def _no_tls_options(url: str, query: dict[str, str], scheme: str) -> None:
    found = [name for name in _TLS_OPTIONS if name in query]
    if found:
        raise RedisURLError(url, f"{found[0]} is a TLS option: use rediss://, not {scheme}")


def _no_sentinel_options(url: str, query: dict[str, str], scheme: str) -> None:
    found = [name for name in _SENTINEL_OPTIONS if name in query]
    if found:
        raise RedisURLError(
            url, f"{found[0]} is a Sentinel option: use redis+sentinel://, not {scheme}"
        )


def _tls(url: str, query: dict[str, str]) -> TLSOptions:
    reqs = _CERT_REQS.get(query.get("ssl_cert_reqs", "required").lower())
    if reqs is None:
        raise RedisURLError(
            url, f"bad ssl_cert_reqs {query['ssl_cert_reqs']!r}: none, optional or required"
        )
    check = query.get("ssl_check_hostname", "true").lower()
    if check not in _TRUE + _FALSE:
        raise RedisURLError(
            url, f"bad ssl_check_hostname {query['ssl_check_hostname']!r}: true or false"
        )
    version: ssl.TLSVersion | None = None
    if "ssl_min_version" in query:
        raw = query["ssl_min_version"]
        if raw not in ("TLSv1_2", "TLSv1_3"):
            raise RedisURLError(url, f"bad ssl_min_version {raw!r}: TLSv1_2 or TLSv1_3")
        version = ssl.TLSVersion[raw]
    return TLSOptions(
        ca_certs=query.get("ssl_ca_certs") or None,
        ca_path=query.get("ssl_ca_path") or None,
        certfile=query.get("ssl_certfile") or None,
        keyfile=query.get("ssl_keyfile") or None,
        password=query.get("ssl_password") or None,
        cert_reqs=reqs,
        check_hostname=check in _TRUE,
        min_version=version,
    )
