"""The pool's reaper and RQ's own records of a dead worker's jobs (faults F2 and F5).

RQ 3 runs a job in steps, each a Redis write: the dequeue moves the job from its queue to the
queue's intermediate list (LMOVE), ``prepare_execution`` records an execution of the worker
in the ``StartedJobRegistry``, ``prepare_job_execution`` marks the job started and takes it
off the intermediate list, and the job's end removes the execution. (A worker that runs calls
in its own process writes the record and the start in one transaction; a forking worker
writes the record before its work horse starts the job.) A worker that dies
between two steps leaves RQ's records behind:

- F2: after the call's result is stored, before RQ records the job's end: the job stays
  started until RQ's registry cleanup minutes later (the turn's next batch was released by
  the result itself, in the script that stored it).
- F5: after the dequeue, before the start: the job sits in the intermediate list, which RQ
  only looks at every 10 minutes (and then fails the job). The call times out.

These tests put Redis in those states with RQ's own code (a worker object taking the steps
the dead one took), then run ``Reaper.bury``, and check that the jobs end or go back on
their queue, once, and that real workers then finish the turn. Two tests go through a real
pool: its only child is stopped (SIGSTOP) while it blocks in BLMOVE, so that Redis itself
hands it the job, and then killed.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from executor import ErrorType, Settings, ToolResult, ToolStatus
from executor._rq.jobs import requeue_dequeued
from executor._rq.worker import ToolpoolForkingWorker, ToolpoolWorker
from executor.client import Executor, Turn
from executor.contract import load_registry
from executor.wire import ResultStore
from tests.support.procs import DIST_TOOLS, Workers, events, named, running_pool
from tests.support.waiting import wait_for
from workers.pool._pool import WorkerPool
from workers.pool._reaper import DeadChild, Reaper

# A process-heavy proof (worker pools and the reaper): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

# The orchestrator's own detection of lost calls waits this long; every answer within a test
# (PATIENCE_S) must come from the reaper.
LIVENESS_S = 60.0
PATIENCE_S = 30.0
# The reaper's grace for a dequeued job with no owner while other workers live (1 s here to
# keep the tests short; the pool uses workers.pool._reaper.DEQUEUE_GRACE_S).
GRACE_S = 1.0


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    return Settings(redis_url=redis_url, workspace=root, call_liveness_s=LIVENESS_S)


@pytest.fixture
def executor(settings: Settings) -> Iterator[Executor]:
    with Executor(settings=settings, registry=load_registry(DIST_TOOLS)) as made:
        yield made


@pytest.fixture
def reaper(settings: Settings) -> Iterator[Reaper]:
    made = Reaper(str(settings.redis.url), settings, socket.gethostname(), grace=GRACE_S)
    yield made
    made.close()


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[Workers]:
    made = Workers(settings, tmp_path / "workers")
    yield made
    made.stop_all()


AnyWorker = ToolpoolWorker | ToolpoolForkingWorker


def rq_worker(
    executor: Executor, name: str, *, register: bool = True, forking: bool = False
) -> AnyWorker:
    """An RQ worker object named ``name`` on the call queue, to take RQ's steps by hand.
    ``forking``: a forking worker's, whose execution record is written before the start (a
    worker of calls in its own process writes both in one transaction)."""
    kind = ToolpoolForkingWorker if forking else ToolpoolWorker
    worker = kind(
        [executor.queue], connection=executor.client, serializer=JSONSerializer, name=name
    )
    if register:
        worker.register_birth()  # type: ignore[no-untyped-call]
    return worker


def dequeue(worker: AnyWorker, expected: str) -> Job:
    """RQ's dequeue (LMOVE to the intermediate list), as ``worker`` does it."""
    taken = Queue.dequeue_any(
        worker.queues, None, connection=worker.connection, serializer=JSONSerializer
    )
    assert taken is not None
    job, _ = taken
    assert job.id == expected
    return job


def start(worker: AnyWorker, job: Job) -> Execution:
    """RQ's two steps from a dequeued job to a started one."""
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
    return execution


def dead(name: str, reason: str = "exited with code 1") -> DeadChild:
    # A pid no process has (above the kernel's pid_max): nothing to release or kill.
    return DeadChild(name=name, pid=2**23, token=uuid.uuid4().hex, reason=reason)


def status(executor: Executor, rq_job_id: str) -> JobStatus:
    return Job.fetch(rq_job_id, connection=executor.client, serializer=JSONSerializer).get_status()


