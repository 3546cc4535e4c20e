"""A turn's next batch runs when one job of a parallel batch was ended as lost (fault F6).

RQ counts a CANCELED parent as unmet even for a dependency that allows failure. Ending a lost
job (``end_lost_job``: cancel, enqueue dependents) released only the dependents with no other
parent still running; when the other parent finished later, RQ found the cancelled one and
left the next batch deferred for good. The third long fault run (seed 33) found it: a
list_directory whose worker was killed, beside a read_file that finished 0.2 s later, and the
edit after them never ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from executor import ErrorType, Settings, ToolStatus
from executor.client import Executor
from executor.wire import end_lost_job, release_dependents
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


def _status(executor: Executor, rq_job_id: str) -> JobStatus:
    return Job.fetch(rq_job_id, connection=executor.client, serializer=JSONSerializer).get_status()


@pytest.mark.proof  # a worker pool
def test_the_next_batch_runs_when_a_parallel_parent_was_ended_as_lost_first(
    executor: Executor, settings: Settings
) -> None:
    turn = executor.submit(
        [
            {"id": "lost", "name": "list_directory", "arguments": {}},
            {"id": "read", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "write", "name": "write_file", "arguments": {"path": "b.txt", "content": "b"}},
        ]
    )
    assert turn.plan.batches == [[0, 1], [2]]
    lost, read, write = (turn.plan.job_ids[i] for i in range(3))
    # The first parent's worker died: the job is ended before the second parent has run.
    assert end_lost_job(executor.client, lost)
    assert _status(executor, write) is JobStatus.DEFERRED

    with running_pool(settings, 1):  # runs the second parent, then (now) the next batch
        first, second, third = executor.collect(turn, timeout=PATIENCE_S)

    assert first.error_type is ErrorType.WORKER_LOST
    assert (second.status, second.content) == (ToolStatus.OK, "a")
    assert (third.status, third.content) == (ToolStatus.OK, "Successfully wrote 1 bytes to b.txt")
    assert _status(executor, read) is JobStatus.FINISHED


def test_release_waits_for_every_parent_and_releases_once(executor: Executor) -> None:
    turn = executor.submit(
        [
            {"id": "p1", "name": "list_directory", "arguments": {}},
            {"id": "p2", "name": "glob", "arguments": {"pattern": "*"}},
            {"id": "child", "name": "write_file", "arguments": {"path": "c.txt", "content": "c"}},
        ]
    )
    p1, p2, child = (turn.plan.job_ids[i] for i in range(3))
    end_lost_job(executor.client, p1)
    assert release_dependents(executor.client, p1) == 0  # p2 has not ended
    assert _status(executor, child) is JobStatus.DEFERRED

    end_lost_job(executor.client, p2)  # ends p2 and releases the child
    assert _status(executor, child) is JobStatus.QUEUED
    assert executor.queue.get_job_ids() == [child]
    assert release_dependents(executor.client, p2) == 0  # already released: not twice
    assert executor.queue.get_job_ids() == [child]
