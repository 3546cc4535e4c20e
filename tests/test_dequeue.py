"""Taking a job off several queues: it lands in its queue's intermediate list, never in limbo.

A worker that serves its host's sessions listens on two queues. RQ 3 takes a job off several
queues with BLPOP, so a job handed to a worker that dies, stops or loses its connection at
that moment was gone and its call waited for the turn's timeout; ``ReliableQueue`` moves it
into the intermediate list of its queue (as RQ does for one queue), where the pool finds it.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.serializers import JSONSerializer

from executor import Sessions, Settings, ToolStatus
from executor._rq.dequeue import ReliableQueue
from executor.client import Executor
from tests.support.procs import running_pool
from tests.support.waiting import wait_for


def _queue(client: redis.Redis, name: str) -> Queue:
    return Queue(name, connection=client, serializer=JSONSerializer)


def _job(queue: Queue, job_id: str) -> Job:
    return queue.enqueue_call(func="workers.pipeline._job.execute", args=({},), job_id=job_id)


def _take(client: redis.Redis, queues: list[Queue], timeout: int | None) -> Job:
    taken = ReliableQueue.dequeue_any(queues, timeout, client, serializer=JSONSerializer)
    assert taken is not None
    return taken[0]


def _intermediate(client: redis.Redis, queue: Queue) -> list[object]:
    return list(client.lrange(queue.intermediate_queue_key, 0, -1))


def test_a_job_taken_off_several_queues_is_kept_in_its_queues_intermediate_list(
    client: redis.Redis,
) -> None:
    first, second = _queue(client, "first"), _queue(client, "second")
    _job(second, "j2")
    assert _take(client, [first, second], None).id == "j2"
    assert _intermediate(client, second) == [b"j2"]
    assert _intermediate(client, first) == []


def test_the_queues_are_taken_in_their_order(client: redis.Redis) -> None:
    first, second = _queue(client, "first"), _queue(client, "second")
    _job(second, "late")
    _job(first, "early")
    assert [_take(client, [first, second], None).id for _ in range(2)] == ["early", "late"]
    assert ReliableQueue.dequeue_any([first, second], None, client) is None


def test_a_waiting_dequeue_takes_a_job_pushed_on_any_queue(client: redis.Redis) -> None:
    first, second = _queue(client, "first"), _queue(client, "second")
    taken: list[Job] = []
    waiting = threading.Thread(target=lambda: taken.append(_take(client, [first, second], 30)))
    waiting.start()
    _job(second, "pushed")
    waiting.join(30)
    assert [job.id for job in taken] == ["pushed"]
    assert _intermediate(client, second) == [b"pushed"]


def test_a_dequeue_with_nothing_to_take_times_out(client: redis.Redis) -> None:
    with pytest.raises(DequeueTimeout):
        ReliableQueue.dequeue_any([_queue(client, "a"), _queue(client, "b")], 1, client)


# -- through a real pool ------------------------------------------------------------------


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    (tmp_path / "ws").mkdir()
    (tmp_path / "sessions").mkdir()
    # The orchestrator's own liveness check must not answer first: the pool does.
    return Settings(
        redis_url=redis_url,
        workspace=tmp_path / "ws",
        call_liveness_s=60,
        sessions_root=tmp_path / "sessions",
        host="h1",
    )


@pytest.mark.proof  # a worker pool whose child is stopped, then killed
def test_a_two_queue_worker_killed_while_taking_jobs_loses_none(
    settings: Settings, client: redis.Redis
) -> None:
    with running_pool(settings, 1, check_interval=0.1) as pool:
        with Sessions(settings=settings) as sessions:
            sessions.create("s1")
        (child,) = pool.children
        assert child.pid is not None

        def blocked() -> bool:
            return any(
                c.get("cmd") in ("blmove", "blpop") and "b" in c.get("flags", "")
                for c in client.client_list()
            )

        wait_for(blocked, "the pool's child to block in its dequeue")
        os.kill(child.pid, signal.SIGSTOP)
        with Executor(settings=settings) as executor:
            try:
                plain = executor.submit([{"name": "list_directory", "arguments": {}}])
                in_session = executor.submit(
                    [{"name": "list_directory", "arguments": {}}], session="s1"
                )
            finally:
                os.kill(child.pid, signal.SIGKILL)
            results = [
                *executor.collect(plain, timeout=30),
                *executor.collect(in_session, timeout=30),
            ]
    assert [r.status for r in results] == [ToolStatus.OK, ToolStatus.OK], results


@pytest.mark.proof  # a worker pool
def test_a_two_queue_worker_leaves_no_started_job_in_the_intermediate_lists(
    settings: Settings, client: redis.Redis
) -> None:
    # RQ takes a started job off the intermediate list only for a one-queue worker: a
    # two-queue worker's lists grew by every job, and the pool's sweep read them all.
    with running_pool(settings, 2) as _, Sessions(settings=settings) as sessions:
        sessions.create("s1")
        with Executor(settings=settings) as executor:
            for session in (None, "s1", None, "s1"):
                (result,) = executor.run(
                    [{"name": "list_directory", "arguments": {}}], session=session
                )
                assert result.status is ToolStatus.OK, result.content
            queues = [executor.queue.name, executor.keys.host_queue_name("default", "h1")]
    for name in queues:
        assert _intermediate(client, _queue(client, name)) == [], name