def intermediate(executor: Executor) -> list[str]:
    raw = executor.client.lrange(executor.queue.intermediate_queue_key, 0, -1)
    return [item.decode() for item in raw]  # type: ignore[union-attr]


def started_ids(executor: Executor) -> list[str]:
    ids: list[str] = executor.queue.started_job_registry.get_job_ids(cleanup=False)
    return ids


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def two_batches(executor: Executor, tag: str) -> Turn:
    """A turn of two batches: ``<tag>-first`` (echo), then ``<tag>-after`` (bash) after it."""
    return executor.submit(
        [
            call(f"{tag}-first", "echo", text=f"{tag} done"),
            call(f"{tag}-after", "bash", command=f"echo {tag} after"),
        ]
    )


def publish_ok(executor: Executor, turn: Turn, index: int, content: str) -> None:
    """Store a call's result as its worker does before it returns the job to RQ."""
    found = turn.plan.call_ids[index]
    stored = ResultStore(executor.client, executor.keys).publish(
        turn.turn_id,
        ToolResult(
            call_id=found,
            name=turn.plan.tools[index],
            status=ToolStatus.OK,
            content=content,
            original_chars=len(content),
        ),
        turn.plan.then(index),
    )
    assert stored


def requeue_events(executor: Executor) -> list[Any]:
    return [e for e in events(executor.client, executor.keys) if e.event == "job_requeued"]


# -- F2: a job RQ still records as started by the dead worker --------------------------


def test_started_job_with_a_result_is_ended_and_the_turn_goes_on(
    executor: Executor, reaper: Reaper, workers: Workers
) -> None:
    turn = two_batches(executor, "f2")
    first, after = turn.plan.job_ids[0], turn.plan.job_ids[1]
    other = executor.submit([call("other", "echo", text="other")])
    other_id = other.plan.job_ids[0]
    assert status(executor, after) is JobStatus.DEFERRED

    # Worker X starts the first call and stores its result, then dies before RQ's end.
    x = rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}")
    start(x, dequeue(x, first))
    publish_ok(executor, turn, 0, "f2 done")
    # A live worker Y runs a call of another turn.
    y = rq_worker(executor, f"y-{uuid.uuid4().hex[:8]}")
    start(y, dequeue(y, other_id))
    assert status(executor, first) is JobStatus.STARTED
    assert not executor.client.exists(executor.keys.worker_current(x.name))

    assert reaper.bury(dead(x.name))

    assert status(executor, first) is JobStatus.CANCELED
    assert first not in started_ids(executor)
    assert status(executor, after) is JobStatus.QUEUED
    assert executor.queue.get_job_ids() == [after]
    # Y's job is not the dead worker's: untouched.
    assert status(executor, other_id) is JobStatus.STARTED
    assert other_id in started_ids(executor)
    assert not named(events(executor.client, executor.keys), "call_lost")

    workers.start(1)
    done, ran = executor.collect(turn, timeout=PATIENCE_S)
    assert (done.status, done.content) == (ToolStatus.OK, "f2 done")
    assert ran.status is ToolStatus.OK, ran.content
    assert "f2 after" in ran.content


def test_started_job_without_a_result_is_answered_worker_lost(
    executor: Executor, reaper: Reaper
) -> None:
    turn = two_batches(executor, "nores")
    first, after = turn.plan.job_ids[0], turn.plan.job_ids[1]
    x = rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}")
    start(x, dequeue(x, first))

    assert reaper.bury(dead(x.name, "was killed by signal SIGKILL"))

    lost = ResultStore(executor.client, executor.keys).get("nores-first")
    assert lost is not None
    assert lost.error_type is ErrorType.WORKER_LOST
    assert f"({x.name}, pid {2**23}) was killed by signal SIGKILL" in lost.content
    (event,) = named(events(executor.client, executor.keys), "call_lost")
    assert (event.call_id, event.worker, event.data["by"]) == ("nores-first", x.name, "pool")
    assert status(executor, first) is JobStatus.CANCELED
    assert status(executor, after) is JobStatus.QUEUED


# -- F5: a job the dead worker took off the queue and never started --------------------


