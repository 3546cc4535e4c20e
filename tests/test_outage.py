"""Redis stops for longer than a lease and starts again.

Workers reconnect by themselves; an orchestrator gets its results, or a clear
``RedisUnavailable`` at its own deadline, never a hang; nothing is re-run silently. The Redis
here is a private one with append-only persistence (``appendfsync always``), as
docker-compose runs it, restarted on the same address.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq.job import Job
from rq.serializers import JSONSerializer

from executor import ErrorType, RedisUnavailable, Settings
from executor.client import Executor
from executor.wire import read_events
from tests.support.expect import ok
from tests.support.procs import running_pool
from tests.support.waiting import PATIENCE_S, wait_for
from workers import builtin_registry
from workers._embedded_redis import RedisServer
from workers.pool._pool import WorkerPool

# A process-heavy proof (a Redis outage under a worker pool): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

LEASE_MS = 1000
DOWNTIME_S = 3.0  # three leases


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(tcp=True, append_only=True) as started:
        yield started


@pytest.fixture
def settings(server: RedisServer, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("hello")
    return Settings(
        redis_url=server.tcp_url,
        workspace=root,
        lock_lease_ms=LEASE_MS,
        call_liveness_s=5.0,
        call_heartbeat_s=1.0,
    )


@pytest.fixture
def pool(settings: Settings) -> Iterator[WorkerPool]:
    with running_pool(settings, 2) as started:
        yield started


def _restart_in_background(server: RedisServer, downtime: float) -> threading.Thread:
    thread = threading.Thread(target=server.restart, args=(downtime,))
    thread.start()
    return thread


def _read(call_id: str) -> dict[str, object]:
    return {"id": call_id, "name": "read_file", "arguments": {"path": "a.txt"}}


def test_a_turn_in_flight_gets_its_results_and_workers_reconnect(
    server: RedisServer, settings: Settings, pool: WorkerPool
) -> None:
    pids = {c.pid for c in pool.children}
    with Executor(settings=settings) as executor:
        # Its lease is lost in the outage, which ends it long before the sleep does.
        command = "touch started; sleep 20; echo finished"
        turn = executor.submit(
            [
                {"id": "slow", "name": "bash", "arguments": {"command": command, "timeout": 60}},
                _read("after"),
            ]
        )
        # bash itself runs, under its lock (its claim alone comes before the lock is taken).
        wait_for((Path(settings.worker.workspace) / "started").exists, "bash to run")
        outage = _restart_in_background(server, DOWNTIME_S)
        started = time.monotonic()
        results = executor.collect(turn, timeout=PATIENCE_S)
        elapsed = time.monotonic() - started
        outage.join()

        # The bash call held the exclusive lock through the outage: its lease could not be
        # renewed, so it was stopped and says so; it is not run again.
        slow, after = results
        assert slow.error_type in (ErrorType.LOCK_LOST, ErrorType.WORKER_LOST), slow.content
        assert "check its effects" in slow.content.lower()
        assert ok(after) == "hello"
        assert elapsed < PATIENCE_S
        starts = [
            e
            for _, e in read_events(executor.client, executor.keys)
            if e.event == "tool_execution_started" and e.call_id == "slow"
        ]
        assert len(starts) <= 1

        # The same worker processes serve the next turn: they reconnected by themselves.
        again = executor.run([_read("next")], timeout=PATIENCE_S)
        assert ok(again[0]) == "hello"
    assert {c.pid for c in pool.children} == pids


def test_collect_raises_a_clear_error_at_its_deadline_then_gets_the_results(
    server: RedisServer, settings: Settings
) -> None:
    # No worker yet: the call waits on the queue, which the append-only file keeps. The
    # client checks the call against the built-in tools, since no worker publishes any.
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        turn = executor.submit([_read("r1")])
        outage = _restart_in_background(server, 4.0)
        wait_for(lambda: not _answers(server), "Redis to go down")
        started = time.monotonic()
        with pytest.raises(RedisUnavailable) as raised:
            executor.collect(turn, timeout=1.5)
        elapsed = time.monotonic() - started
        outage.join()

        message = str(raised.value)
        assert raised.value.turn_id == turn.turn_id
        assert "could not be reached" in message
        assert f"collect({turn.turn_id!r}) again" in message
        assert elapsed < 1.5 + 2.5, f"collect took {elapsed:.1f} s past a 1.5 s timeout"

        with running_pool(settings, 1):
            [result] = executor.collect(turn.turn_id, timeout=PATIENCE_S)
    assert ok(result) == "hello"


def test_submit_while_redis_is_down_says_nothing_runs(
    server: RedisServer, settings: Settings
) -> None:
    with Executor(settings=settings) as executor:
        outage = _restart_in_background(server, 2.0)
        wait_for(lambda: not _answers(server), "Redis to go down")
        started = time.monotonic()
        try:
            with pytest.raises(RedisUnavailable, match="none of its calls runs"):
                executor.submit([_read("r1")])
        finally:
            outage.join()
        assert time.monotonic() - started < 2.0 + 1.0
        # Redis is back: the same executor submits again with the same call id.
        with running_pool(settings, 1):
            results = executor.run([_read("r1")], timeout=PATIENCE_S)
    assert ok(results[0]) == "hello"


def _answers(server: RedisServer) -> bool:
    client = server.client(socket_timeout=0.5, connect_timeout=0.5, retries=0)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def test_calls_a_failed_submit_never_enqueued_are_answered_did_not_run(
    server: RedisServer, settings: Settings
) -> None:
    # The state a submit leaves when Redis goes away after the turn's plan and the first
    # call's job: the second call has no job at all.
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        turn = executor.submit([_read("stored"), _read("never")])
        Job.fetch(
            turn.plan.job_ids[1], connection=executor.client, serializer=JSONSerializer
        ).delete()
        with running_pool(settings, 1):
            stored, never = executor.collect(turn, timeout=PATIENCE_S)

    assert ok(stored) == "hello"
    assert never.error_type is ErrorType.CANCELLED
    assert "did not run: it was never enqueued" in never.content
