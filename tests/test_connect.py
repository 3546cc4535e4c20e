"""The connection factory: URLs parsed or refused, each role's options, real servers reached by
TCP, unix socket and TLS with a password or an ACL user, and no Redis client built elsewhere.
"""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.connection
import redis.sentinel
import rq.worker
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor import ConfigurationError, _primary
from executor._connect import (
    FOLLOWER,
    ORCHESTRATOR,
    PROBE,
    READER,
    STANDARD,
    STARTUP_PROBE,
    RedisSettings,
    RedisURLError,
    Role,
    TLSOptions,
    connect,
    connect_async,
    lock_roles,
)
from executor._rq.worker import ToolpoolForkingWorker, ToolpoolWorker
from executor._settings import shown_url
from executor.cli import main
from executor.cli._common import EXIT_REDIS
from executor.client import Executor
from executor.lock import RWLock
from tests.support.ports import free_port
from tests.support.tls import make_certificates, tls_server_args
from workers._embedded_redis import RedisServer
from workers.cli import up_command, worker_command

ROOT = Path(__file__).resolve().parent.parent
# Characters a URL must percent-encode, so that decoding the credentials is tested too.
PASSWORD = "p@ss:w/rd%-7f3a"
USER = "toolpool"

# -- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://localhost", {"host": "localhost", "port": 6379, "db": 0}),
        ("redis://", {"host": "localhost", "port": 6379, "db": 0}),
        ("redis://10.0.0.5:6380/3", {"host": "10.0.0.5", "port": 6380, "db": 3}),
        ("redis://h:7000/", {"host": "h", "port": 7000, "db": 0}),
        ("redis://h?db=4", {"host": "h", "db": 4}),
        ("redis://h/4?db=4", {"db": 4}),
        ("redis://[::1]:7001/1", {"host": "::1", "port": 7001, "db": 1}),
        ("REDIS://H:1/2", {"host": "h", "port": 1, "db": 2}),
        (
            f"redis://:{quote(PASSWORD, safe='')}@h/0",
            {"username": None, "password": PASSWORD},
        ),
        (
            f"redis://{USER}:{quote(PASSWORD, safe='')}@h/0",
            {"username": USER, "password": PASSWORD},
        ),
        ("redis://user@h", {"username": "user", "password": None}),
        ("redis://h/0", {"tls": None, "transport": "tcp"}),
        ("rediss://h:6380/0", {"tls": TLSOptions(), "port": 6380}),
        (
            "rediss://h/0?ssl_ca_certs=/ca.pem&ssl_certfile=/c.pem&ssl_keyfile=/k.pem"
            "&ssl_cert_reqs=optional&ssl_check_hostname=no&ssl_min_version=TLSv1_3",
            {
                "tls": TLSOptions(
                    ca_certs="/ca.pem",
                    certfile="/c.pem",
                    keyfile="/k.pem",
                    cert_reqs="optional",
                    check_hostname=False,
                    min_version=ssl.TLSVersion.TLSv1_3,
                )
            },
        ),
        ("unix:///run/redis/redis.sock", {"transport": "unix", "path": "/run/redis/redis.sock"}),
        ("unix:///tmp/a%20b.sock?db=2", {"path": "/tmp/a b.sock", "db": 2}),
        (
            f"unix://{USER}:{quote(PASSWORD, safe='')}@/tmp/r.sock",
            {"path": "/tmp/r.sock", "username": USER, "password": PASSWORD},
        ),
        ("redis://h/0?client_name=orchestrator", {"client_name": "orchestrator"}),
        ("redis://h/0?health_check_interval=30", {"health_check_interval": 30}),
        (
            "redis+sentinel://10.0.0.1:26380,s2,[::1]:26381/toolpool/3",
            {
                "transport": "sentinel",
                "sentinels": (("10.0.0.1", 26380), ("s2", 26379), ("::1", 26381)),
                "service": "toolpool",
                "db": 3,
                "tls": None,
            },
        ),
        ("redis+sentinel://s1/toolpool", {"sentinels": (("s1", 26379),), "db": 0}),
        ("redis+sentinel://s1/toolpool/", {"service": "toolpool", "db": 0}),
        ("redis+sentinel://s1/my%20primary?db=2", {"service": "my primary", "db": 2}),
        ("REDIS+SENTINEL://S1:1/t", {"sentinels": (("s1", 1),), "transport": "sentinel"}),
        (
            f"redis+sentinel://{USER}:{quote(PASSWORD, safe='')}@s1:1,s2:2/t/0",
            {"username": USER, "password": PASSWORD, "sentinel_password": None},
        ),
        (
            f"redis+sentinel://:pw@s1/t/0?sentinel_username=watcher"
            f"&sentinel_password={quote(PASSWORD, safe='')}",
            {
                "username": None,
                "password": "pw",
                "sentinel_username": "watcher",
                "sentinel_password": PASSWORD,
            },
        ),
        (
            "rediss+sentinel://s1:26380,s2:26380/t/1?ssl_ca_certs=/ca.pem&client_name=me",
            {"tls": TLSOptions(ca_certs="/ca.pem"), "client_name": "me", "db": 1},
        ),
    ],
)
def test_urls_are_parsed(url: str, expected: dict[str, Any]) -> None:
    settings = RedisSettings.from_url(url)
    found = {name: getattr(settings, name) for name in expected}
    assert found == expected
    assert settings.url == url


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "no URL given"),
        ("localhost:6379", "not a URL (no scheme://)"),
        ("http://x", "unknown scheme 'http://'; use redis://"),
        ("redis-sentinel://h:26379/mymaster/0", "unknown scheme 'redis-sentinel://'"),
        ("redis+sentinel://h:26379", "no service: name the Sentinels' service after them"),
        ("redis+sentinel://h:26379/", "no service"),
        ("redis+sentinel:///toolpool/0", "no Sentinels: give HOST[:PORT],HOST[:PORT]"),
        ("redis+sentinel://:pw@/toolpool/0", "no Sentinels"),
        ("redis+sentinel://a:1,,b:2/toolpool", "bad Sentinel list: an empty entry"),
        ("redis+sentinel://a:1,/toolpool", "bad Sentinel list: an empty entry"),
        ("redis+sentinel://a:1,b:x/toolpool", "bad port 'x' of Sentinel 'b:x'"),
        ("redis+sentinel://a:70000/toolpool", "bad port '70000' of Sentinel 'a:70000'"),
        ("redis+sentinel://a:0/toolpool", "bad port '0' of Sentinel 'a:0'"),
        ("redis+sentinel://a:/toolpool", "bad port '' of Sentinel 'a:'"),
        ("redis+sentinel://:1/toolpool", "bad Sentinel ':1': no host"),
        ("redis+sentinel://a/toolpool/x", "bad database 'x' in the path"),
        ("redis+sentinel://a/toolpool/1/2", "bad database '1/2' in the path"),
        ("redis+sentinel://a/toolpool/1?db=2", "two databases: 1 in the path, db=2"),
        ("redis+sentinel://a/t?ssl_ca_certs=/ca.pem", "a TLS option: use rediss://, not redis+"),
        ("redis+sentinel://a/t?socket_timeout=1", "socket_timeout is not read from the URL"),
        ("redis://h/0?sentinel_password=pw", "sentinel_password is a Sentinel option: use redis+"),
        ("rediss://h/0?sentinel_username=u", "sentinel_username is a Sentinel option"),
        ("unix:///r.sock?sentinel_password=pw", "sentinel_password is a Sentinel option"),
        ("rediss+sentinel://a/t?ssl_cert_reqs=maybe", "bad ssl_cert_reqs 'maybe'"),
        ("redis://h:abc/0", "bad port 'abc': a number from 1 to 65535"),
        ("redis://h:70000/0", "bad port '70000'"),
        ("redis://h:0/0", "bad port '0'"),
        ("redis://h:/0", "bad port ''"),
        ("redis://[::1]:x/0", "bad port 'x'"),
        ("redis://h/abc", "bad database 'abc' in the path: a whole number, 0 or more"),
        ("redis://h/-1", "bad database '-1'"),
        ("redis://h/1/2", "bad database '1/2'"),
        ("redis://h/0?db=x", "bad db 'x'"),
        ("redis://h/1?db=2", "two databases: 1 in the path, db=2"),
        ("redis://h/0?db=1&db=2", "db is given 2 times"),
        ("unix://", "no socket path"),
        ("unix://:pw@", "no socket path"),
        ("unix://run/redis.sock", "as in unix:///run/redis.sock"),
        ("unix:///tmp/r.sock?db=-1", "bad db '-1'"),
        ("redis://h/0?ssl_ca_certs=/ca.pem", "ssl_ca_certs is a TLS option: use rediss://"),
        ("unix:///r.sock?ssl_cert_reqs=none", "ssl_cert_reqs is a TLS option"),
        ("rediss://h/0?ssl_cert_reqs=maybe", "bad ssl_cert_reqs 'maybe': none, optional or"),
        ("rediss://h/0?ssl_check_hostname=perhaps", "bad ssl_check_hostname 'perhaps'"),
        ("rediss://h/0?ssl_min_version=SSLv3", "bad ssl_min_version 'SSLv3'"),
        ("redis://h/0?socket_timeout=1", "socket_timeout is not read from the URL"),
        ("redis://h/0?socket_connect_timeout=1", "socket_connect_timeout is not read"),
        ("redis://h/0?protocol=3", "unknown option 'protocol'; the URL may set db, client_name"),
        ("redis://h/0?db", "is not NAME=VALUE"),
        ("redis://h/0?health_check_interval=soon", "bad health_check_interval 'soon'"),
    ],
)
def test_bad_urls_are_refused_naming_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(RedisURLError) as caught:
        RedisSettings.from_url(url)
    assert problem in caught.value.problem
    assert str(caught.value) == f"Bad Redis URL {shown_url(url)}: {caught.value.problem}"
    # Callers that catch either kind keep catching it.
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ConfigurationError)


