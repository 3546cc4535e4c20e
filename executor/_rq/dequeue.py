"""Taking a job off several queues, at once and so that a worker that dies holding it loses
nothing.

RQ 3 takes a job off one queue with BLMOVE into that queue's intermediate list, where the
pool finds it again if the worker dies before starting it (``workers.pool._reaper``). Off
several queues (a worker that serves its host's sessions and the pool's queue) RQ falls back
to BLPOP, and a job popped by a worker that dies, stops or loses its connection at that
moment is gone: its call waits for the turn's timeout. Redis has no blocking move from
several lists either.

``ReliableQueue.dequeue_any`` takes a job off several queues with one script
(``lua/take.lua``): the first job of the first non-empty queue, in the worker's order, moved
into its intermediate list as RQ's LMOVE would, with the job's hash read in the same round
trip. When every queue is empty, the worker blocks on the queues' doorbells
(``executor._rq.doorbell``) with one BLPOP until a job is put on any of them, then takes
again: no polling while idle, and a job on any queue is taken as soon as it is pushed. A
worker of one queue takes with the script while its queue had work the last time it looked,
and otherwise blocks in RQ's own BLMOVE.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any, NamedTuple

import redis
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, parse_job_id
from rq.serializers import Serializer
from rq.timeouts import BaseDeathPenalty
from rq.utils import as_text

from executor._errors import ConfigurationError
from executor._rq.doorbell import EXPIRY_S

_JOB_PREFIX = Job.redis_job_namespace_prefix
# Read and hashed once: each take sends the hash alone (EVALSHA).
_TAKE = resources.files("executor._rq").joinpath("lua/take.lua").read_text("utf-8")
_TAKE_SHA = hashlib.sha1(_TAKE.encode("utf-8")).hexdigest()


class ReliableQueue(Queue):
    """RQ's queue, whose dequeue over several queues moves the job into its intermediate list.

    ``doorbell``: the key its enqueuers ring (``Keys.doorbell``); a worker that serves it
    beside other queues waits on it. RQ builds queues of this class by name too (from a
    job's origin, say): those have none, and are never waited on.
    """

    def __init__(self, *args: Any, doorbell: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.doorbell = doorbell

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
        not at all if None), moved into its intermediate list; ``DequeueTimeout`` when none
        came."""
        queues = list(queues)
        one = queues[0] if len(queues) == 1 else None
        if one is not None and (_doorbell_of(one) is None or one.key in _IDLE):
            # A queue that was empty the last time: block in RQ's own BLMOVE (and fetch).
            taken_by_rq = super().dequeue_any(
                queues,
                timeout,
                connection,
                job_class=job_class,
                serializer=serializer,
                death_penalty_class=death_penalty_class,
            )
            if taken_by_rq is not None:
                _IDLE.discard(one.key)  # more may follow: look with the script next time
            return taken_by_rq
        taker = Taker(connection, queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            taken = taker.take(None if one is not None else deadline)
            if taken is None:
                if one is None or timeout is None:
                    return None
                _IDLE.add(one.key)
                return cls.dequeue_any(
                    queues, timeout, connection, job_class, serializer, death_penalty_class
                )
            job_cls = job_class or cls.job_class
            if taken.fields:
                job_id = parse_job_id(taken.job_id)
                job = job_cls(job_id, connection=connection, serializer=serializer)
                job.restore(taken.fields)
                queue = cls.from_queue_key(
                    taken.queue_key,
                    connection=connection,
                    job_class=job_cls,
                    serializer=serializer,
                    death_penalty_class=death_penalty_class,
                )
                return job, queue
            # The job's hash is gone (expired or deleted): RQ skips it too; take the next.


class Taken(NamedTuple):
    """A job taken off a queue: the queue's key, the job's id, its hash (empty if gone)."""

    queue_key: str
    job_id: str
    fields: dict[bytes, bytes]


class Taker:
    """Takes jobs off ``queues`` (in that order of priority) for one worker; each queue must
    be a ``ReliableQueue`` with a doorbell."""

    def __init__(self, connection: redis.Redis, queues: Sequence[Queue]) -> None:
        self._connection = connection
        self._queue_keys = [queue.key for queue in queues]
        self.doorbells = [_doorbell(queue) for queue in queues]
        intermediate = IntermediateQueue.get_intermediate_queue_key
        self._script_keys = [
            key
            for queue_key, doorbell in zip(self._queue_keys, self.doorbells, strict=True)
            for key in (queue_key, intermediate(queue_key), doorbell)
        ]

    def take(self, deadline: float | None) -> Taken | None:
        """Move the first job of the first non-empty queue into that queue's intermediate
        list; wait for a ring until ``deadline`` (None: do not wait). The job taken, or None
        without a deadline; ``DequeueTimeout`` at the deadline."""
        while True:
            taken = self.take_now()
            if taken is not None or deadline is None:
                return taken
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._wait(remaining):
                raise DequeueTimeout(max(0, int(remaining)), list(self._queue_keys))

    def take_now(self) -> Taken | None:
        """One look at the queues, one round trip: the job taken, or None."""
        reply = _run_take(self._connection, self._script_keys)
        if not reply:
            return None
        index, job_id, flat = reply
        fields = dict(zip(flat[::2], flat[1::2], strict=True))
        return Taken(self._queue_keys[int(index) - 1], as_text(job_id), fields)

    def _wait(self, seconds: float) -> bool:
        """Block until a doorbell rings (True: its token is taken) or ``seconds`` pass."""
        # Redis 6+ takes a decimal timeout; whole milliseconds, and never 0 (for ever).
        timeout = max(0.001, round(seconds, 3))
        return self._connection.blpop(self.doorbells, timeout) is not None


# The queues of one worker of one queue that were empty when it last looked: it blocks in
# RQ's BLMOVE for them, and takes with the script (job and hash in one round trip) otherwise.
_IDLE: set[str] = set()


def _doorbell_of(queue: Queue) -> str | None:
    return queue.doorbell if isinstance(queue, ReliableQueue) else None


def _doorbell(queue: Queue) -> str:
    doorbell = _doorbell_of(queue)
    if doorbell is None:
        raise ConfigurationError(
            f"queue {queue.name!r} has no doorbell: a worker of several queues waits on their "
            "doorbells (ReliableQueue(name, doorbell=Keys.doorbell(name)))"
        )
    return doorbell


def _run_take(connection: redis.Redis, keys: list[str]) -> Any:
    """take.lua, by its hash; sent whole once when Redis does not have it (a new or
    restarted server)."""
    try:
        return connection.evalsha(_TAKE_SHA, len(keys), *keys, EXPIRY_S, _JOB_PREFIX)
    except redis.exceptions.NoScriptError:
        return connection.eval(_TAKE, len(keys), *keys, EXPIRY_S, _JOB_PREFIX)