@pytest.mark.parametrize("step", ["dequeued", "execution_recorded"])
def test_dequeued_job_goes_back_on_its_queue_once_and_runs(
    executor: Executor, reaper: Reaper, workers: Workers, step: str
) -> None:
    turn = executor.submit([call("f5", "echo", text="back again")])
    (rq_id,) = turn.plan.job_ids.values()
    x = rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}", forking=step == "execution_recorded")
    job = dequeue(x, rq_id)
    if step == "execution_recorded":
        x.prepare_execution(job)
        assert rq_id in started_ids(executor)
    assert intermediate(executor) == [rq_id]
    assert executor.queue.get_job_ids() == []

    began = time.monotonic()
    assert reaper.bury(dead(x.name))
    # X was the queue's only worker: no grace to wait.
    assert time.monotonic() - began < GRACE_S

    assert executor.queue.get_job_ids() == [rq_id]
    assert intermediate(executor) == []
    assert rq_id not in started_ids(executor)
    assert status(executor, rq_id) is JobStatus.QUEUED
    (event,) = requeue_events(executor)
    assert (event.call_id, event.worker, event.data["job_id"]) == ("f5", x.name, rq_id)
    # Burying again (a retry) puts nothing back twice.
    assert reaper.bury(dead(x.name))
    assert executor.queue.get_job_ids() == [rq_id]
    assert len(requeue_events(executor)) == 1

    workers.start(1)
    (result,) = executor.collect(turn, timeout=PATIENCE_S)
    assert (result.status, result.content) == (ToolStatus.OK, "back again")


def test_a_requeued_job_that_runs_and_goes_at_once_is_recorded_with_its_call(
    executor: Executor, reaper: Reaper, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker may take a job put back, run it and have its record deleted (no record TTL by
    # default) before the pool writes its event: the event still names the call.
    turn = executor.submit([call("quick", "echo", text="gone")])
    (rq_id,) = turn.plan.job_ids.values()
    x = rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}")
    dequeue(x, rq_id)

    def put_back_and_gone(*args: Any, **kwargs: Any) -> bool:
        done = requeue_dequeued(*args, **kwargs)
        executor.client.delete(Job.key_for(rq_id))
        return done

    monkeypatch.setattr("workers.pool._reaper.requeue_dequeued", put_back_and_gone)
    assert reaper.bury(dead(x.name))

    (event,) = requeue_events(executor)
    assert (event.call_id, event.tool, event.data["job_id"]) == ("quick", "echo", rq_id)


def test_dequeued_job_of_a_live_worker_is_left_alone(executor: Executor, reaper: Reaper) -> None:
    turn = executor.submit([call("mine", "echo", text="mine"), call("late", "echo", text="late")])
    mine, late = turn.plan.job_ids[0], turn.plan.job_ids[1]
    x = rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}")
    y = rq_worker(executor, f"y-{uuid.uuid4().hex[:8]}", forking=True)
    # Y, alive, is between its dequeue and its start of ``mine`` (its execution recorded) ...
    y.prepare_execution(dequeue(y, mine))
    # ... and has just dequeued ``late``: it records the execution while X is being buried.
    late_job = dequeue(y, late)
    recorded = threading.Timer(GRACE_S / 4, y.prepare_execution, args=(late_job,))
    recorded.start()
    try:
        assert reaper.bury(dead(x.name))
    finally:
        recorded.join()

    assert intermediate(executor) == [mine, late]
    assert executor.queue.get_job_ids() == []
    assert set(started_ids(executor)) == {mine, late}
    assert requeue_events(executor) == []


def test_dequeued_job_without_an_owner_is_requeued_after_the_grace(
    executor: Executor, reaper: Reaper, workers: Workers
) -> None:
    turn = executor.submit([call("orphan", "echo", text="found")])
    (rq_id,) = turn.plan.job_ids.values()
    x = rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}")
    dequeue(x, rq_id)
    # A live worker serves the queue too: it might be the one that took the job.
    workers.start(1)

    # Burying does not wait for the grace (the supervisor would see the next death late);
    # the periodic sweep puts the job back once no worker started it within the grace.
    assert reaper.bury(dead(x.name))
    assert requeue_events(executor) == []
    began = time.monotonic()

    def swept() -> bool:
        reaper.sweep_dequeued()
        return bool(requeue_events(executor))

    wait_for(swept, "the sweep to put the job back")
    assert time.monotonic() - began >= GRACE_S
    (event,) = requeue_events(executor)
    assert "no worker started it within" in event.data["reason"]
    (result,) = executor.collect(turn, timeout=PATIENCE_S)
    assert (result.status, result.content) == (ToolStatus.OK, "found")
    assert intermediate(executor) == []


# -- through a real pool ---------------------------------------------------------------