def test_a_refused_url_never_shows_its_password() -> None:
    for url in (
        "redis://:s3cret@h:x/0",
        "redis://u:s3cret@h/0?foo=1",
        "unix://:s3cret@x/r.sock",
        "redis+sentinel://:s3cret@a:1,b:x/t",
    ):
        with pytest.raises(RedisURLError) as caught:
            connect(url, role=STANDARD)
        assert "s3cret" not in str(caught.value)
        assert ":***@" in str(caught.value)
    with pytest.raises(RedisURLError) as caught:
        connect("redis+sentinel://a/t/x?sentinel_password=s3cret", role=STANDARD)
    assert "s3cret" not in str(caught.value)
    settings = RedisSettings.from_url("redis://u:s3cret@h/0")
    assert "s3cret" not in repr(settings)
    assert settings.shown == "redis://u:***@h/0"
    sentinel = RedisSettings.from_url(
        "rediss+sentinel://:s3cret@a,b/t/0?sentinel_password=s3cret&ssl_password=s3cret&db=0"
    )
    assert "s3cret" not in repr(sentinel)
    assert sentinel.shown == (
        "rediss+sentinel://:***@a,b/t/0?sentinel_password=***&ssl_password=***&db=0"
    )
    with pytest.raises(AttributeError):
        sentinel.sentinel_password = "changed"  # type: ignore[misc]


