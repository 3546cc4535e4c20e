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

Query options: ``db``, ``client_name``, ``health_check_interval`` (seconds; a PING before
using a connection idle that long) and, for ``rediss://`` only, ``ssl_ca_certs``,
``ssl_ca_path``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_cert_reqs``
(none, optional, required), ``ssl_check_hostname`` and ``ssl_min_version`` (TLSv1_2,
TLSv1_3). Timeouts are not read from the URL: each role sets its own, below.

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
- ``STARTUP_PROBE`` 1 s / 5 s / 0 — the embedded redis-server's readiness PINGs.

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
import redis.asyncio.connection
import redis.connection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor._errors import ConfigurationError
from executor._settings import shown_url

DEFAULT_PORT = 6379
_SCHEMES = "redis://HOST:PORT/DB, rediss://HOST:PORT/DB (TLS) or unix:///PATH/redis.sock"


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
    transport: Literal["tcp", "unix"] = "tcp"
    host: str = "localhost"
    port: int = DEFAULT_PORT
    path: str | None = None  # the unix socket
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
STARTUP_PROBE = Role("startup probe", socket_timeout=1.0, connect_timeout=5.0)


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
        "socket_timeout": role.socket_timeout,
        "socket_connect_timeout": role.connect_timeout,
        # Always a Retry of our own: without one, redis-py's default differs between
        # from_url (none) and the constructor (ten, with backoff).
        "retry": (AsyncRetry if asynchronous else Retry)(NoBackoff(), role.retries),
        "health_check_interval": settings.health_check_interval,
        "client_name": settings.client_name,
    }
    if asynchronous:
        module: Any = redis.asyncio.connection
        pool_class: Any = redis.asyncio.ConnectionPool
    else:
        module = redis.connection
        pool_class = redis.ConnectionPool
    if settings.transport == "unix":
        connection_class = module.UnixDomainSocketConnection
        options["path"] = settings.path
    else:
        options["host"] = settings.host
        options["port"] = settings.port
        connection_class = module.Connection
        if settings.tls is not None:
            connection_class = module.SSLConnection
            options.update(settings.tls.kwargs())
    pool: redis.ConnectionPool | redis.asyncio.ConnectionPool = pool_class(
        connection_class=connection_class, **options
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


# A parser per scheme; an address of another kind adds its scheme here.
_PARSERS: Mapping[str, Callable[[str, SplitResult, dict[str, str]], RedisSettings]] = {
    "redis": _parse_tcp,
    "rediss": _parse_tcp,
    "unix": _parse_unix,
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
_OPTIONS = ("db", "client_name", "health_check_interval", *_TLS_OPTIONS)
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
