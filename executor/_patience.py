"""Riding out a moment without Redis: a worker's round trips that must not fail the job.

A job whose start or result cannot reach Redis would leave its call without an answer:
RQ records the job's failure in Redis too, and drops it when Redis is away. So the round trips
that start a job (RQ's own start, the call's claim, its session) and the one that stores its
result try again while Redis does not answer, up to a patience, and only then fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import redis

# How long a worker keeps trying while Redis does not answer (a restart, a failover).
PATIENCE_S = 30.0
# Pause between two tries.
RETRY_S = 0.5

_T = TypeVar("_T")


def patiently(attempt: Callable[[], _T]) -> _T:
    """``attempt()``, tried again while it raises a Redis error, for up to ``PATIENCE_S``."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            return attempt()
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(RETRY_S)