def test_a_url_is_parsed_once() -> None:
    url = "redis://h:6390/5"
    assert RedisSettings.from_url(url) is RedisSettings.from_url(url)
    # Settings parsed once serve every client built from them.
    settings = RedisSettings.from_url(url)
    assert _connection(connect(settings, role=STANDARD)).port == 6390


# -- each role's options ----------------------------------------------------------------------

URL = "redis://127.0.0.1:6390/0"


@dataclass(frozen=True)
class Site:
    """A role, and the redis-py arguments the sites that use it passed before the factory."""

    who: str
    role: Role
    before: dict[str, Any]


SITES = [
    Site(
        "Executor, Sessions, the MCP server",
        ORCHESTRATOR,
        {"socket_timeout": 10.0, "socket_connect_timeout": 10.0, "retry": Retry(NoBackoff(), 1)},
    ),
    Site(
        "the Executor's BLPOP client (liveness checks of 2 s)",
        ORCHESTRATOR.waiting(2.0),
        {"socket_timeout": 12.0, "socket_connect_timeout": 10.0, "retry": Retry(NoBackoff(), 1)},
    ),
    Site(
        "RWLock.from_url's scripts, 10 s lease",
        lock_roles(10_000, 1.0)[0],
        {
            "socket_timeout": 10 / 6,
            "socket_connect_timeout": 10 / 6,
            "retry": Retry(NoBackoff(), 1),
        },
    ),
    Site(
        "RWLock.from_url's scripts, short lease",
        lock_roles(200, 0.1)[0],
        {"socket_timeout": 0.05, "socket_connect_timeout": 0.05, "retry": Retry(NoBackoff(), 1)},
    ),
    Site(
        "RWLock.from_url's scripts, long lease",
        lock_roles(60_000, 1.0)[0],
        {"socket_timeout": 2.0, "socket_connect_timeout": 2.0, "retry": Retry(NoBackoff(), 1)},
    ),
    Site(
        "RWLock.from_url's wake-up waits",
        lock_roles(10_000, 1.0)[1],
        {"socket_timeout": 3.0, "socket_connect_timeout": 10 / 6},
    ),
    Site("toolpool timeline and metrics, the dashboard", READER, {"socket_timeout": 10.0}),
    Site("event followers", FOLLOWER, {"socket_timeout": None}),
    Site("toolpool status and events, the reaper", STANDARD, {"socket_timeout": 5.0}),
    Site("toolpool lock, the worker's client", STANDARD, {}),
    Site(
        "toolpool worker's check that Redis answers",
        PROBE,
        {"socket_connect_timeout": 3, "socket_timeout": 3, "retry": Retry(NoBackoff(), 0)},
    ),
    Site(
        "the embedded server's readiness probe",
        STARTUP_PROBE,
        {"socket_timeout": 1.0, "retry": Retry(NoBackoff(), 0)},
    ),
]


