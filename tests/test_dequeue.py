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
from collections import Counter
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.serializers import JSONSerializer

from executor import Sessions, Settings, ToolStatus
from executor._rq.dequeue import ReliableQueue
from executor._rq.doorbell import ring
from executor.client import Executor
from executor.wire import Keys
from tests.support.procs import running_pool
from tests.support.waiting import wait_for

# What a dequeue may send: waits (BLPOP on doorbells, RQ's BLMOVE) and takes (the script).
_DEQUEUE_COMMANDS = ("blpop", "blmove", "evalsha", "eval")


def _queue(client: redis.Redis, name: str) -> ReliableQueue:
    return ReliableQueue(
        name, connection=client, serializer=JSONSerializer, doorbell=Keys().doorbell(name)
    )


def _job(queue: ReliableQueue, job_id: str) -> Job:
    """Enqueue a job and ring its queue's doorbell, in one transaction (as toolpool does)."""
    assert queue.doorbell is not None
    with queue.connection.pipeline() as pipe:
        pipe.multi()
        job = queue.enqueue_call(
            func="workers.pipeline._job.execute", args=({},), job_id=job_id, pipeline=pipe
        )
        ring(pipe, queue.doorbell, 1)
        pipe.execute()
    return job


def _take(client: redis.Redis, queues: list[ReliableQueue], timeout: int | None) -> Job:
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


def _dequeue_commands(client: redis.Redis) -> Counter[str]:
    """The server's count of each command a dequeue may send, so far."""
    stats = client.info("commandstats")
    return Counter(
        {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in _DEQUEUE_COMMANDS}
    )


def _blocked(client: redis.Redis) -> list[str]:
    """The commands clients block in now."""
    return [c["cmd"] for c in client.client_list() if "b" in c.get("flags", "")]


@pytest.mark.parametrize("pushed_on", [0, 1], ids=["first-queue", "second-queue"])
def test_a_waiting_dequeue_takes_a_job_on_either_queue_with_one_blocking_command(
    client: redis.Redis, pushed_on: int
) -> None:
    queues = [_queue(client, "first"), _queue(client, "second")]
    before = _dequeue_commands(client)
    taken: list[Job] = []
    waiting = threading.Thread(target=lambda: taken.append(_take(client, queues, 30)))
    waiting.start()
    wait_for(lambda: _blocked(client) == ["blpop"], "the dequeue to wait on both doorbells")

    _job(queues[pushed_on], "pushed")
    waiting.join(30)

    assert [job.id for job in taken] == ["pushed"]
    assert _intermediate(client, queues[pushed_on]) == [b"pushed"]
    sent = _dequeue_commands(client) - before
    # A look that found nothing, one wait that the ring ended, the look that took the job:
    # never a wait on one queue while the job sat on the other.
    assert (sent["blpop"], sent["evalsha"] + sent["eval"]) == (1, 2), sent
    assert sent["blmove"] == 0, sent


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
