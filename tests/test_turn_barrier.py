"""A turn's batches ordered by a barrier: the call that stores its batch's last result puts the
next batch on the queue, in the same script; every other call of the turn waits.

The oracle: a later batch's jobs are on the queue exactly once, and only after every call of
the batch before has a result, whoever stored it (the worker, the pool for a dead worker, a
collector, a cancel); a result stored second counts for nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from executor import ErrorType, Settings, ToolResult, ToolStatus
from executor._rq import names as rq_names
from executor._rq.jobs import JobStatus, job_status
from executor.client import Executor, Turn
from tests.support.procs import running_pool
from tests.support.waiting import PATIENCE_S
from workers import builtin_registry


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a")
    return Settings(redis_url=redis_url, workspace=root, call_liveness_s=2.0, call_heartbeat_s=0.5)


@pytest.fixture
def executor(settings: Settings) -> Iterator[Executor]:
    # Calls are queued before any worker runs: the client checks them against these tools.
    with Executor(settings=settings, registry=builtin_registry()) as made:
        yield made


def _turn(executor: Executor) -> Turn:
    turn = executor.submit(
        [
            {"id": "p1", "name": "list_directory", "arguments": {}},
            {"id": "p2", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "w", "name": "write_file", "arguments": {"path": "b.txt", "content": "b"}},
            {"id": "r", "name": "read_file", "arguments": {"path": "b.txt"}},
        ]
    )
    assert turn.plan.batches == [[0, 1], [2], [3]]
    return turn


def _answer(executor: Executor, turn: Turn, index: int, content: str = "done") -> bool:
    """Store a result for call ``index`` as any writer of a result does: with what follows."""
    plan = turn.plan
    result = ToolResult(
        call_id=plan.call_ids[index], name=plan.tools[index], status=ToolStatus.OK, content=content
    )
    return executor.results.publish(plan.turn_id, result, plan.then(index))


def test_a_turn_is_stored_whole_its_later_batches_waiting(executor: Executor) -> None:
    turn = _turn(executor)
    ids = turn.plan.job_ids
    assert executor.queue.get_job_ids() == [ids[0], ids[1]]
    for index in (2, 3):
        assert job_status(executor.client, ids[index]) is JobStatus.DEFERRED
    # rq info and rq-dashboard list the waiting calls as deferred.
    assert sorted(executor.queue.deferred_job_registry.get_job_ids()) == sorted([ids[2], ids[3]])
    barrier = executor.client.hgetall(executor.keys.turn_barrier(turn.turn_id))
    assert barrier == {b"0": b"2", b"1": b"1"}  # the last batch has no barrier
    assert executor.client.ttl(executor.keys.turn_barrier(turn.turn_id)) > 0
    # A waiting call expires with its turn's barrier; a queued one does not (as in RQ).
    assert executor.client.ttl(rq_names.job_key(ids[2])) > 0
    assert executor.client.ttl(rq_names.job_key(ids[0])) == -1


def test_the_last_result_of_a_batch_releases_the_next_batch_once(executor: Executor) -> None:
    turn = _turn(executor)
    ids = turn.plan.job_ids
    executor.client.delete(executor.queue.key)  # as if workers had taken the first batch

    assert _answer(executor, turn, 0)
    assert job_status(executor.client, ids[2]) is JobStatus.DEFERRED
    assert executor.queue.get_job_ids() == []
    # A second result for the same call is dropped and counts for nothing.
    assert not _answer(executor, turn, 0, "again")
    assert executor.queue.get_job_ids() == []

    assert _answer(executor, turn, 1)
    assert job_status(executor.client, ids[2]) is JobStatus.QUEUED
    assert executor.client.ttl(rq_names.job_key(ids[2])) == -1
    assert executor.queue.get_job_ids() == [ids[2]]
    assert ids[2] not in executor.queue.deferred_job_registry.get_job_ids()
    assert not _answer(executor, turn, 1, "again")
    assert executor.queue.get_job_ids() == [ids[2]]  # not twice
    assert job_status(executor.client, ids[3]) is JobStatus.DEFERRED


def test_any_writer_of_a_result_counts_a_lost_or_timed_out_call_too(executor: Executor) -> None:
    turn = _turn(executor)
    plan = turn.plan
    executor.client.delete(executor.queue.key)
    lost = ToolResult.failure("p1", "list_directory", ErrorType.WORKER_LOST, "its worker died")
    assert executor.results.publish(plan.turn_id, lost, plan.then(0))
    timed_out = ToolResult.failure("p2", "read_file", ErrorType.TIMEOUT, "no result in time")
    assert executor.results.publish(plan.turn_id, timed_out, plan.then(1))
    assert executor.queue.get_job_ids() == [plan.job_ids[2]]


def test_a_barrier_that_expired_counts_nothing_and_leaves_no_key(executor: Executor) -> None:
    turn = _turn(executor)
    barrier = executor.keys.turn_barrier(turn.turn_id)
    executor.client.delete(barrier)  # as its expiry would, for a turn older than its plan
    assert _answer(executor, turn, 0)
    assert _answer(executor, turn, 1)
    assert not executor.client.exists(barrier)
    assert job_status(executor.client, turn.plan.job_ids[2]) is JobStatus.DEFERRED


@pytest.mark.proof  # a worker pool
def test_the_turn_goes_on_when_a_parallel_call_was_answered_as_lost(
    executor: Executor, settings: Settings
) -> None:
    turn = _turn(executor)
    plan = turn.plan
    # The first call's worker died before it ran: the pool (or a collector) answered it. The
    # job itself is gone from the queue, as a dead worker's would be.
    executor.client.lrem(executor.queue.key, 0, plan.job_ids[0])
    lost = ToolResult.failure("p1", "list_directory", ErrorType.WORKER_LOST, "its worker died")
    assert executor.results.publish(plan.turn_id, lost, plan.then(0))

    with running_pool(settings, 1):  # runs the second call, then (released) the rest in order
        first, second, third, fourth = executor.collect(turn, timeout=PATIENCE_S)

    assert first.error_type is ErrorType.WORKER_LOST
    assert (second.status, second.content) == (ToolStatus.OK, "a")
    assert (third.status, third.content) == (ToolStatus.OK, "Successfully wrote 1 bytes to b.txt")
    assert (fourth.status, fourth.content.splitlines()[0]) == (ToolStatus.OK, "b")
    assert executor.queue.deferred_job_registry.get_job_ids() == []


@pytest.mark.proof  # a worker pool
def test_a_cancelled_turn_drains_nothing_left_waiting(
    executor: Executor, settings: Settings
) -> None:
    turn = _turn(executor)
    executor.cancel(turn)
    with running_pool(settings, 1):
        results = executor.collect(turn, timeout=PATIENCE_S)
        # Every later batch was released (its calls answer at once, without running).
        assert all(r.error_type is ErrorType.CANCELLED for r in results), results
        assert not (settings.worker.workspace / "b.txt").exists()
        assert executor.queue.deferred_job_registry.get_job_ids() == []