def _connection(client: redis.Redis) -> Any:
    return client.connection_pool.make_connection()


def _limits(connection: Any) -> tuple[Any, ...]:
    retry = connection.retry
    return (
        connection.socket_timeout,
        connection.socket_connect_timeout,
        retry.get_retries(),
        type(retry._backoff).__name__,
        connection.health_check_interval,
    )


@pytest.mark.parametrize("site", SITES, ids=[site.who for site in SITES])
def test_each_role_keeps_the_options_its_sites_used(site: Site) -> None:
    before = redis.Redis.from_url(URL, **site.before)
    now = connect(URL, role=site.role)
    assert _limits(_connection(now)) == _limits(_connection(before))
    # What RWLock reads to check that a wait for a wake-up is not cut short.
    kwargs = now.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == site.role.socket_timeout


@pytest.mark.parametrize("site", SITES, ids=[site.who for site in SITES])
def test_async_clients_get_the_same_options(site: Site) -> None:
    sync = _connection(connect(URL, role=site.role))
    made = connect_async(URL, role=site.role)
    connection = made.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    assert isinstance(made, redis.asyncio.Redis)
    assert isinstance(connection.retry, redis.asyncio.retry.Retry)
    assert _limits(connection) == _limits(sync)


def test_the_roles_are_the_documented_values() -> None:
    assert (ORCHESTRATOR.socket_timeout, ORCHESTRATOR.connect_timeout) == (10.0, 10.0)
    assert ORCHESTRATOR.retries == 1
    assert ORCHESTRATOR.waiting(5.0).socket_timeout == 15.0
    assert ORCHESTRATOR.waiting(0.0) is ORCHESTRATOR
    # A role with no socket timeout already waits as long as a command asks.
    assert FOLLOWER.waiting(5.0) is FOLLOWER
    scripts, wakeups = lock_roles(6_000, 1.5)
    assert (scripts.socket_timeout, scripts.connect_timeout, scripts.retries) == (1.0, 1.0, 1)
    assert (wakeups.socket_timeout, wakeups.connect_timeout, wakeups.retries) == (3.5, 1.0, 0)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_scheme_picks_the_connection_class(asynchronous: bool) -> None:
    module: Any = redis.asyncio.connection if asynchronous else redis.connection
    sentinel: Any = redis.asyncio.sentinel if asynchronous else redis.sentinel
    build = connect_async if asynchronous else connect

    def made(url: str) -> Any:
        return build(url, role=STANDARD).connection_pool.make_connection()

    tcp = made("redis://u:pw@10.1.2.3:6381/7?client_name=me&health_check_interval=15")
    assert isinstance(tcp, module.Connection)
    assert not isinstance(tcp, (module.SSLConnection, sentinel.SentinelManagedConnection))
    assert (tcp.host, tcp.port, tcp.db, tcp.username, tcp.password) == (
        "10.1.2.3",
        6381,
        7,
        "u",
        "pw",
    )
    assert (tcp.client_name, tcp.health_check_interval) == ("me", 15)
    tls = made("rediss://h:6380/0?ssl_ca_certs=/ca.pem&ssl_cert_reqs=optional")
    assert isinstance(tls, module.SSLConnection)
    assert tls.ca_certs == "/ca.pem"
    assert tls.cert_reqs == ssl.CERT_OPTIONAL
    unix = made("unix://:pw@/tmp/toolpool-test.sock?db=3")
    assert isinstance(unix, module.UnixDomainSocketConnection)
    assert (unix.path, unix.db, unix.password) == ("/tmp/toolpool-test.sock", 3, "pw")
    primary = made("redis+sentinel://u:pw@s1:26380/toolpool/4?client_name=me")
    assert isinstance(primary, sentinel.SentinelManagedConnection)
    assert not isinstance(primary, module.SSLConnection)
    assert (primary.db, primary.username, primary.password, primary.client_name) == (
        4,
        "u",
        "pw",
        "me",
    )
    secure = made("rediss+sentinel://s1/toolpool/0?ssl_ca_certs=/ca.pem")
    assert isinstance(secure, sentinel.SentinelManagedConnection)
    assert isinstance(secure, module.SSLConnection)
    assert secure.ca_certs == "/ca.pem"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("site", SITES, ids=[site.who for site in SITES])
