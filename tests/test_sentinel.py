"""Sentinel URLs against a real primary, replica and three Sentinels (``tests/support/redis_ha``):
sync and async clients and a worker pool keep working across a failover and a killed primary,
and afterwards no connection of theirs is left on the old primary.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from executor import NoWorkerError, RedisUnavailable, Settings
from executor._connect import ORCHESTRATOR, STANDARD, connect, connect_async
from executor.client import Executor
from tests.support.expect import ok
from tests.support.procs import child_env
from tests.support.redis_ha import RedisHA
from tests.support.waiting import PATIENCE_S, gone, wait_for

pytestmark = pytest.mark.proof

T = TypeVar("T")
_names = itertools.count()
FAULTS: dict[str, Callable[[RedisHA], float]] = {
    "sentinel_failover": RedisHA.failover,
    "kill_primary": RedisHA.kill_primary,
}


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[RedisHA]:
    with RedisHA(tmp_path) as harness:
        yield harness


def _name() -> str:
    return f"sentinel-test-{os.getpid()}-{next(_names)}"


def _ours(ha: RedisHA, port: int, name: str) -> int:
    """How many connections named ``name`` the data node on ``port`` has (0 if it is down)."""
    try:
        with ha.raw(port) as server:
            return sum(1 for client in server.client_list() if client.get("name") == name)
    except redis.ConnectionError:
        return 0


# What an outage raises: redis-py's errors to a client, toolpool's to an executor (whose
# workers may still be reconnecting when Redis is back).
_OUTAGE = (redis.ConnectionError, redis.TimeoutError, RedisUnavailable, NoWorkerError)


def _until_it_answers(attempt: Callable[[], T]) -> T:
    """``attempt()`` once the outage is over: a failover's outage raises ConnectionErrors."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            return attempt()
        except _OUTAGE:
            assert time.monotonic() < deadline, "the client never reached the new primary"
            time.sleep(0.05)


async def _until_it_answers_async(attempt: Callable[[], Awaitable[T]]) -> T:
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            return await attempt()
        except (redis.ConnectionError, redis.TimeoutError):
            assert time.monotonic() < deadline, "the client never reached the new primary"
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_sync_client_follows_the_primary(ha: RedisHA, fault: str) -> None:
    name = _name()
    client = connect(f"{ha.url(db=0)}?client_name={name}", role=ORCHESTRATOR)
    pool: Any = client.connection_pool
    try:
        held = [pool.get_connection() for _ in range(3)]  # a pool of three connections
        for connection in held:
            pool.release(connection)
        client.set("before", "1")
        old = ha.primary_port
        wait_for(lambda: _ours(ha, old, name) == 3, "three connections to the primary")
        assert pool.primary.switches == 0  # no switch told before there is one
        FAULTS[fault](ha)
        ha.refresh()
        assert ha.primary_port != old
        # Sentinel's +switch-master reaches the pool (with the old primary still writable,
        # after SENTINEL FAILOVER, nothing else would tell an idle connection).
        wait_for(lambda: pool.primary.switches >= 1, "the pool to learn of the switch")
        _until_it_answers(lambda: client.set("after", "2"))
        assert client.get("before") == b"1"  # the promoted replica had it
        with ha.raw(ha.primary_port) as primary:
            assert primary.get("after") == b"2"
        # Every connection of the pool, used or not, now goes to the new primary.
        again = [pool.get_connection() for _ in range(3)]
        for connection in again:
            assert (connection.host, connection.port) == ("127.0.0.1", ha.primary_port)
            pool.release(connection)
        wait_for(lambda: _ours(ha, old, name) == 0, "no connection left on the old primary")
        assert _ours(ha, ha.primary_port, name) == 3
    finally:
        client.close()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_an_async_client_follows_the_primary(ha: RedisHA, fault: str) -> None:
    name = _name()

    async def run() -> None:
        client = connect_async(f"{ha.url(db=0)}?client_name={name}", role=ORCHESTRATOR)
        try:
            await client.set("before", "1")
            old = ha.primary_port
            await asyncio.to_thread(FAULTS[fault], ha)
            ha.refresh()
            assert ha.primary_port != old
            pool: Any = client.connection_pool
            await asyncio.to_thread(
                wait_for, lambda: pool.primary.switches >= 1, "the pool to learn of the switch"
            )
            await _until_it_answers_async(lambda: client.set("after", "2"))
            assert await client.get("before") == b"1"
            with ha.raw(ha.primary_port) as primary:
                assert primary.get("after") == b"2"
            connection = await pool.get_connection()
            assert (connection.host, connection.port) == ("127.0.0.1", ha.primary_port)
            await pool.release(connection)
            await asyncio.to_thread(
                wait_for, lambda: _ours(ha, old, name) == 0, "nothing left on the old primary"
            )
        finally:
            await client.aclose()

    asyncio.run(run())


def test_sentinels_with_a_password_of_their_own(tmp_path: Path) -> None:
    """The Sentinels' login comes from sentinel_username and sentinel_password; a wrong one
    finds no primary."""
    with RedisHA(tmp_path) as ha:
        for port in ha.sentinel_ports:
            with ha.raw(port) as sentinel:
                sentinel.acl_setuser(
                    "watcher", enabled=True, passwords=["+watchword"], commands=["+@all"]
                )
        login = "sentinel_username=watcher&sentinel_password"
        good = connect(f"{ha.url()}?{login}=watchword", role=STANDARD)
        bad = connect(f"{ha.url()}?{login}=wrong", role=STANDARD)
        try:
            assert good.set("k", "v")
            with pytest.raises(redis.ConnectionError, match="No master found"):
                bad.get("k")
        finally:
            good.close()
            bad.close()


@pytest.mark.parametrize("fork", [False, True], ids=["simple", "fork"])
def test_a_worker_pool_on_a_sentinel_url_serves_calls_across_a_failover(
    ha: RedisHA, tmp_path: Path, fork: bool
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("hello")
    settings = Settings(redis_url=ha.url(db=0), workspace=workspace)
    log = tmp_path / "pool.log"
    argv = [sys.executable, "-m", "workers.cli", "worker", "--redis", ha.url(db=0)]
    argv += ["--workspace", str(workspace), "-n", "2", "--grace", "5"]
    if fork:  # each call in a forked work horse, on the pool it inherited
        argv.append("--fork")
    with log.open("ab") as output:
        process = subprocess.Popen(
            argv,
            env=child_env(settings),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    read = {"name": "read_file", "arguments": {"path": "a.txt"}}
    try:
        with Executor(settings=settings) as executor:
            wait_for(lambda: _until_it_answers(executor.tools), "the pool's catalog")
            [before] = executor.run([{"id": "before", **read}], timeout=PATIENCE_S)
            assert ok(before) == "hello"
            ha.failover()
            [after] = _until_it_answers(
                lambda: executor.run([{"id": "after", **read}], timeout=PATIENCE_S)
            )
            assert ok(after) == "hello", log.read_text()
            ha.kill_primary()
            [again] = _until_it_answers(
                lambda: executor.run([{"id": "again", **read}], timeout=PATIENCE_S)
            )
            assert ok(again) == "hello", log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=PATIENCE_S)
        finally:
            if not gone(process.pid):
                process.kill()
                process.wait()
    assert "on redis+sentinel://127.0.0.1:" in log.read_text()
