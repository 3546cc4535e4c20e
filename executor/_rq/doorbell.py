"""A queue's doorbell: how a worker that serves several queues waits for a job on any of them.

Redis has no blocking move from several lists, and a job must go from its queue straight into
that queue's intermediate list (``executor._rq.dequeue``). So whoever puts jobs on a queue
also pushes as many tokens on the queue's doorbell (``Keys.doorbell``), in the same
transaction or script, and a worker with nothing to do blocks on the doorbells of all its
queues with one BLPOP: it sends nothing while it waits, and a job on any of its queues wakes
it at once. Woken, it takes a job with one script (``lua/take.lua``), which also brings each
doorbell in line with its queue: no more tokens than jobs, and at least one while jobs wait,
so that another waiting worker wakes for the jobs this one leaves.

A token is a hint, never the job. One too many costs a worker a take that finds nothing. One
missing (taken by a worker killed between its BLPOP and its take, or never pushed: a job put
back by hand with ``rq requeue``) costs a bounded wait: until the next take by any worker of
that queue, or at the latest the waiting worker's own dequeue timeout (RQ's
``worker_ttl - 15``, 405 s), after which it looks at its queues again. The rings:

- ``jobs.enqueue_turn`` (a turn's first batch), ``jobs.enqueue_session_op`` and
  ``jobs.requeue_dequeued`` (the pool putting back a job its lost worker never started), each
  in its transaction;
- ``executor/wire/lua/publish_result.lua``, which puts a turn's next batch on its queue;
- ``wake``, by the pool, for the queues of a worker it buried (it may have died holding a
  token);
- ``ring_if_silent``, by the pool's sweep (every second while it sees work, every 30 s at most
  when idle), for a queue with jobs and no token: a lost ring then costs at most that.

A doorbell keeps at most ``TOKENS_KEPT`` tokens and expires ``EXPIRY_S`` after it was last
rung: the workers of one queue block on the queue itself (RQ's BLMOVE) and take no tokens.
A waiting worker takes a token the moment it is pushed, so a token only has to outlive the
instant between a worker's empty look at its queues and its BLPOP.
"""

from __future__ import annotations

import redis
from redis.client import Pipeline

# The most tokens a doorbell keeps: more than that many workers waiting on one queue would
# wake one after the other, each take ringing for the next (``lua/take.lua``).
TOKENS_KEPT = 1000
# Seconds a doorbell lives after its last ring.
EXPIRY_S = 60


def ring(pipe: Pipeline, doorbell: str, jobs: int) -> None:
    """Queue on ``pipe`` the ring for ``jobs`` jobs put on the doorbell's queue: a token
    each (one waiting worker woken per job), the oldest dropped past ``TOKENS_KEPT``."""
    if jobs <= 0:
        return
    pipe.rpush(doorbell, *["1"] * min(jobs, TOKENS_KEPT))
    pipe.ltrim(doorbell, -TOKENS_KEPT, -1)
    pipe.expire(doorbell, EXPIRY_S)


def ring_if_silent(client: redis.Redis, queue_key: str, doorbell: str) -> bool:
    """Ring once if the queue has jobs and its doorbell no token: a ring was lost (a worker
    cut off from Redis after its BLPOP was answered, or a job put back by hand). True if it
    rang, or if jobs wait: the caller looks again soon."""
    with client.pipeline(transaction=False) as pipe:
        pipe.llen(queue_key)
        pipe.llen(doorbell)
        jobs, tokens = pipe.execute()
    if jobs and not tokens:
        with client.pipeline() as pipe:
            ring(pipe, doorbell, 1)
            pipe.execute()
    return bool(jobs)


def wake(client: redis.Redis, queue_key: str, doorbell: str) -> bool:
    """Ring once if the queue (RQ's list ``queue_key``) has jobs: a worker that died after
    its BLPOP took the token of a job still there. True if it rang."""
    if not client.llen(queue_key):
        return False
    with client.pipeline() as pipe:
        ring(pipe, doorbell, 1)
        pipe.execute()
    return True