def test_the_sentinels_get_the_roles_limits_tls_and_their_own_login(
    site: Site, asynchronous: bool
) -> None:
    url = (
        "rediss+sentinel://u:pw@s1:26380,s2:26381/toolpool/2?ssl_ca_certs=/ca.pem"
        "&sentinel_username=watcher&sentinel_password=spw"
    )
    build = connect_async if asynchronous else connect
    pool: Any = build(url, role=site.role).connection_pool
    plain = _connection(connect(URL, role=site.role))
    assert _limits(pool.make_connection()) == _limits(plain)
    assert pool.service_name == "toolpool"
    sentinels = pool.sentinel_manager.sentinels
    assert [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in sentinels
    ] == [("s1", 26380), ("s2", 26381)]
    for client in sentinels:
        connection = client.connection_pool.make_connection()
        assert _limits(connection)[:4] == _limits(plain)[:4]
        assert isinstance(connection, (redis.connection.SSLConnection, redis.asyncio.SSLConnection))
        assert connection.ca_certs == "/ca.pem"
        assert (connection.username, connection.password) == ("watcher", "spw")


def test_sentinels_without_a_login_of_their_own_get_none() -> None:
    pool: Any = connect("redis+sentinel://u:pw@s1/toolpool", role=STANDARD).connection_pool
    (sentinel,) = pool.sentinel_manager.sentinels
    connection = sentinel.connection_pool.make_connection()
    assert (connection.username, connection.password) == (None, None)
    assert not isinstance(connection, redis.connection.SSLConnection)


