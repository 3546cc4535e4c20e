"""The RQ side of a call: the one allowed entry point, enqueueing a turn, reading and ending jobs.

Only JSON crosses Redis: every queue and job here uses RQ's ``JSONSerializer``, and a job
names exactly one function, ``ENTRY_POINT``; workers refuse every other (see
``executor._rq.worker``).

A turn's batches do not use RQ's dependencies. The whole turn is stored at submit, in one
transaction: the first batch on the queue, every later call as a job that waits (in RQ's
deferred registry, so ``rq info`` and rq-dashboard list it), and the turn's barrier, which
counts each batch's calls without a result. The call that stores its batch's last result
puts the next batch on the queue in the same script (``executor.wire.ResultStore``).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from rq import Queue, Worker
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import as_text

from executor._rq.doorbell import ring
from executor.wire._keys import Keys
from executor.wire._turns import CallJob, job_id

__all__ = [
    "ENTRY_POINT",
    "Execution",
    "Job",
    "JobStatus",
    "Queue",
    "call_of",
    "call_queue",
    "dequeued_not_started",
    "end_job",
    "enqueue_session_op",
    "enqueue_turn",
    "fetch_job",
    "forget_worker",
    "job_status",
    "named_queue",
    "other_live_workers",
    "requeue_dequeued",
    "started_by",
    "worker_key",
    "worker_queue_names",
]

# The only function a toolpool worker runs. Kept as a string: the orchestrator never imports
# the worker side.
ENTRY_POINT = "workers.pipeline._job.execute"

_TERMINAL = {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.STOPPED}
# Tries of the requeue transaction when other clients change the intermediate list meanwhile.
_REQUEUE_ATTEMPTS = 50


def call_queue(client: redis.Redis, keys: Keys, queue: str) -> Queue:
    """The RQ queue toolpool's calls go through, with the JSON serializer."""
    return Queue(keys.queue_name(queue), connection=client, serializer=JSONSerializer)


def named_queue(client: redis.Redis, name: str) -> Queue:
    """The RQ queue ``name`` (a full name: ``Keys.queue_name`` or ``Keys.host_queue_name``)."""
    return Queue(name, connection=client, serializer=JSONSerializer)


def enqueue_session_op(
    queue: Queue, payload: dict[str, object], *, doorbell: str, record_ttl: int = 0
) -> Job:
    """Send a session's folder work (create, delete) to its host's queue, ahead of calls,
    ringing the queue's ``doorbell`` (``Keys.doorbell``) in the same transaction.

    The same entry point as calls: a worker tells the two apart by the payload's
    ``session_op``. Its answer comes on a reply list, so RQ keeps a record of a job that
    ended well only ``record_ttl`` seconds (``rq_record_ttl``); a failed one, 10 minutes.
    """
    with queue.connection.pipeline() as pipe:
        pipe.multi()
        job = queue.enqueue_call(
            func=ENTRY_POINT,
            args=(payload,),
            timeout=-1,
            result_ttl=record_ttl,
            failure_ttl=600,
            at_front=True,
            description=f"session {payload.get('session_op')} {payload.get('name')}",
            pipeline=pipe,
        )
        ring(pipe, doorbell, 1)
        pipe.execute()
    return job


def enqueue_turn(
    queue: Queue,
    batches: Sequence[Sequence[CallJob]],
    *,
    doorbell: str,
    barrier_key: str,
    barrier_ttl: int,
    result_ttl: int,
    failure_ttl: int,
) -> None:
    """Store a whole turn in one transaction: its first batch on ``queue``, its later calls
    waiting, and the barrier that releases each later batch once the one before has results.

    ``doorbell``: the queue's (``Keys.doorbell``), rung for the first batch's jobs.
    ``result_ttl``: how long RQ keeps the record of a job that ended well (toolpool keeps the
    call's result itself; 0: the worker deletes the record as the job ends, and nothing of RQ
    stays); ``failure_ttl``: of one that failed, for whoever looks into it; ``barrier_ttl``:
    of the barrier and of the waiting jobs, as long as the turn's plan.

    RQ's own job timeout is off (-1): the runner enforces each tool's limit, and SIGALRM
    would fire inside whatever the worker is doing, the lock's bookkeeping included.
    """
    with queue.connection.pipeline() as pipe:
        # MULTI/EXEC: the turn is stored whole or not at all. Explicit, and first: RQ's
        # enqueue on a caller's pipeline starts the transaction itself if none was started,
        # which fails once commands are queued.
        pipe.multi()
        if len(batches) > 1:
            counts: dict[str | bytes, int] = {
                str(position): len(batch) for position, batch in enumerate(batches[:-1])
            }
            pipe.hset(barrier_key, mapping=counts)  # type: ignore[arg-type]
            pipe.expire(barrier_key, barrier_ttl)
        for position, batch in enumerate(batches):
            for job in batch:
                payload = (job.model_dump(mode="json"),)
                rq_job_id = job_id(job.turn_id, job.index)
                description = f"{job.call.name} ({job.call.id})"
                if position == 0:
                    queue.enqueue_call(
                        ENTRY_POINT,
                        args=payload,
                        job_id=rq_job_id,
                        timeout=-1,
                        result_ttl=result_ttl,
                        failure_ttl=failure_ttl,
                        description=description,
                        pipeline=pipe,
                    )
                    continue
                waiting = queue.create_job(
                    ENTRY_POINT,
                    args=payload,
                    job_id=rq_job_id,
                    timeout=-1,
                    result_ttl=result_ttl,
                    failure_ttl=failure_ttl,
                    description=description,
                    status=JobStatus.DEFERRED,
                )
                waiting.origin = queue.name
                waiting.save(pipeline=pipe)
                # A waiting call lives as long as its turn's barrier: one that is never
                # released (its turn's earlier calls were never answered) does not stay for
                # good. The release takes the expiry off, as a queued RQ job has none.
                pipe.expire(waiting.key, barrier_ttl)
                queue.deferred_job_registry.add(waiting, pipeline=pipe)
        ring(pipe, doorbell, len(batches[0]) if batches else 0)
        pipe.execute()


