"""Cleaning up after a pool's worker process that died: processes, lock, calls, RQ's jobs.

A worker killed mid-call cannot tidy up, and what it leaves would otherwise wait for timeouts:
a bash command it started runs on (in a session of its own, outside the worker's process
group), its lock lease holds until it expires, its call waits for the orchestrator's liveness
check, the turn's next batch for that answer, and its name stays registered with RQ. Two more
states outlive a worker that dies between RQ's steps: a job it stored the result of but RQ
still records as started (``rq info`` would show it running for minutes), and a job it took
off the queue but never started (RQ 3 keeps it in the queue's intermediate list, where nobody
runs it). ``Reaper.bury`` ends all of that at once, in an order that keeps the lock meaningful: the
leftover processes die before the lease is released.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from pydantic import ValidationError

from executor import Settings, ToolpoolError
from executor import _texts as texts
from executor._connect import STANDARD, connect
from executor._rq.doorbell import ring_if_silent, wake
from executor._rq.jobs import (
    Execution,
    JobStatus,
    Queue,
    call_of,
    call_queue,
    dequeued_not_started,
    end_job,
    fetch_job,
    forget_worker,
    named_queue,
    other_live_workers,
    requeue_dequeued,
    started_by,
    started_jobs,
    worker_key,
    worker_queue_names,
)
from executor.lock import HolderStatus, RWLock, WaiterStatus
from executor.wire import (
    Acks,
    CallJob,
    ErrorType,
    EventLog,
    Keys,
    ResultStore,
    ToolResult,
    host_name,
    job_id,
    session_scope,
)
from workers.processes._daemon import TOKEN_ENV

log = logging.getLogger(__name__)


# A live worker holds a job in the intermediate list only for the milliseconds between RQ's
# dequeue and its execution record; a job there longer, with no execution, has lost its worker.
DEQUEUE_GRACE_S = 2.0


@dataclass
class DeadChild:
    """A child that has ended and is not cleaned up yet."""

    name: str
    pid: int
    token: str
    reason: str  # "was killed by signal SIGKILL", "exited with code 1"
    # Its leftover processes killed so far: their lock leases are the child's too.
    killed: set[int] = field(default_factory=set)


class Reaper:
    """Cleans up after dead children: leftover processes, lock leases, the call, RQ's record."""

    def __init__(
        self, redis_url: str, settings: Settings, host: str, *, grace: float = DEQUEUE_GRACE_S
    ) -> None:
        self._settings = settings
        self._grace = grace
        # Jobs seen unstarted in the intermediate list by sweep_dequeued, and since when.
        self._first_seen: dict[str, float] = {}
        self._host = host
        self._keys = Keys(settings.redis.key_prefix)
        self._client = connect(redis_url, role=STANDARD)
        self._results = ResultStore(
            self._client,
            self._keys,
            ttl=settings.worker.result_ttl,
            acks=Acks.of(settings, self._keys),
        )
        self._lock = RWLock.from_url(
            redis_url,
            settings.worker.scope,
            keys=self._keys,
            lease_ms=settings.worker.lock_lease_ms,
        )

    def close(self) -> None:
        self._lock.close()
        self._client.close()

    def registered(self, name: str, pid: int | None) -> bool:
        """Whether RQ knows a live worker ``name`` with process id ``pid``."""
        try:
            found, death = self._client.hmget(worker_key(name), ["pid", "death"])
        except redis.RedisError:
            return False
        return found is not None and death is None and int(found) == pid

    def calls_running(self, names: list[str]) -> int:
        """How many of the workers ``names`` have a call in flight, as their claims record."""
        if not names:
            return 0
        current = self._client.mget([self._keys.worker_current(name) for name in names])
        return sum(1 for raw in current if raw is not None)

    def bury(self, dead: DeadChild) -> bool:
        """Clean up after ``dead``; False if Redis failed (every step may simply be redone)."""
        # First the processes: nothing the child started may run on once its lock is freed.
        dead.killed |= _sweep(dead.token)
        try:
            job = self._current_job(dead)
            self._release_leases(dead, job)
            self._answer_call(dead, job)
            for queue in self._served_queues(dead.name):
                self._end_started_jobs(dead, queue)
                self._requeue_dequeued_jobs(dead, queue)
                # It may have died between its wait on the doorbell and its take, with the
                # token of a job still on the queue: a worker still waiting wakes for it.
                wake(self._client, queue.key, self._keys.doorbell(queue.name))
            forget_worker(self._client, dead.name)
        except (redis.RedisError, ToolpoolError) as exc:
            log.warning(
                "toolpool: cleaning up after worker %s failed, will retry: %s", dead.name, exc
            )
            return False
        return True

    def _release_leases(self, dead: DeadChild, job: CallJob | None) -> None:
        # The pool's scope, and the session's if the child died in a session's call.
        locks = [self._lock]
        if job is not None and job.session is not None:
            locks.append(self._lock.for_scope(session_scope(job.session)))
        for lock in locks:
            self._release_leases_in(dead, lock)

    def _release_leases_in(self, dead: DeadChild, lock: RWLock) -> None:
        status = lock.status()
        entries: list[HolderStatus | WaiterStatus] = [*status.holders, *status.queue]
        for entry in entries:
            owner = entry.owner
            ours = owner.worker == dead.name and owner.host == self._host
            if (
                ours
                and (owner.pid == dead.pid or owner.pid in dead.killed)
                and lock.force_release(entry.token)
            ):
                log.info(
                    "toolpool: released the %s lock lease of dead worker %s", entry.mode, dead.name
                )

    def _current_job(self, dead: DeadChild) -> CallJob | None:
        """The call ``dead`` was running, as its claim recorded it; None if none or unreadable."""
        raw = self._client.get(self._keys.worker_current(dead.name))
        if raw is None:
            return None
        try:
            return CallJob.model_validate_json(raw)
        except ValidationError:
            log.warning("toolpool: unreadable current call of worker %s: %r", dead.name, raw)
            return None

    def _answer_call(self, dead: DeadChild, job: CallJob | None) -> None:
        key = self._keys.worker_current(dead.name)
        if job is None:
            self._client.delete(key)
            return
        self._answer_lost(dead, job)
        # Even with a stored result, RQ may not have marked the job ended: ``rq info`` would
        # show it running until RQ's own cleanup, minutes later.
        end_job(self._client, job_id(job.turn_id, job.index))
        self._client.delete(key)

    def _answer_lost(self, dead: DeadChild, job: CallJob) -> None:
        """Store a ``worker_lost`` result for ``job``'s call unless it has a result."""
        call = job.call
        if self._results.get(call.id) is not None:
            return
        message = texts.worker_lost(call.name, f"{dead.name}, pid {dead.pid}", dead.reason)
        lost = ToolResult.failure(call.id, call.name, ErrorType.WORKER_LOST, message)
        if self._results.publish(job.turn_id, lost, job.then):
            self._events(dead.name).emit(
                "call_lost",
                call_id=call.id,
                turn_id=job.turn_id,
                tool=call.name,
                reason=dead.reason,
                worker_pid=dead.pid,
                by="pool",
            )
            log.warning(
                "toolpool: call %s (%s) of worker %s answered as worker_lost",
                call.id,
                call.name,
                dead.name,
            )

    def _events(self, worker: str) -> EventLog:
        return EventLog(
            self._client, self._keys, maxlen=self._settings.worker.events_maxlen, worker=worker
        )

    def _served_queues(self, name: str) -> list[Queue]:
        """The queues worker ``name`` took jobs from: the pool's, and those RQ recorded."""
        names = [queue.name for queue in self._pool_queues()]
        names += [n for n in worker_queue_names(self._client, name) if n not in names]
        return [named_queue(self._client, n) for n in names]

    def _end_started_jobs(self, dead: DeadChild, queue: Queue) -> None:
        """End the jobs RQ still records as started by ``dead``; requeue those never begun.

        A worker that dies after storing its call's result (and clearing its current call)
        but before RQ records the job's end leaves the job started until RQ's registry
        cleanup, minutes later. A call without a result is
        answered ``worker_lost`` first. A job with an execution of ``dead`` but still queued
        was dequeued and never started: it goes back on the queue.
        """
        for execution in started_by(queue, dead.name):
            try:
                self._end_started_job(dead, queue, execution)
            except redis.RedisError:
                raise
            except Exception:
                # Whatever RQ makes of one odd job must not keep the slot from being refilled:
                # RQ's own registry cleanup remains for it.
                log.exception(
                    "toolpool: could not end RQ job %s of dead worker %s",
                    execution.job_id,
                    dead.name,
                )

    def _end_started_job(self, dead: DeadChild, queue: Queue, execution: Execution) -> None:
        job = fetch_job(self._client, execution.job_id)
        if job is None:
            return
        status = job.get_status(refresh=False)
        if status == JobStatus.QUEUED:
            self._requeue(dead, queue, job.id, "it had dequeued and never started it", execution)
        elif status == JobStatus.STARTED:
            call = call_of(job)
            if call is not None:
                self._answer_lost(dead, call)
            if end_job(self._client, job.id):
                log.warning(
                    "toolpool: ended RQ job %s, left started by dead worker %s", job.id, dead.name
                )

    def _requeue_dequeued_jobs(self, dead: DeadChild, queue: Queue) -> None:
        """Put back on ``queue`` the jobs left in its intermediate list with no live owner.

        Such a job was taken off the queue by a worker that died before it started the job
        (RQ records no owner until then). With no other live worker on the queue, ``dead``
        took it: it goes back now. Otherwise any of them may have taken it and be about to
        start it; ``sweep_dequeued`` puts it back if none does within the grace. Burying does
        not wait for that: the supervisor would see the next death only after it.
        """
        if other_live_workers(queue, dead.name):
            return
        for rq_job_id in dequeued_not_started(queue):
            self._requeue(dead, queue, rq_job_id, "no other live worker serves its queue")

    def sweep_dequeued(self) -> bool:
        """Put back jobs that sat unstarted in the pool queue's intermediate list too long;
        True if it saw any job queued, taken or started (the pool looks again soon, else
        later). A queue with jobs but no doorbell token is rung (a ring lost on the way).

        No worker has to die for this: a worker cut off from Redis while its dequeue (BLMOVE)
        was answered never receives the job, lives on and dequeues again, and the job waits
        in the intermediate list for RQ's maintenance, minutes later. A job listed there with
        no execution for longer than the grace has lost its worker. Should that worker still
        start it, the run's claim (see ``workers.pipeline._runtime``) keeps the call from
        running twice.

        It also ends the jobs RQ still shows started although their call is answered and no
        worker runs it, seen so for longer than the grace (``_end_answered``).
        """
        now = time.monotonic()
        why = f"no worker started it within {self._grace:g} s of its dequeue"
        seen: dict[str, float] = {}
        queued = False
        for queue in self._pool_queues():
            # Jobs on the queue with no token on its doorbell: a ring was lost on the way.
            queued |= ring_if_silent(self._client, queue.key, self._keys.doorbell(queue.name))
            waiting = dequeued_not_started(queue)
            seen.update({job: self._first_seen.get(job, now) for job in waiting})
            for rq_job_id in waiting:
                if now - seen[rq_job_id] >= self._grace:
                    self._requeue(None, queue, rq_job_id, why)
            started = [f"started:{job}" for job in started_jobs(queue)]
            seen.update({job: self._first_seen.get(job, now) for job in started})
            for marked in started:
                if now - seen[marked] >= self._grace:
                    self._end_answered(marked.removeprefix("started:"))
        self._first_seen = seen
        return bool(seen) or queued

    def _end_answered(self, rq_job_id: str) -> None:
        """End a job RQ still records as started although its call is answered and nobody
        runs it (no liveness key). Its worker stored the result, then RQ's own record of
        the job's end was lost: a failover that dropped the old primary's last writes, or
        Redis gone at that moment. Nothing about the call changes; RQ stops showing it."""
        job = fetch_job(self._client, rq_job_id)
        call = None if job is None else call_of(job)
        if call is None or self._results.get(call.call.id) is None:
            return
        if self._client.exists(self._keys.running(call.call.id)):
            return  # a delivery of it runs (or a duplicate waits on the first)
        if end_job(self._client, rq_job_id):
            log.warning(
                "toolpool: ended RQ job %s: its call %s is answered and no worker runs it",
                rq_job_id,
                call.call.id,
            )

    def _pool_queue(self) -> Queue:
        return call_queue(self._client, self._keys, self._settings.client.queue)

    def _pool_queues(self) -> list[Queue]:
        """The pool's queue and, when it serves sessions, its host's queue."""
        queues = [self._pool_queue()]
        if self._settings.worker.sessions_root is not None:
            name = self._keys.host_queue_name(
                self._settings.client.queue, host_name(self._settings.worker.host)
            )
            queues.append(named_queue(self._client, name))
        return queues

    def _requeue(
        self,
        dead: DeadChild | None,
        queue: Queue,
        rq_job_id: str,
        why: str,
        execution: Execution | None = None,
    ) -> None:
        # Read before the job goes back: a worker may then run it at once, and a finished
        # job's record is deleted (no record TTL by default), its call with it.
        found: dict[str, Any] = {}
        job = fetch_job(self._client, rq_job_id)
        call = None if job is None else call_of(job)
        if call is not None:
            found = {"call_id": call.call.id, "turn_id": call.turn_id, "tool": call.call.name}
        if not requeue_dequeued(
            queue, rq_job_id, execution, doorbell=self._keys.doorbell(queue.name)
        ):
            return
        reason = why if dead is None else f"worker {dead.name} {dead.reason}; {why}"
        events = self._events(dead.name if dead else "pool")
        events.emit(
            "job_requeued",
            job_id=rq_job_id,
            queue=queue.name,
            reason=reason,
            worker_pid=dead.pid if dead else None,
            by="pool",
            **found,
        )
        log.warning(
            "toolpool: put job %s back on queue %s: it was taken off by a worker that "
            "never started it (%s)",
            rq_job_id,
            queue.name,
            reason,
        )


def _sweep(token: str) -> set[int]:
    """SIGKILL every process whose environment carries ``token``; return their pids.

    The children's descendants inherit the variable (a bash command runs in a session of its
    own, out of reach of the child's process group). A few passes catch processes forked
    during the previous one.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    needle = f"\0{TOKEN_ENV}={token}\0".encode()
    killed: set[int] = set()
    for _ in range(5):
        found = False
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = b"\0" + (entry / "environ").read_bytes()
            except OSError:
                continue  # gone, or not ours to read
            if needle in environ:
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.add(int(entry.name))
                    found = True
        if not found:
            break
    if killed:
        log.warning(
            "toolpool: killed %d leftover processes of a dead worker: %s",
            len(killed),
            sorted(killed),
        )
    return killed