def test_the_sites_build_their_clients_with_their_roles(redis_url: str) -> None:
    executor = Executor(redis_url=redis_url)
    try:
        kwargs = executor.client.connection_pool.connection_kwargs
        assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (10.0, 10.0)
    finally:
        executor.close()
    lock = RWLock.from_url(redis_url, lease_ms=600, recheck_s=0.1)
    try:
        assert lock.redis.connection_pool.connection_kwargs["socket_timeout"] == 0.1
        assert lock.blocking_redis.connection_pool.connection_kwargs["socket_timeout"] == 2.1
    finally:
        lock.close()


# -- real servers -----------------------------------------------------------------------------


@dataclass
class Secured:
    """A redis-server on a unix socket and a loopback port that wants credentials."""

    server: RedisServer
    user: str  # "" for the default user (requirepass)

    def url(self, transport: str, password: str = PASSWORD, db: int = 2) -> str:
        login = f"{self.user}:{quote(password, safe='')}@"
        if transport == "unix":
            return f"unix://{login}{self.server.socket_path}?db={db}"
        return f"redis://{login}127.0.0.1:{self.server.port}/{db}"


@pytest.fixture(scope="module", params=["password", "acl"])
def secured(request: pytest.FixtureRequest) -> Iterator[Secured]:
    if request.param == "password":
        args, user = ["--requirepass", PASSWORD], ""
    else:
        # The default user is off: only the named one gets in.
        args = ["--user", "default", "off", "--user", USER, "on", f">{PASSWORD}", "~*", "+@all"]
        user = USER
    with RedisServer(tcp=True, extra_args=args) as server:
        yield Secured(server, user)


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_server_with_credentials_is_reached_by_tcp_and_unix_socket(
    secured: Secured, transport: str
) -> None:
    client = connect(secured.url(transport), role=STANDARD)
    other_db = connect(secured.url(transport, db=0), role=STANDARD)
    try:
        client.set("reached-by", transport)
        assert client.get("reached-by") == transport.encode()
        assert other_db.get("reached-by") is None  # the URL's db was selected
        assert client.acl_whoami() == (secured.user or "default")
    finally:
        client.delete("reached-by")
        client.close()
        other_db.close()

    async def read_async() -> object:
        async_client = connect_async(secured.url(transport), role=ORCHESTRATOR)
        try:
            await async_client.set("reached-async", transport)
            value = await async_client.get("reached-async")
            await async_client.delete("reached-async")
            return value
        finally:
            await async_client.aclose()

    assert asyncio.run(read_async()) == transport.encode()


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_wrong_credentials_are_refused(secured: Secured, transport: str) -> None:
    for role in (STANDARD, ORCHESTRATOR):
        client = connect(secured.url(transport, password="wrong"), role=role)
        with pytest.raises(redis.AuthenticationError):
            client.ping()
        client.close()
    anonymous = connect(
        secured.url(transport).replace(f"{quote(PASSWORD, safe='')}", ""), role=STANDARD
    )
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    anonymous.close()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path, int]]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a throw-away certificate")
    ca = make_certificates(tmp_path_factory.mktemp("tls") / "certs")
    port = free_port()
    args = ["--bind", "127.0.0.1", *tls_server_args(ca, port)]
    with RedisServer(extra_args=args) as server:
        yield server, ca, port


