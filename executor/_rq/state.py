"""What the dashboard, ``toolpool status`` and the metrics read of RQ: its workers and the
counts of a queue's registries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import redis
from rq import Queue, Worker

from executor._rq.jobs import named_queue


@dataclass(frozen=True)
class QueueCounts:
    """A queue's jobs by state: on the queue, waiting for an earlier batch, running, failed."""

    queued: int
    deferred: int
    started: int
    failed: int


@dataclass(frozen=True)
class WorkerRecord:
    """What RQ records of one worker of a queue."""

    name: str
    hostname: str | None
    pid: int | None
    queues: list[str]
    state: str
    last_heartbeat: datetime | None


def queue_counts(queue: Queue) -> QueueCounts:
    """The counts RQ keeps for ``queue``, read now."""
    return QueueCounts(
        queued=queue.count,
        deferred=queue.deferred_job_registry.count,
        started=queue.started_job_registry.count,
        failed=queue.failed_job_registry.count,
    )


def worker_records(queue: Queue) -> list[WorkerRecord]:
    """RQ's records of the workers registered on ``queue``."""
    return [
        WorkerRecord(
            name=worker.name,
            hostname=worker.hostname,
            pid=worker.pid,
            queues=worker.queue_names(),
            state=str(worker.get_state()),
            last_heartbeat=worker.last_heartbeat,
        )
        for worker in Worker.all(queue=queue)
    ]


def workers_of_queues(client: redis.Redis, names: list[str]) -> list[WorkerRecord]:
    """RQ's records of the workers registered on any of the queues ``names``, each once, by
    name."""
    records: dict[str, WorkerRecord] = {}
    for name in names:
        for record in worker_records(named_queue(client, name)):
            records.setdefault(record.name, record)
    return sorted(records.values(), key=lambda record: record.name)
