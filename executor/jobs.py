"""The RQ side of a call: the one allowed entry point, enqueueing a turn, failing lost jobs.

Only JSON crosses Redis: every queue and job here uses RQ's ``JSONSerializer``, and a job
names exactly one function, ``ENTRY_POINT``; workers refuse every other (see
``workers.rq_worker``).
"""

from __future__ import annotations

import contextlib

import redis
from rq import Queue
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Dependency, Job, JobStatus
from rq.serializers import JSONSerializer

from executor.keys import Keys
from executor.turns import CallJob, job_id

# The only function a toolpool worker runs. Kept as a string: the orchestrator never imports
# the worker side.
ENTRY_POINT = "workers.job.execute"

_TERMINAL = {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.STOPPED}
# Passes over a queue's ready dependents before leaving them to RQ's own cleanup.
_READY_ATTEMPTS = 20


def call_queue(client: redis.Redis, keys: Keys, queue: str) -> Queue:
    """The RQ queue toolpool's calls go through, with the JSON serializer."""
    return Queue(keys.queue_name(queue), connection=client, serializer=JSONSerializer)


def enqueue_call(queue: Queue, job: CallJob, *, after: list[str], result_ttl: int) -> Job:
    """Enqueue one call, to start once every job in ``after`` has ended (even if it failed).

    RQ's own job timeout is off (-1): the runner enforces each tool's limit, and SIGALRM
    would fire inside whatever the worker is doing, the lock's bookkeeping included.
    """
    depends_on = Dependency(jobs=after, allow_failure=True) if after else None
    return queue.enqueue_call(
        func=ENTRY_POINT,
        args=(job.model_dump(mode="json"),),
        job_id=job_id(job.turn_id, job.index),
        depends_on=depends_on,
        timeout=-1,
        result_ttl=result_ttl,
        failure_ttl=result_ttl,
        description=f"{job.call.name} ({job.call.id})",
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
    ``enqueue_dependents`` releases them at once (they allow their parents to fail). True if
    the job was ended here.
    """
    try:
        job = Job.fetch(rq_job_id, connection=client, serializer=JSONSerializer)
    except NoSuchJobError:
        return False
    if job.get_status() in _TERMINAL:
        return False
    ended = False
    with contextlib.suppress(InvalidJobOperation):
        job.cancel(enqueue_dependents=True)
        ended = True
    enqueue_ready(Queue(job.origin, connection=client, serializer=JSONSerializer))
    return ended
