"""The RQ side of a call: the one allowed entry point, enqueueing a turn, ending lost jobs.

Only JSON crosses Redis: every queue and job here uses RQ's ``JSONSerializer``, and a job
names exactly one function, ``ENTRY_POINT``; workers refuse every other (see
``workers.pool._rq_worker``).
"""

from __future__ import annotations

import contextlib

import redis
from redis.client import Pipeline
from rq import Queue
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.executions import Execution
from rq.job import Dependency, Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import as_text

from executor.wire._keys import Keys
from executor.wire._turns import CallJob, job_id

# The only function a toolpool worker runs. Kept as a string: the orchestrator never imports
# the worker side.
ENTRY_POINT = "workers.pipeline._job.execute"

_TERMINAL = {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.STOPPED}
# Passes over a queue's ready dependents before leaving them to RQ's own cleanup.
_READY_ATTEMPTS = 20
# Tries of the requeue transaction when other clients change the intermediate list meanwhile.
_REQUEUE_ATTEMPTS = 50


def call_queue(client: redis.Redis, keys: Keys, queue: str) -> Queue:
    """The RQ queue toolpool's calls go through, with the JSON serializer."""
    return Queue(keys.queue_name(queue), connection=client, serializer=JSONSerializer)


def named_queue(client: redis.Redis, name: str) -> Queue:
    """The RQ queue ``name`` (a full name: ``Keys.queue_name`` or ``Keys.host_queue_name``)."""
    return Queue(name, connection=client, serializer=JSONSerializer)


def enqueue_session_op(queue: Queue, payload: dict[str, object]) -> Job:
    """Send a session's folder work (create, delete) to its host's queue, ahead of calls.

    The same entry point as calls: a worker tells the two apart by the payload's
    ``session_op``.
    """
    return queue.enqueue_call(
        func=ENTRY_POINT,
        args=(payload,),
        timeout=-1,
        result_ttl=600,
        failure_ttl=600,
        at_front=True,
        description=f"session {payload.get('session_op')} {payload.get('name')}",
    )


def enqueue_call(
    queue: Queue,
    job: CallJob,
    *,
    after: list[str],
    result_ttl: int,
    failure_ttl: int,
    pipeline: Pipeline | None = None,
) -> Job:
    """Enqueue one call, to start once every job in ``after`` has ended (even if it failed).

    ``result_ttl``: how long RQ keeps the record of a job that ended well (toolpool keeps the
    call's result itself); ``failure_ttl``: of one that failed, for whoever looks into it.

    RQ's own job timeout is off (-1): the runner enforces each tool's limit, and SIGALRM
    would fire inside whatever the worker is doing, the lock's bookkeeping included.

    ``pipeline``: queue the job's commands there (its owner sends them); only for a job that
    waits for nothing, since RQ reads a job's parents before it enqueues the job.
    """
    if pipeline is not None and after:
        raise ValueError("a job with parents cannot be enqueued on a caller's pipeline")
    depends_on = Dependency(jobs=after, allow_failure=True) if after else None
    return queue.enqueue_call(
        func=ENTRY_POINT,
        args=(job.model_dump(mode="json"),),
        job_id=job_id(job.turn_id, job.index),
        depends_on=depends_on,
        timeout=-1,
        result_ttl=result_ttl,
        failure_ttl=failure_ttl,
        description=f"{job.call.name} ({job.call.id})",
        pipeline=pipeline,
    )


def enqueue_ready(queue: Queue) -> int:
    """Put on the queue the dependents RQ marked ready but left off it; return how many remain.

    rq 3.0's ``ReadyJobRegistry.enqueue_jobs`` WATCHes the queue's one ready registry and, when
    another worker adds or enqueues a dependent at the same moment, skips the job "for now":
    only the maintenance cleanup, every 10 minutes, enqueues it. A turn's next batch would wait
    that long. Every pass here is that cleanup; a conflict means someone else made progress.
    """
    left = 0
    for _ in range(_READY_ATTEMPTS):
        left = int(queue.ready_job_registry.get_job_count(cleanup=True))
        if not left:
            break
    return left


def job_status(client: redis.Redis, rq_job_id: str) -> JobStatus | None:
    """RQ's status of a job, or None if RQ no longer knows it."""
    try:
        return Job.fetch(rq_job_id, connection=client, serializer=JSONSerializer).get_status()
    except NoSuchJobError:
        return None


def end_lost_job(client: redis.Redis, rq_job_id: str) -> bool:
    """End a job whose worker is gone, so the calls that depend on it start now.

    RQ would only notice the dead worker when its registry cleanup runs (tens of seconds to
    minutes later); until then the turn's next batch would wait. Cancelling with
    ``enqueue_dependents`` releases them at once (they allow their parents to fail), and
    ``release_dependents`` those RQ leaves deferred; a job that has already ended still gets
    the latter. True if the job was ended here.
    """
    try:
        job = Job.fetch(rq_job_id, connection=client, serializer=JSONSerializer)
    except NoSuchJobError:
        return False
    ended = False
    if job.get_status() not in _TERMINAL:
        _drop_from_dependents(client, job)
        # ValueError: RQ's cancel reads the job's execution record, which may have expired.
        with contextlib.suppress(InvalidJobOperation, ValueError):
            job.cancel(enqueue_dependents=True)
            ended = True
    release_dependents(client, job.id)
    enqueue_ready(Queue(job.origin, connection=client, serializer=JSONSerializer))
    return ended


