"""Taking a job off several queues so that a worker that dies holding it loses nothing.

RQ 3 takes a job off one queue with BLMOVE into that queue's intermediate list, where the
pool finds it again if the worker dies before starting it (``workers.pool._reaper``). Off
several queues (a worker that serves its host's sessions and the pool's queue) RQ falls back
to BLPOP, and a job popped by a worker that dies, stops or loses its connection at that
moment is gone: its call waits for the turn's timeout. ``ReliableQueue.dequeue_any`` keeps
BLMOVE for every queue: a non-blocking pass over the queues in priority order, then a short
blocking wait on each in turn, each followed by another pass. Redis has no blocking move
from several lists, so a job on a queue the worker is not blocked on waits at most
``SLICE_S`` for an idle worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.serializers import Serializer
from rq.timeouts import BaseDeathPenalty
from rq.utils import as_text

# How long an idle worker blocks on one of its queues before looking at the others.
SLICE_S = 0.05


class ReliableQueue(Queue):
    """RQ's queue, whose dequeue over several queues moves the job into its intermediate list."""

    @classmethod
    def dequeue_any(
        cls,
        queues: Iterable[Queue],
        timeout: int | None,
        connection: redis.Redis,
        job_class: type[Job] | None = None,
        serializer: Serializer | str | None = None,
        death_penalty_class: type[BaseDeathPenalty] | None = None,
    ) -> tuple[Job, Queue] | None:
        """The first job of the first non-empty queue (waiting up to ``timeout`` seconds, or
        not at all if None), taken with LMOVE/BLMOVE; ``DequeueTimeout`` when none came."""
        queues = list(queues)
        if len(queues) == 1:
            return super().dequeue_any(
                queues,
                timeout,
                connection,
                job_class=job_class,
                serializer=serializer,
                death_penalty_class=death_penalty_class,
            )
        keys = [queue.key for queue in queues]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            taken = take(connection, keys, deadline)
            if taken is None:
                return None
            queue_key, job_id = taken
            found = cls._fetch_dequeued_job(
                connection,
                queue_key,
                job_id,
                job_class=job_class,
                serializer=serializer,
                death_penalty_class=death_penalty_class,
            )
            if found is not None:
                return found
            # The job's hash is gone (expired or deleted): RQ skips it too; take the next.


def take(
    connection: redis.Redis, keys: Sequence[str], deadline: float | None
) -> tuple[str, str] | None:
    """Move the first job of the first non-empty queue of ``keys`` into that queue's
    intermediate list; wait until ``deadline`` (None: do not wait). ``(queue key, job id)``,
    or None without a deadline; ``DequeueTimeout`` at the deadline."""
    turn = 0
    while True:
        for key in keys:
            moved = connection.lmove(key, IntermediateQueue.get_intermediate_queue_key(key))
            if moved is not None:
                return key, as_text(moved)
        if deadline is None:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DequeueTimeout(int(remaining), list(keys))
        key = keys[turn % len(keys)]
        turn += 1
        moved = _blocking_move(connection, key, min(SLICE_S, remaining))
        if moved is not None:
            return key, as_text(moved)


def _blocking_move(connection: redis.Redis, key: str, seconds: float) -> Any:
    # Redis 6+ takes a decimal timeout; redis-py's stubs say int.
    intermediate = IntermediateQueue.get_intermediate_queue_key(key)
    return connection.blmove(key, intermediate, seconds)  # type: ignore[arg-type]