@pytest.fixture
def pool(settings: Settings) -> Iterator[WorkerPool]:
    with running_pool(settings, 1, check_interval=0.1) as made:
        yield made


def stop_in_blmove(client: redis.Redis, pool: WorkerPool) -> int:
    """SIGSTOP the pool's only child while it blocks in BLMOVE; return its pid.

    Redis serves a blocked BLMOVE by itself: a job pushed now lands in the intermediate list
    as the child's, though the child never reads the reply.
    """
    (child,) = pool.children
    assert child.pid is not None

    def blocked() -> bool:
        return any(
            c.get("cmd") == "blmove" and "b" in c.get("flags", "") for c in client.client_list()
        )

    wait_for(blocked, "the pool's child to block in BLMOVE")
    os.kill(child.pid, signal.SIGSTOP)
    return child.pid


def refilled(pool: WorkerPool, pid: int) -> bool:
    (child,) = pool.children
    return child.alive and child.pid != pid


def test_pool_requeues_the_job_its_killed_child_had_dequeued(
    pool: WorkerPool, executor: Executor
) -> None:
    pid = stop_in_blmove(executor.client, pool)
    try:
        turn = executor.submit([call("taken", "list_directory")])
        (rq_id,) = turn.plan.job_ids.values()
        wait_for(lambda: intermediate(executor) == [rq_id], "Redis to hand the job over")
    finally:
        os.kill(pid, signal.SIGKILL)

    (result,) = executor.collect(turn, timeout=PATIENCE_S)

    assert result.status is ToolStatus.OK, result.content
    (event,) = requeue_events(executor)
    assert (event.call_id, event.data["job_id"]) == ("taken", rq_id)
    assert "no other live worker serves its queue" in event.data["reason"]
    wait_for(lambda: refilled(pool, pid), "the slot to be refilled")


def test_pool_ends_the_started_job_its_killed_child_left(
    pool: WorkerPool, executor: Executor
) -> None:
    pid = stop_in_blmove(executor.client, pool)
    (child,) = pool.children
    try:
        turn = two_batches(executor, "pool")
        first = turn.plan.job_ids[0]
        wait_for(lambda: intermediate(executor) == [first], "Redis to hand the job over")
        # The child's next steps, as RQ takes them: start, run, store the result; it dies
        # before RQ records the job's end.
        stand_in = rq_worker(executor, child.name, register=False)
        start(
            stand_in,
            Job.fetch(first, connection=executor.client, serializer=JSONSerializer),
        )
        publish_ok(executor, turn, 0, "pool done")
    finally:
        os.kill(pid, signal.SIGKILL)

    done, ran = executor.collect(turn, timeout=PATIENCE_S)

    assert (done.status, done.content) == (ToolStatus.OK, "pool done")
    assert ran.status is ToolStatus.OK, ran.content
    assert status(executor, first) is JobStatus.CANCELED
    assert not named(events(executor.client, executor.keys), "call_lost")


def test_pool_requeues_a_job_a_live_worker_dequeued_and_never_started(
    pool: WorkerPool, executor: Executor
) -> None:
    # A worker cut off from Redis just as its BLMOVE was served never reads the reply: Redis
    # moved the job to the intermediate list, the worker lives on. Nobody dies; X plays it.
    (child,) = pool.children
    pid = stop_in_blmove(executor.client, pool)
    try:
        stranded_call = call("stranded", "calculator", expression="6*7")
        turn = executor.submit([call("first", "list_directory"), stranded_call])
        first, stranded = turn.plan.job_ids[0], turn.plan.job_ids[1]
        wait_for(lambda: intermediate(executor) == [first], "the child's BLMOVE to be served")
        dequeue(rq_worker(executor, f"x-{uuid.uuid4().hex[:8]}"), stranded)
    finally:
        os.kill(pid, signal.SIGCONT)

    done, found = executor.collect(turn, timeout=PATIENCE_S)

    assert done.status is ToolStatus.OK, done.content
    assert (found.status, found.content) == (ToolStatus.OK, "6*7 = 42")
    # The sweep records the requeue after putting the job back, and the child may run the
    # call and store its result before that (seen on a busy machine): wait for the record.
    wait_for(lambda: bool(requeue_events(executor)), "the requeue to be recorded")
    (event,) = requeue_events(executor)
    assert (event.call_id, event.data["job_id"]) == ("stranded", stranded)
    assert "no worker started it within" in event.data["reason"]
    assert [(c.pid, c.alive) for c in pool.children] == [(child.pid, True)]
