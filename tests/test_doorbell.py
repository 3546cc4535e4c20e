"""The doorbells a worker of several queues waits on: every enqueue rings, a take keeps them true.

A worker that serves its host's sessions and the pool's queue blocks on both queues'
doorbells with one BLPOP (``executor._rq.dequeue``), so every place that puts a job on a
queue must push a token on its doorbell in the same transaction or script, and a take must
leave a token for each job another waiting worker could run. Counted here on a real Redis:
the tokens each enqueue leaves, the tokens a take leaves; and, with real worker processes, that
a worker killed while holding a token leaves its job to the others, and that an idle worker
sends nothing but its heartbeat.
"""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.serializers import JSONSerializer

from executor import ConfigurationError, Settings, ToolResult, ToolStatus
from executor._rq.dequeue import ReliableQueue, Taker
from executor._rq.doorbell import ring
from executor._rq.jobs import enqueue_session_op, named_queue, requeue_dequeued
from executor._rq.worker import ToolpoolWorker
from executor.client import Executor
from executor.contract import load_registry
from executor.wire import Keys, ResultStore
from tests.support.procs import DIST_TOOLS, Workers
from tests.support.waiting import PATIENCE_S, wait_for
from workers.pool._reaper import DeadChild, Reaper

KEYS = Keys()


def _queue(client: redis.Redis, name: str) -> ReliableQueue:
    return ReliableQueue(
        name, connection=client, serializer=JSONSerializer, doorbell=KEYS.doorbell(name)
    )


def _tokens(client: redis.Redis, queue: ReliableQueue) -> int:
    assert queue.doorbell is not None
    return int(client.llen(queue.doorbell))


def _push(queue: ReliableQueue, job_id: str, *, rung: bool = True) -> None:
    """A job on ``queue``, its doorbell rung in the same transaction (``rung``) or not."""
    assert queue.doorbell is not None
    with queue.connection.pipeline() as pipe:
        pipe.multi()
        queue.enqueue_call(
            func="workers.pipeline._job.execute", args=({},), job_id=job_id, pipeline=pipe
        )
        if rung:
            ring(pipe, queue.doorbell, 1)
        pipe.execute()


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


# -- every enqueue rings -----------------------------------------------------------------


@pytest.fixture
def executor(redis_url: str, tmp_path: Path) -> Iterator[Executor]:
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    with Executor(settings=settings, registry=load_registry(DIST_TOOLS)) as made:
        yield made


def test_a_turn_rings_once_per_job_of_its_first_batch(executor: Executor) -> None:
    executor.submit([_call("a", "echo", text="1"), _call("b", "echo", text="2")])
    executor.submit([_call("c", "bash", command="true"), _call("d", "echo", text="after")])

    assert _tokens(executor.client, _queue(executor.client, executor.queue.name)) == 3


def test_the_result_that_releases_a_batch_rings_for_its_jobs(executor: Executor) -> None:
    turn = executor.submit([_call("first", "bash", command="true"), _call("then", "echo", text="")])
    queue = _queue(executor.client, executor.queue.name)
    executor.client.delete(KEYS.doorbell(queue.name))
    result = ToolResult(call_id="first", name="bash", status=ToolStatus.OK, content="")

    assert ResultStore(executor.client, executor.keys).publish(
        turn.turn_id, result, turn.plan.then(0)
    )

    assert _tokens(executor.client, queue) == 1
    assert queue.get_job_ids() == [turn.plan.job_ids[0], turn.plan.job_ids[1]]


def test_a_session_operation_rings_its_hosts_queue(client: redis.Redis) -> None:
    queue = _queue(client, KEYS.host_queue_name("default", "h1"))

    enqueue_session_op(
        queue, {"session_op": "create", "name": "s1"}, doorbell=KEYS.doorbell(queue.name)
    )

    assert _tokens(client, queue) == 1


def test_a_job_put_back_by_the_pool_rings(client: redis.Redis) -> None:
    queue = _queue(client, "q")
    _push(queue, "lost")
    assert _taken(Taker(client, [queue])) == (queue.key, "lost")
    assert _tokens(client, queue) == 0

    assert requeue_dequeued(queue, "lost", doorbell=KEYS.doorbell(queue.name))

    assert _tokens(client, queue) == 1
    assert queue.get_job_ids() == ["lost"]


# -- a take keeps the doorbells true -----------------------------------------------------


def test_a_take_rings_for_the_job_it_leaves_on_another_queue(client: redis.Redis) -> None:
    # A worker of [host, pool] woken by the pool's token takes the host's job first (its
    # priority): a worker that waits on the pool's doorbell alone must still wake for the
    # pool's job.
    host, pool = _queue(client, "host"), _queue(client, "pool")
    _push(host, "h")
    _push(pool, "p")
    assert client.lpop(KEYS.doorbell("pool")) is not None  # the waiting worker's BLPOP

    assert _taken(Taker(client, [host, pool])) == (host.key, "h")

    assert (_tokens(client, host), _tokens(client, pool)) == (0, 1)


def test_a_job_pushed_without_a_ring_gets_one_at_the_next_take(client: redis.Redis) -> None:
    # ``rq requeue`` by hand rings nothing: any take of that queue makes up for it.
    first, second = _queue(client, "first"), _queue(client, "second")
    _push(second, "unrung-1", rung=False)
    _push(second, "unrung-2", rung=False)

    assert _taken(Taker(client, [first, second])) == (second.key, "unrung-1")

    assert _tokens(client, second) == 1