def _drop_from_dependents(client: redis.Redis, job: Job) -> None:
    """Take a job that is about to be cancelled out of its dependents' sets of parents.

    RQ counts a CANCELED parent as unmet, even for a dependency that allows failure: cancelling
    releases only the dependents with no other parent still running, and when that other
    parent finishes later, RQ finds the cancelled one and leaves the dependent deferred for
    good (a turn's next batch after a parallel batch in which one job was ended as lost). A
    parent that is no longer in the set is not checked, so RQ's own release works.
    """
    dependents = client.smembers(job.dependents_key)
    if dependents:
        with client.pipeline(transaction=False) as pipe:
            for dependent in dependents:
                pipe.srem(Job(as_text(dependent), connection=client).dependencies_key, job.id)
            pipe.execute()


def release_dependents(client: redis.Redis, rq_job_id: str) -> int:
    """Enqueue the deferred dependents of a job whose parents have all ended; return how many.

    The safety net for a dependent left deferred all the same (a parent cancelled by other
    means than ``end_lost_job``): every toolpool dependency allows failure, so any end of a
    parent will do.
    """
    dependents = [as_text(raw) for raw in client.smembers(Job.dependents_key_for(rq_job_id))]
    if not dependents:
        return 0
    with client.pipeline(transaction=False) as pipe:
        for dependent in dependents:
            pipe.hget(Job.key_for(dependent), "status")
        statuses = pipe.execute()
    released = 0
    for dependent, status in zip(dependents, statuses, strict=True):
        if status is None or as_text(status) != JobStatus.DEFERRED.value:
            continue  # RQ has enqueued it (the usual case), or it is gone
        try:
            job = Job.fetch(dependent, connection=client, serializer=JSONSerializer)
            parents = job.fetch_dependencies()
        except NoSuchJobError:
            continue
        if any(parent.get_status() not in _TERMINAL for parent in parents):
            continue
        queue = Queue(job.origin, connection=client, serializer=JSONSerializer)
        with contextlib.suppress(InvalidJobOperation):  # someone else released it first
            queue.deferred_job_registry.requeue(job)
            released += 1
    return released


def started_by(queue: Queue, worker_name: str) -> list[Execution]:
    """The executions RQ records on ``queue`` as run by ``worker_name``, oldest first.

    Read from the queue's ``StartedJobRegistry`` (no cleanup: an entry is returned until its
    job ends) and each execution's record, which names its worker. An execution whose record
    has expired counts as the worker's when its job names that worker.
    """
    found: list[Execution] = []
    registry = queue.started_job_registry
    for rq_job_id, execution_id in registry.get_job_and_execution_ids(cleanup=False):
        try:
            execution = Execution.fetch(execution_id, rq_job_id, connection=queue.connection)
        except ValueError:  # the execution's record expired; its job still names its worker
            execution = Execution(execution_id, rq_job_id, connection=queue.connection)
            raw = queue.connection.hget(Job.key_for(rq_job_id), "worker_name")
            execution.worker_name = as_text(raw) if raw else ""
        if execution.worker_name == worker_name:
            found.append(execution)
    return found


def dequeued_not_started(queue: Queue) -> list[str]:
    """Jobs a worker took off ``queue`` (RQ 3 moves them to an intermediate list) that no
    execution in the ``StartedJobRegistry`` runs yet, in the list's order."""
    waiting = [as_text(raw) for raw in queue.connection.lrange(queue.intermediate_queue_key, 0, -1)]
    if not waiting:
        return []
    started = set(queue.started_job_registry.get_job_ids(cleanup=False))
    return [rq_job_id for rq_job_id in dict.fromkeys(waiting) if rq_job_id not in started]


def requeue_dequeued(queue: Queue, rq_job_id: str, execution: Execution | None = None) -> bool:
    """Put a job a lost worker took off ``queue`` but never started back at its head.

    RQ 3's dequeue moves the job to the queue's intermediate list; the worker's start
    (``prepare_job_execution``) marks it started and takes it off that list in one
    transaction. So a job still on the list with status ``queued`` never ran. ``execution``:
    the execution the lost worker had already created for it, deleted here. In one
    transaction, and only while the job is still on the list and queued, so it goes back
    once. RQ would otherwise fail it, as stuck, at its maintenance minutes later. True if
    the job was put back.
    """
    intermediate = queue.intermediate_queue_key
    job_key = Job.key_for(rq_job_id)
    job: Job | None = None
    if execution is not None:
        try:
            job = Job.fetch(rq_job_id, connection=queue.connection, serializer=JSONSerializer)
        except NoSuchJobError:
            return False
    with queue.connection.pipeline() as pipe:
        for _ in range(_REQUEUE_ATTEMPTS):
            try:
                pipe.watch(intermediate, job_key)  # type: ignore[no-untyped-call]
                status = pipe.hget(job_key, "status")
                if (
                    status is None
                    or as_text(status) != JobStatus.QUEUED.value
                    or pipe.lpos(intermediate, rq_job_id) is None
                ):
                    pipe.unwatch()
                    return False
                pipe.multi()
                pipe.lrem(intermediate, 1, rq_job_id)
                pipe.delete(queue.intermediate_queue.get_first_seen_key(rq_job_id))
                if execution is not None and job is not None:
                    execution.delete(job, pipeline=pipe)
                queue.push_job_id(rq_job_id, pipeline=pipe, at_front=True)
                pipe.execute()
            except redis.WatchError:
                continue
            return True
    return False
