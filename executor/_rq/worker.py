"""RQ worker classes that run toolpool's entry point and refuse every other job.

Anything importable runs in a plain RQ worker, ``os.system`` included, for anyone who can
write to the Redis; callback and webhook names stored in a job are imported or requested too.
These classes check each job before anything of it runs: the function must be
``executor._rq.jobs.ENTRY_POINT`` with one JSON payload, and the job must carry no callbacks
and no webhooks. A refused job is cancelled, its callback and webhook fields are deleted from
Redis, and a ``call_refused`` event names the reason. Nothing of it is imported or executed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

import redis
from redis.client import Pipeline, PubSub, PubSubWorkerThread
from rq import Queue, SimpleWorker, Worker
from rq.exceptions import DeserializationError, InvalidJobOperation, StopRequested
from rq.executions import Execution
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import now as now_utc
from rq.worker import WorkerStatus

from executor._errors import ConfigurationError
from executor._patience import patiently
from executor._rq.dequeue import ReliableQueue
from executor._rq.ending import JobEnd
from executor._rq.jobs import ENTRY_POINT
from executor._rq.names import queue_key
from executor.wire import EventLog, Keys

log = logging.getLogger(__name__)

# The most often RQ's worker heartbeat is sent; its key lives for minutes.
_HEARTBEAT_EVERY_S = 1.0
# The most often a worker checks for ``rq suspend``: a suspension takes effect within this.
_SUSPENSION_CHECK_S = 1.0

# Fields of RQ's job hash that make a worker import or request something besides the job's
# function. They are read raw, so checking them imports nothing.
_HOOK_FIELDS = (
    "success_callback_name",
    "failure_callback_name",
    "stopped_callback_name",
    "webhooks",
)


def refusal_reason(job: Job) -> str | None:
    """Why ``job`` must not run, or None if it is a plain toolpool call.

    Read from the job as RQ fetched it: RQ runs only the callbacks and webhooks it parsed from
    that fetch, so the fetched job is what must be checked (no second read of its hash).
    """
    try:
        func_name = job.func_name
    except DeserializationError:
        # A worker that let this escape would quit: RQ's work loop ends on any exception.
        return "the job's data is not JSON (toolpool jobs carry one JSON call payload)"
    if func_name != ENTRY_POINT:
        return f"function {func_name!r} is not toolpool's entry point {ENTRY_POINT!r}"
    hooks = (
        job._success_callback_name,
        job._failure_callback_name,
        job._stopped_callback_name,
        job.webhooks,
    )
    present = [name for name, value in zip(_HOOK_FIELDS, hooks, strict=True) if value]
    if present:
        return f"the job carries {', '.join(present)}, which toolpool never runs"
    if len(job.args) != 1 or not isinstance(job.args[0], dict) or job.kwargs:
        return "the job's arguments are not one toolpool call payload"
    return None


class ToolpoolJob(Job):
    """RQ's job, without RQ's second copy of a finished call's outcome.

    toolpool stores each call's result under its own key; for a job that ended well RQ would
    also add a result stream (about 4.7 KB of Redis for the record's lifetime, as much as
    everything else of the call). With a record TTL (``rq_record_ttl``; by default none is
    kept) the job's record, status and finished registry stay that long, so rq-dashboard
    lists it; a failed job keeps RQ's result, its traceback.
    """

    def _handle_success(
        self,
        result_ttl: int,
        pipeline: Pipeline,
        worker_name: str = "",
        execution_id: str | None = None,
        execution_started_at: Any = None,
        execution_ended_at: Any = None,
    ) -> None:
        self.set_status(JobStatus.FINISHED, pipeline=pipeline)
        self.save(pipeline=pipeline, include_meta=False, include_result=False)
        if result_ttl != 0:
            self.finished_job_registry.add(self, result_ttl, pipeline)


class _RefusingMixin:
    """Checks every job before the worker's own ``execute_job`` runs any of it; takes jobs
    off several queues, waking for any of them at once, without losing one
    (``executor._rq.dequeue``)."""

    queue_class = ReliableQueue
    job_class = ToolpoolJob
    #: The running job's end, when it goes with its call's answer (``ToolpoolWorker``).
    _ending: JobEnd | None = None

    def __init__(
        self, queues: Iterable[Queue | str], *args: Any, keys: Keys | None = None, **kwargs: Any
    ) -> None:
        """``keys``: where the queues' doorbells are, which a worker of several queues waits
        on (``executor._rq.dequeue``); needed then, and only then."""
        # RQ checks each queue against ``queue_class``: plain queues become reliable ones.
        reliable = [_reliable(queue, kwargs.get("connection"), keys) for queue in queues]
        if len(reliable) > 1 and any(queue.doorbell is None for queue in reliable):
            raise ConfigurationError(
                "a worker of several queues waits on their doorbells: pass keys=Keys(prefix)"
            )
        self._beat_at = 0.0
        self._idle_sent = False
        self._state: str
        self._suspension_checked_at = -_SUSPENSION_CHECK_S
        kwargs["serializer"] = JSONSerializer  # only JSON crosses Redis
        super().__init__(reliable, *args, **kwargs)  # type: ignore[call-arg]  # an RQ worker follows

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        # RQ registers the worker (what a pool waits for before it may stop it) before it
        # installs its SIGTERM handler: a stop in between killed the worker outright, leaving
        # its catalog entry behind. Its warm-stop handler now comes first.
        self._install_signal_handlers()  # type: ignore[attr-defined]  # an RQ worker follows
        super().bootstrap(*args, **kwargs)  # type: ignore[misc]  # an RQ worker follows

    def unsubscribe(self) -> None:
        """RQ's end of its command channel (``rq`` shutdown, kill-horse), without a hang.

        RQ sends UNSUBSCRIBE and then stops the thread that listens; redis-py 8's ``stop()``
        waits for that thread without a limit, and a thread that had already read the reply
        was in its next read, for up to a minute: a stopping worker hung that long. Told to
        stop first, the thread ends with the reply's read.
        """
        thread: PubSubWorkerThread | None = self.pubsub_thread  # type: ignore[attr-defined]
        pubsub = self.pubsub
        if thread is None or pubsub is None:
            return
        thread.stop(timeout=0)
        pubsub.unsubscribe()  # type: ignore[no-untyped-call]
        thread.join(timeout=1)
        pubsub.close()

    def work(self, *args: Any, **kwargs: Any) -> bool:
        try:
            worked: bool = super().work(*args, **kwargs)  # type: ignore[misc]
        except StopRequested:
            # Stopped while RQ was still starting, before its loop: leave as the loop would.
            self.teardown()  # type: ignore[attr-defined]
            return False
        return worked

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        """RQ's worker heartbeat, at most once a second, its three commands in one round trip.

        RQ sends it (HSET and two EXPIREs, one round trip each) before and after every dequeue
        and after every job; the key it refreshes lives ``worker_ttl`` (minutes), and toolpool
        keeps its own per-call liveness. Beats inside RQ's own pipelines pass through.
        """
        if pipeline is not None:
            super().heartbeat(timeout, pipeline=pipeline)  # type: ignore[misc]
            return
        now = time.monotonic()
        if timeout is None and now - self._beat_at < _HEARTBEAT_EVERY_S:
            return
        self._beat_at = now
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(timeout, pipeline=pipe)  # type: ignore[misc]
            pipe.execute()

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> None:
        """RQ's worker state, written only when it changes (or inside RQ's own pipelines).

        RQ writes "idle" twice a job, a round trip each: once when the job ends and again
        before the next dequeue. The end of a job writes it in the job's last pipeline
        (``cleanup_execution``), so neither needs a round trip of its own.
        """
        idle_sent, self._idle_sent = self._idle_sent, False
        if pipeline is None and (
            state == self.get_state()  # type: ignore[attr-defined]
            or (idle_sent and state == WorkerStatus.IDLE)
        ):
            self._state = state
            return
        super().set_state(state, pipeline=pipeline)  # type: ignore[misc]

    def cleanup_execution(self, job: Job, pipeline: Pipeline, execution: Any = None) -> None:
        super().cleanup_execution(job, pipeline, execution=execution)  # type: ignore[misc]
        # The job's last pipeline (success or failure) says the worker is idle, in Redis only:
        # until RQ's own set_state after it, the worker stays busy here, so a SIGTERM meanwhile
        # still waits for the job's bookkeeping to finish (a warm shutdown).
        pipeline.hset(self.key, "state", WorkerStatus.IDLE)  # type: ignore[attr-defined]
        self._idle_sent = True

    def handle_job_success(
        self, job: Job, queue: Queue, started_job_registry: Any, execution: Any
    ) -> None:
        """RQ's bookkeeping of a job that ended well, in one round trip.

        RQ watches the job's dependents, reads them and then writes (three round trips), to
        enqueue the dependents in the same transaction. toolpool's jobs have none (a turn's
        next batch is released by the barrier, with the result): the writes go in one.
        """
        ending = self._ending
        if ending is not None and ending.sent:
            job._status = JobStatus.FINISHED  # written with the call's answer
            return
        if job.started_at is None or job.ended_at is None:
            super().handle_job_success(job, queue, started_job_registry, execution)  # type: ignore[misc]
            return
        worked = job.ended_at - job.started_at
        with self.connection.pipeline() as pipe:  # MULTI/EXEC
            self.increment_successful_job_count(pipeline=pipe)  # type: ignore[attr-defined]
            self.increment_total_working_time(worked, pipe)  # type: ignore[attr-defined]
            result_ttl = job.get_result_ttl(self.default_result_ttl)  # type: ignore[attr-defined]
            if result_ttl == 0:
                # No record kept (toolpool's default, ``rq_record_ttl``): the job's keys go in
                # this transaction. RQ's own delete first reads the job's status and its
                # executions (seven round trips) to find its registries; the only one a
                # toolpool job is in here, the started registry, ``cleanup_execution`` leaves.
                pipe.delete(job.key, job.dependents_key, job.dependencies_key)
            else:
                job._handle_success(
                    result_ttl,
                    pipeline=pipe,
                    worker_name=self.name,
                    execution_id=execution.id,
                    execution_started_at=execution.created_at,
                    execution_ended_at=job.ended_at,
                )
                job.cleanup(result_ttl, pipeline=pipe, remove_from_queue=False)
            job._status = JobStatus.FINISHED
            self.cleanup_execution(job, pipe, execution=execution)
            pipe.execute()

    def check_for_suspension(self, burst: bool) -> None:
        """RQ's ``rq suspend`` check, at most once a second instead of a round trip a job."""
        now = time.monotonic()
        if now - self._suspension_checked_at < _SUSPENSION_CHECK_S:
            return
        self._suspension_checked_at = now
        super().check_for_suspension(burst)  # type: ignore[misc]

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        """The job's end time. RQ also sends the job a heartbeat here (a round trip), to keep
        its started entry alive while callbacks run; toolpool jobs carry no callbacks."""
        job.ended_at = now_utc()

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        # RQ takes a started job off its queue's intermediate list only for a worker of one
        # queue (where it used LMOVE); ReliableQueue moves from every queue, so always: else
        # the list grows by every job, and the pool's sweep reads it all each second.
        # Tried again while Redis is away: RQ's start is one transaction whose reply may be
        # lost after it ran (a restart), and RQ then drops the job, recorded started, with
        # nobody running it. Running the transaction twice writes the same state.
        patiently(
            lambda: super(_RefusingMixin, self).prepare_job_execution(  # type: ignore[misc]
                job, remove_from_intermediate_queue=True
            )
        )

    connection: redis.Redis
    name: str
    pubsub: PubSub | None
    events: EventLog | None = None

    def execute_job(self, job: Job, queue: Queue) -> Any:
        reason = refusal_reason(job)
        if reason is None:
            return super().execute_job(job, queue)  # type: ignore[misc]
        log.warning("toolpool: refused job %s: %s", job.id, reason)
        with self.connection.pipeline() as pipe:
            pipe.hdel(job.key, *_HOOK_FIELDS)
            pipe.execute()
        with contextlib.suppress(InvalidJobOperation):
            job.cancel()
        if self.events is not None:
            self.events.emit("call_refused", job_id=job.id, reason=reason)
        return None


