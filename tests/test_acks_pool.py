"""Acknowledged writes under a real worker pool: nothing is acted on before a replica holds it.

A primary with one replica (``tests/support/replica.py``) and ``TOOLPOOL_REDIS_REPLICAS=1``
for the pool and the client. Replication is frozen (the replica SIGSTOPped) at chosen points.
Oracles: a turn submitted while no replica acknowledges is refused loudly and none of its
calls runs; a result stored while no replica acknowledges is not handed to the client, and
once replication is back the same result is answered, by this collect and by a second one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from executor import RedisUnavailable, Settings
from executor.client import Executor
from tests.support.expect import ok
from tests.support.procs import running_pool
from tests.support.replica import Pair, primary_and_replica
from tests.support.waiting import PATIENCE_S, wait_for
from workers.pool._pool import WorkerPool

pytestmark = pytest.mark.proof


@pytest.fixture
def pair() -> Iterator[Pair]:
    with primary_and_replica() as started:
        yield started


@pytest.fixture
def settings(pair: Pair, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("hello")
    return Settings(
        redis_url=pair.primary.tcp_url,
        redis_replicas=1,
        redis_replica_wait_ms=300,
        workspace=root,
    )


@pytest.fixture
def pool(settings: Settings) -> Iterator[WorkerPool]:
    with running_pool(settings, 2) as started:
        yield started


def _read(call_id: str) -> dict[str, object]:
    return {"id": call_id, "name": "read_file", "arguments": {"path": "a.txt"}}


def test_calls_run_with_a_replica_acknowledging(settings: Settings, pool: WorkerPool) -> None:
    with Executor(settings=settings) as executor:
        first, second = executor.run([_read("r1"), _read("r2")], timeout=PATIENCE_S)
    assert ok(first) == ok(second) == "hello"


def test_a_turn_no_replica_acknowledges_is_refused_loudly(
    pair: Pair, settings: Settings, pool: WorkerPool
) -> None:
    with Executor(settings=settings) as executor:
        with pair.replica_paused(), pytest.raises(RedisUnavailable) as raised:
            executor.submit([_read("refused")])
        assert "0 of 1 replicas acknowledged the enqueue of turn" in str(raised.value)
        # Replication back: the pool serves the next turn as usual.
        [result] = executor.run([_read("after")], timeout=PATIENCE_S)
    assert ok(result) == "hello"


def test_a_result_no_replica_holds_is_not_handed_out(
    pair: Pair, settings: Settings, pool: WorkerPool
) -> None:
    workspace = Path(settings.worker.workspace)
    command = "touch started; while [ ! -e go ]; do sleep 0.05; done; echo done"
    call = {"id": "b1", "name": "bash", "arguments": {"command": command, "timeout": 60}}
    with Executor(settings=settings) as executor:
        turn = executor.submit([call])
        wait_for((workspace / "started").exists, "bash to start")
        with pair.replica_paused():
            (workspace / "go").touch()
            # The worker stores the result on the primary, but no replica takes it: the
            # collect must not answer it, and says Redis could not be reached meanwhile.
            with pytest.raises(RedisUnavailable):
                executor.collect(turn, timeout=2.0)
        [result] = executor.collect(turn, timeout=PATIENCE_S)
        [again] = executor.collect(turn.turn_id, timeout=PATIENCE_S)
    assert ok(result).endswith("stdout:\ndone")
    assert again == result


def test_a_second_collect_answers_the_same_after_redis_lost_the_result(
    pair: Pair, settings: Settings, pool: WorkerPool
) -> None:
    # As a failover without acknowledged writes can: the result and RQ's record both gone.
    with Executor(settings=settings) as executor:
        turn = executor.submit([_read("lost")])
        [first] = executor.collect(turn, timeout=PATIENCE_S)
        executor.client.delete(executor.keys.result("lost"), *executor.client.keys("rq:job:*"))
        [again] = executor.collect(turn.turn_id, timeout=5.0)
    assert ok(first) == "hello"
    assert again == first