def test_a_tls_server_is_reached_with_its_ca_and_refused_without(
    tls_server: tuple[RedisServer, Path, int],
) -> None:
    _, ca, port = tls_server
    for host in ("127.0.0.1", "localhost"):  # the certificate names both
        client = connect(f"rediss://{host}:{port}/0?ssl_ca_certs={ca}", role=STANDARD)
        assert client.ping()
        client.close()

    async def ping_async() -> bool:
        client = connect_async(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}", role=READER)
        try:
            return bool(await client.ping())
        finally:
            await client.aclose()

    assert asyncio.run(ping_async())
    # The system's CAs do not know the throw-away one.
    unknown = connect(f"rediss://127.0.0.1:{port}/0", role=PROBE)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        unknown.ping()
    unknown.close()
    # Plain TCP to the TLS port gets no Redis answer.
    plain = connect(f"redis://127.0.0.1:{port}/0", role=PROBE)
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        plain.ping()
    plain.close()


# -- the CLI's messages -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["status"], ["events"], ["lock", "status"], ["timeline", "T"], ["session", "list"]]
)
def test_commands_refuse_a_bad_url_saying_why(command: list[str]) -> None:
    env: dict[str, str | None] = {name: None for name in os.environ if name.startswith("TOOLPOOL_")}
    result = CliRunner().invoke(main, [*command, "--redis", "redis://:s3cret@h:x/0"], env=env)
    assert result.exit_code == 2, result.output
    assert (
        "Invalid Redis URL redis://:***@h:x/0 (--redis or TOOLPOOL_REDIS_URL): "
        "bad port 'x': a number from 1 to 65535"
    ) in result.output
    assert "s3cret" not in result.output


# -- no Redis client built another way ---------------------------------------------------------

FACTORY = ROOT / "executor" / "_connect.py"
# What builds a client or a pool, by the last part of its name.
_BUILDERS = {
    "Redis",
    "StrictRedis",
    "RedisCluster",
    "ConnectionPool",
    "BlockingConnectionPool",
    "Sentinel",
    "SentinelConnectionPool",
    "Connection",
    "SSLConnection",
    "UnixDomainSocketConnection",
}
# ``X.from_url(...)`` that builds no client of its own (or builds it through the factory).
_FROM_URL_ALLOWED = {"RWLock", "RedisSettings"}