def _reliable(
    queue: Queue | str, connection: redis.Redis | None, keys: Keys | None
) -> ReliableQueue:
    """``queue`` as a ``ReliableQueue``, with its doorbell when ``keys`` says where it is."""
    if isinstance(queue, str):
        name, doorbell = queue, None
    else:
        name, connection = queue.name, queue.connection
        doorbell = queue.doorbell if isinstance(queue, ReliableQueue) else None
    if keys is not None:
        doorbell = keys.doorbell(name)
    return ReliableQueue(name, connection=connection, serializer=JSONSerializer, doorbell=doorbell)


class ToolpoolWorker(_RefusingMixin, SimpleWorker):
    """Runs calls in the worker process itself (about 3-4 ms of RQ overhead per job).

    RQ writes the record of a job's execution and then, in a second transaction, the job's
    start; in this one process nothing happens between the two, so they go in one.
    """

    _execution_commands: list[tuple[tuple[Any, ...], dict[str, Any]]] | None = None

    def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
        # Without a record to keep, the job's end can go with its call's answer (``take_end``).
        if job.get_result_ttl(self.default_result_ttl) == 0:
            self._ending = JobEnd(self, job, execution)
        try:
            return bool(super().perform_job(job, queue, execution))
        finally:
            self._ending = None

    def take_end(self) -> JobEnd | None:
        """RQ's end of the job running now, for the round trip that answers its call; None
        once taken, or when RQ keeps a record of it (``executor._rq.ending``)."""
        ending = self._ending
        if ending is None or ending.taken:
            return None
        ending.taken = True
        return ending

    def prepare_execution(self, job: Job) -> Execution:
        """RQ's record of the execution (its started-registry entry among it), queued for
        ``prepare_job_execution``'s transaction."""
        with self.connection.pipeline() as pipe:
            ttl = self.get_heartbeat_ttl(job)
            execution = Execution.create(job, ttl, pipeline=pipe, worker_name=self.name)
            self.set_state(WorkerStatus.BUSY, pipeline=pipe)
            # Kept as commands, not a pipeline: a try that Redis did not answer sends them again.
            self._execution_commands = list(pipe.command_stack)
        self.executions[execution.id] = execution
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        """RQ's start of the job (as ``Worker.prepare_job_execution`` writes it) with the
        execution's record, in one transaction, tried again while Redis is away (see
        ``_RefusingMixin.prepare_job_execution``)."""
        recorded, self._execution_commands = self._execution_commands or [], None
        patiently(lambda: self._start(job, recorded))

    def _start(self, job: Job, recorded: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
        with self.connection.pipeline() as pipe:
            for args, options in recorded:
                pipe.execute_command(*args, **options)  # type: ignore[no-untyped-call]
            ttl = self.get_heartbeat_ttl(job)
            self.heartbeat(ttl, pipeline=pipe)
            job.heartbeat(now_utc(), ttl, pipeline=pipe)
            job.prepare_for_execution(self.name, pipeline=pipe)
            pipe.persist(job.key)
            intermediate = IntermediateQueue.get_intermediate_queue_key(queue_key(job.origin))
            pipe.lrem(intermediate, 1, job.id)
            pipe.execute()


class ToolpoolForkingWorker(_RefusingMixin, Worker):
    """Forks a process per call (about 14-19 ms per job): for tools that may leak state."""