def fetch_job(client: redis.Redis, rq_job_id: str) -> Job | None:
    """The job RQ keeps under ``rq_job_id``, or None if RQ no longer knows it."""
    try:
        return Job.fetch(rq_job_id, connection=client, serializer=JSONSerializer)
    except NoSuchJobError:
        return None


def job_status(client: redis.Redis, rq_job_id: str) -> JobStatus | None:
    """RQ's status of a job, or None if RQ keeps no record of it (never enqueued, expired, or
    ended well: by default RQ keeps nothing of those).

    One read: a job's worker deletes its record as the job ends, so a second read of a job
    just fetched may find nothing (RQ's ``get_status`` then raises).
    """
    raw = client.hget(Job.key_for(rq_job_id), "status")
    try:
        return None if raw is None else JobStatus(as_text(raw))
    except ValueError:  # not a status RQ writes: no job of ours
        return None


def call_of(job: Job) -> CallJob | None:
    """The toolpool call a job carries, or None if it carries none (or an unreadable one)."""
    try:
        args = job.args
        return CallJob.model_validate(args[0]) if len(args) == 1 else None
    except Exception:  # any job can be on a queue; one that is no call is not ours to read
        return None


def end_job(client: redis.Redis, rq_job_id: str) -> bool:
    """Mark a job whose worker is gone as ended (cancelled) in RQ's records; True if it was.

    Its call has its answer already (``worker_lost``, stored first-wins like any result, which
    released the turn's next batch): this only keeps ``rq info`` from showing it running until
    RQ's own cleanup, minutes later.
    """
    # Watched: the job's worker may end it (and delete its record) meanwhile; a cancel after
    # that would write a record of the job back, with no expiry.
    with client.pipeline() as pipe:
        try:
            pipe.watch(Job.key_for(rq_job_id))  # type: ignore[no-untyped-call]
            job = fetch_job(client, rq_job_id)
            if job is None or job.get_status(refresh=False) in _TERMINAL:
                return False
            pipe.multi()
            job.cancel(pipeline=pipe)
            pipe.execute()
        # InvalidJobOperation: RQ's cancel found no status (the record went meanwhile);
        # ValueError: it reads the job's execution record, which may have expired.
        except (redis.WatchError, InvalidJobOperation, ValueError):
            return False
    return True


def worker_key(name: str) -> str:
    """The hash in which RQ records worker ``name`` (its pid, birth, death, queues)."""
    return Worker.redis_worker_namespace_prefix + name


def worker_queue_names(client: redis.Redis, worker_name: str) -> list[str]:
    """The queues RQ recorded for worker ``worker_name`` (empty once its record is gone)."""
    raw = client.hget(worker_key(worker_name), "queues")
    return [name for name in as_text(raw).split(",") if name] if raw else []


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


def started_jobs(queue: Queue) -> list[str]:
    """Every job RQ records as started on ``queue`` (its ``StartedJobRegistry``, no cleanup)."""
    ids = queue.started_job_registry.get_job_ids(cleanup=False)
    return list(dict.fromkeys(as_text(raw) for raw in ids))


def dequeued_not_started(queue: Queue) -> list[str]:
    """Jobs a worker took off ``queue`` (RQ 3 moves them to an intermediate list) that no
    execution in the ``StartedJobRegistry`` runs yet, in the list's order."""
    waiting = [as_text(raw) for raw in queue.connection.lrange(queue.intermediate_queue_key, 0, -1)]
    if not waiting:
        return []
    started = set(queue.started_job_registry.get_job_ids(cleanup=False))
    return [rq_job_id for rq_job_id in dict.fromkeys(waiting) if rq_job_id not in started]


def requeue_dequeued(
    queue: Queue, rq_job_id: str, execution: Execution | None = None, *, doorbell: str
) -> bool:
    """Put a job a lost worker took off ``queue`` but never started back at its head, and
    ring the queue's ``doorbell`` (``Keys.doorbell``).

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
                ring(pipe, doorbell, 1)
                pipe.execute()
            except redis.WatchError:
                continue
            return True
    return False


def other_live_workers(queue: Queue, dead_name: str) -> bool:
    """Whether a worker other than ``dead_name`` may be taking jobs from ``queue``.

    RQ lists the workers of each queue (each registers before its first dequeue); one whose
    record is gone or marks its death cannot hold a job. Any other counts as live, even if it
    may have died unseen (a process id says nothing across hosts or PID namespaces): at worst
    that costs the grace.
    """
    for key in Worker.all_keys(connection=queue.connection, queue=queue):
        if key == worker_key(dead_name):
            continue
        born, death = queue.connection.hmget(key, ["birth", "death"])
        if born is not None and death is None:
            return True
    return False


def forget_worker(client: redis.Redis, name: str) -> None:
    """Mark RQ's record of worker ``name`` dead, so that a replacement of that name registers."""
    worker = Worker.find_by_key(worker_key(name), connection=client, serializer=JSONSerializer)
    if worker is not None:
        worker.register_death()  # type: ignore[no-untyped-call]
