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
into its intermediate list as RQ's LMOVE would. When every queue is empty, the worker blocks
on the queues' doorbells (``executor._rq.doorbell``) with one BLPOP until a job is put on any
of them, then takes again: no polling while idle, and a job on any queue is taken as soon as
it is pushed. A worker of one queue keeps RQ's own BLMOVE.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

import redis
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.serializers import Serializer
from rq.timeouts import BaseDeathPenalty
from rq.utils import as_text

from executor._errors import ConfigurationError
from executor._rq.doorbell import EXPIRY_S

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
        if len(queues) == 1:
            return super().dequeue_any(
                queues,
                timeout,
                connection,
                job_class=job_class,
                serializer=serializer,
                death_penalty_class=death_penalty_class,
            )
        taker = Taker(connection, queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            taken = taker.take(deadline)
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

    def take(self, deadline: float | None) -> tuple[str, str] | None:
        """Move the first job of the first non-empty queue into that queue's intermediate
        list; wait for a ring until ``deadline`` (None: do not wait). ``(queue key, job id)``,
        or None without a deadline; ``DequeueTimeout`` at the deadline."""
        while True:
            taken = self.take_now()
            if taken is not None or deadline is None:
                return taken
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._wait(remaining):
                raise DequeueTimeout(max(0, int(remaining)), list(self._queue_keys))

    def take_now(self) -> tuple[str, str] | None:
        """One look at the queues, one round trip: ``(queue key, job id)`` or None."""
        reply = _run_take(self._connection, self._script_keys)
        if not reply:
            return None
        index, job_id = reply
        return self._queue_keys[int(index) - 1], as_text(job_id)

    def _wait(self, seconds: float) -> bool:
        """Block until a doorbell rings (True: its token is taken) or ``seconds`` pass."""
        # Redis 6+ takes a decimal timeout; whole milliseconds, and never 0 (for ever).
        timeout = max(0.001, round(seconds, 3))
        return self._connection.blpop(self.doorbells, timeout) is not None


def _doorbell(queue: Queue) -> str:
    doorbell = queue.doorbell if isinstance(queue, ReliableQueue) else None
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
        return connection.evalsha(_TAKE_SHA, len(keys), *keys, EXPIRY_S)
    except redis.exceptions.NoScriptError:
        return connection.eval(_TAKE, len(keys), *keys, EXPIRY_S)