def client_constructions(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` builds a Redis client, pool or connection: ``"line: what"`` each."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}  # local name -> dotted name it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for item in node.names:
                if item.asname:
                    aliases[item.asname] = item.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for item in node.names:
                aliases[item.asname or item.name] = f"{node.module}.{item.name}"

    def dotted(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = dotted(node)
            if name and name.split(".")[-1] == "StrictRedis":
                found.append(f"{node.lineno}: {name}")
                continue
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name is None:
            continue
        parts = name.split(".")
        if parts[-1] in ("from_url", "from_pool"):
            if len(parts) < 2 or parts[-2] not in _FROM_URL_ALLOWED:
                found.append(f"{node.lineno}: {name}(...)")
        elif parts[-1] in _BUILDERS and (parts[0] == "redis" or parts[-1] in ("Redis", "Sentinel")):
            found.append(f"{node.lineno}: {name}(...)")
    return found


@pytest.mark.parametrize(
    "source",
    [
        "import redis\nredis.Redis.from_url(url)",
        "import redis\nredis.Redis(host='h')",
        "import redis\nredis.StrictRedis.from_url(url)",
        "import redis\nredis.asyncio.Redis(unix_socket_path='/r.sock')",
        "import redis.asyncio as aioredis\naioredis.Redis.from_url(url)",
        "from redis import Redis\nRedis()",
        "from redis.asyncio import Redis as AsyncRedis\nAsyncRedis.from_url(url)",
        "from redis import StrictRedis as S\nclient = S",
        "import redis\nredis.ConnectionPool(host='h')",
        "import redis\npool = redis.BlockingConnectionPool.from_url(url)",
        "from redis import ConnectionPool\nConnectionPool.from_url(url)",
        "from redis.connection import Connection\nConnection(host='h')",
        "from redis.sentinel import Sentinel\nSentinel([('h', 26379)])",
        "import redis.sentinel\nredis.sentinel.Sentinel([('h', 26379)]).master_for('m')",
        "import redis\nredis.Redis.from_pool(pool)",
    ],
)
def test_the_scan_finds_each_way_of_building_a_client(source: str) -> None:
    assert client_constructions(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from executor._connect import STANDARD, connect\nconnect(url, role=STANDARD)",
        "RWLock.from_url(url, scope='global')",
        "RedisSettings.from_url(url)",
        "import redis\ndef f(client: redis.Redis) -> None: ...",
        "import redis\nisinstance(client, redis.asyncio.Redis)",
        "import http.client\nhttp.client.HTTPSConnection('h')",
    ],
)
def test_the_scan_lets_the_factory_and_annotations_be(source: str) -> None:
    assert client_constructions(source) == []


def test_no_module_builds_a_redis_client_but_the_factory() -> None:
    files = sorted([*(ROOT / "executor").rglob("*.py"), *(ROOT / "workers").rglob("*.py")])
    # The scan sees the code it is meant to.
    assert FACTORY in files
    assert len(files) > 50
    found = []
    for path in files:
        if path == FACTORY:
            continue
        for where in client_constructions(path.read_text(), str(path)):
            found.append(f"{path.relative_to(ROOT)}:{where}")
    assert found == [], "build Redis clients with executor._connect.connect():\n" + "\n".join(found)
    # And the factory does build them.
    assert client_constructions(FACTORY.read_text())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    "url",
    [
        "redis://h/0",
        "rediss://h/0",
        "unix:///tmp/r.sock",
        "redis+sentinel://s1/toolpool",
        "rediss+sentinel://s1/toolpool",
    ],
)
def test_every_connection_reads_its_primary_before_redis_pys_own_code(
    url: str, asynchronous: bool
) -> None:
    """The hooks that follow the primary come first in each connection class's order, so
    redis-py's own connect and READONLY handling (the Sentinel one's too) cannot skip them."""
    build = connect_async if asynchronous else connect
    connection_class: Any = build(url, role=STANDARD).connection_pool.connection_class
    mixin = _primary._AsyncFollowsPrimary if asynchronous else _primary._FollowsPrimary
    assert connection_class.__mro__[1] is mixin
    for name in ("on_connect_check_health", "read_response"):
        assert getattr(connection_class, name) is getattr(mixin, name)


# RQ's parts that rebuild a client from ``connection_pool.connection_kwargs`` in another
# process: a Sentinel pool's kwargs hold its Sentinel manager, which does not cross over.
_REBUILDS = (
    "worker_pool",
    "SpawnWorker",
    "parse_connection",
    "get_connection_kwargs",
    "RQScheduler",
    "with_scheduler",
)


def test_no_rq_part_rebuilds_a_connection_from_its_pool_kwargs() -> None:
    files = sorted([*(ROOT / "executor").rglob("*.py"), *(ROOT / "workers").rglob("*.py")])
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in _REBUILDS
        if name in path.read_text()
    ]
    assert found == []
    # The forking worker forks (the work horse keeps the parent's pool); neither one spawns.
    for worker in (ToolpoolWorker, ToolpoolForkingWorker):
        assert not issubclass(worker, rq.worker.SpawnWorker)


@pytest.mark.parametrize("command", ["worker", "up"])
def test_worker_and_up_take_a_sentinel_url_and_say_when_no_primary_answers(
    command: str, tmp_path: Path
) -> None:
    env: dict[str, str | None] = {name: None for name in os.environ if name.startswith("TOOLPOOL_")}
    url = f"redis+sentinel://:s3cret@127.0.0.1:{free_port()}/toolpool/0"
    cli = worker_command if command == "worker" else up_command
    result = CliRunner().invoke(cli, ["--redis", url, "--workspace", str(tmp_path)], env=env)
    assert result.exit_code == EXIT_REDIS, result.output
    # Not the embedded server: the URL is used, and the Sentinels' answer is reported.
    assert "redis+sentinel://:***@127.0.0.1:" in result.output
    assert ": No master found for 'toolpool'. Check the URL" in result.output
    assert "s3cret" not in result.output
