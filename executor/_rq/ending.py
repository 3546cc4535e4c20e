"""RQ's bookkeeping of a job that ended well, sent in the round trip that answers its call.

RQ writes it in a transaction of its own after the job's function returns: the worker's
counters, the job's keys deleted (toolpool keeps no record of a call that ended well, by
default), its execution's record and started-registry entry removed, the worker idle. A
toolpool worker's last round trip of a call (its result, events and claim's release) carries
it instead, queued after the result, so nothing reads the job gone before its call is
answered. A round trip that did not come back leaves it to RQ's own transaction.
"""

from __future__ import annotations

from typing import Any

from redis.client import Pipeline
from rq.job import Job
from rq.utils import now


class JobEnd:
    """The end of one job, to be queued on the pipeline that answers its call (once)."""

    def __init__(self, worker: Any, job: Job, execution: Any) -> None:
        self._worker = worker
        self._job = job
        self._execution = execution
        self.taken = False
        self.sent = False

    def queue(self, pipe: Pipeline) -> None:
        """Put RQ's end of the job on ``pipe``, after the call's result."""
        job, worker = self._job, self._worker
        worker.increment_successful_job_count(pipeline=pipe)
        if job.started_at is not None:
            worker.increment_total_working_time(now() - job.started_at, pipe)
        # Out of the started registry first: a job listed there is never one already deleted.
        worker.cleanup_execution(job, pipe, execution=self._execution)
        pipe.delete(job.key, job.dependents_key, job.dependencies_key)

    def mark_sent(self) -> None:
        """The pipeline came back: RQ's own end of the job is not needed."""
        self.sent = True