def test_the_pools_sweep_rings_a_queue_whose_ring_was_lost(
    client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    # A worker cut off from Redis after its BLPOP was answered took the token and never the
    # job: nothing would wake a waiting worker for it but the pool's sweep.
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    reaper = Reaper(redis_url, settings, socket.gethostname())
    try:
        queue = _queue(client, KEYS.queue_name(settings.client.queue))
        _push(queue, "stranded")
        assert client.lpop(KEYS.doorbell(queue.name)) is not None  # the lost worker's BLPOP

        assert reaper.sweep_dequeued()  # jobs wait: the pool looks again soon

        assert _tokens(client, queue) == 1
        assert reaper.sweep_dequeued()
        assert _tokens(client, queue) == 1  # rung once, not once a sweep
        assert queue.get_job_ids() == ["stranded"]
    finally:
        reaper.close()


def test_an_empty_look_drops_stale_tokens(client: redis.Redis) -> None:
    # Tokens of jobs a busy worker took without waiting: each would wake a worker for nothing.
    first, second = _queue(client, "first"), _queue(client, "second")
    _push(second, "taken-by-a-busy-worker")
    _push(second, "and-another")
    assert Taker(client, [second, first]).take_now() is not None
    client.lpop(second.key)  # the other, by a worker of that queue alone (RQ's BLMOVE)
    assert _tokens(client, second) == 1

    assert Taker(client, [first, second]).take_now() is None

    assert (_tokens(client, first), _tokens(client, second)) == (0, 0)


def test_a_worker_of_several_queues_needs_to_know_where_their_doorbells_are(
    client: redis.Redis,
) -> None:
    plain = [named_queue(client, "first"), named_queue(client, "second")]
    with pytest.raises(ConfigurationError, match="doorbells"):
        ToolpoolWorker(plain, connection=client)

    worker = ToolpoolWorker(plain, connection=client, keys=KEYS)

    doorbells = [getattr(queue, "doorbell", None) for queue in worker.queues]
    assert doorbells == [KEYS.doorbell("first"), KEYS.doorbell("second")]


# -- with worker processes ---------------------------------------------------------------


@pytest.fixture
def two_queue_settings(redis_url: str, tmp_path: Path) -> Settings:
    (tmp_path / "ws").mkdir()
    (tmp_path / "sessions").mkdir()
    return Settings(
        redis_url=redis_url,
        workspace=tmp_path / "ws",
        sessions_root=tmp_path / "sessions",
        host="h1",
        call_liveness_s=60,  # the orchestrator's own lost-call check must not answer first
        # The session sweep is a look of its own (every 30 s by default), not a wait for calls.
        session_sweep_s=3600,
    )


@pytest.fixture
def workers(two_queue_settings: Settings, tmp_path: Path) -> Iterator[Workers]:
    made = Workers(two_queue_settings, tmp_path / "workers")
    yield made
    made.stop_all()


def _waiting(client: redis.Redis) -> int:
    """How many clients block in a BLPOP (a worker of several queues, idle)."""
    return sum(c.get("cmd") == "blpop" and "b" in c.get("flags", "") for c in client.client_list())


@pytest.mark.proof  # worker processes, one stopped and killed
def test_a_worker_killed_holding_a_token_leaves_its_job_to_the_others(
    two_queue_settings: Settings, workers: Workers, client: redis.Redis
) -> None:
    (holder,) = workers.start(1)
    wait_for(lambda: _waiting(client) == 1, "the first worker to wait on its doorbells")
    os.kill(holder.pid, signal.SIGSTOP)
    workers.start(1)
    wait_for(lambda: _waiting(client) == 2, "the second worker to wait behind it")
    with Executor(settings=two_queue_settings) as executor:
        turn = executor.submit([_call("rung", "list_directory")])
        # Redis hands the token to the worker that waited first, which never reads it.
        wait_for(lambda: _waiting(client) == 1, "the stopped worker's BLPOP to be served")
        assert executor.queue.get_job_ids() == list(turn.plan.job_ids.values())
        workers.kill(holder)
        reaper = Reaper(str(two_queue_settings.redis.url), two_queue_settings, socket.gethostname())
        try:
            dead = DeadChild(
                holder.name, holder.pid, uuid.uuid4().hex, "was killed by signal SIGKILL"
            )
            assert reaper.bury(dead)
        finally:
            reaper.close()

        (result,) = executor.collect(turn, timeout=PATIENCE_S)

    assert result.status is ToolStatus.OK, result.content


@pytest.mark.proof  # a worker process, watched for two heartbeats
def test_an_idle_two_queue_worker_sends_nothing_but_its_heartbeat(
    workers: Workers, redis_url: str
) -> None:
    (worker,) = workers.start(1)
    watcher = redis.Redis.from_url(redis_url, socket_timeout=PATIENCE_S)
    wait_for(lambda: _waiting(watcher) == 1, "the worker to wait on its doorbells")
    heartbeat = KEYS.catalog(worker.name)
    sent: list[tuple[str, str]] = []
    beats = 0
    try:
        with watcher.monitor() as monitor:  # type: ignore[no-untyped-call]
            # From one refresh of the worker's catalog entry (its heartbeat) to the next.
            while beats < 2:
                words = str(monitor.next_command()["command"]).split(" ", 2)
                command, key = words[0].upper(), words[1] if len(words) > 1 else ""
                if (command, key) == ("SET", heartbeat):
                    beats += 1
                elif beats:
                    sent.append((command, key))
    finally:
        watcher.close()

    # The refresh is two commands in one round trip: its SADD may land either side.
    assert [item for item in sent if item != ("SADD", KEYS.catalog_index)] == []


def _taken(taker: Taker) -> tuple[str, str] | None:
    """What ``taker`` took now: its queue's key and the job's id."""
    taken = taker.take_now()
    return None if taken is None else (taken.queue_key, taken.job_id)
