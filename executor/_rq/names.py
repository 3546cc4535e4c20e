"""RQ's key names and timestamps, for toolpool's own scripts that write RQ's records.

The store step's script puts a turn's next batch on the queue in the round trip that stores a
batch's last result (``executor/wire/lua/publish_result.lua``): it needs the keys RQ reads
and the timestamp format RQ writes. ``tests/test_rq_contract.py`` checks a job pushed that
way is one RQ's worker runs and RQ's registries report.
"""

from __future__ import annotations

from rq.job import Job
from rq.queue import Queue
from rq.registry import DeferredJobRegistry
from rq.utils import now, utcformat


def job_key(rq_job_id: str) -> str:
    """The hash RQ keeps a job in."""
    return Job.key_for(rq_job_id)


def queue_key(queue_name: str) -> str:
    """The list of job ids RQ's workers take a queue's jobs from."""
    return f"{Queue.redis_queue_namespace_prefix}{queue_name}"


def deferred_key(queue_name: str) -> str:
    """The registry in which RQ lists a queue's jobs that wait (``rq info``'s "deferred")."""
    return DeferredJobRegistry.key_template.format(queue_name)


def timestamp() -> str:
    """Now, as RQ writes a job's times (``enqueued_at``)."""
    return utcformat(now())
