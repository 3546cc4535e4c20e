"""What sessions hold in Redis, by key family: ``MEMORY USAGE`` of each session's keys.

Used by ``benchmarks.many_sessions``. The key names come from ``executor.wire.Keys`` (and RQ's
``Job.key_for`` for the records of the create jobs), so the families follow the key layout of
``executor/wire/_keys.py``: the session's record, its calls list, its background processes,
the keys of its lock scope, its name in the sessions set; and RQ's records of the jobs that
made the folders (kept ``TOOLPOOL_RQ_RECORD_TTL``, by default none).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis
from rq.job import Job
from rq.registry import FinishedJobRegistry

from executor.wire import Keys, session_scope

RECORD = "record (HASH session:<name>)"
CALLS = "calls list (ZSET session:<name>:calls)"
PROCESSES = "background processes (HASH session:<name>:processes)"
LOCK = "lock scope ({lock:session.<name>}:*)"
NAME = "name in the sessions SET"
RQ_RECORDS = "RQ's records of the create jobs (none kept by default)"
# The session's own keys, in the order they are printed.
FAMILIES = (RECORD, CALLS, PROCESSES, LOCK, NAME)


def held_memory(client: redis.Redis) -> int:
    """Redis's ``used_memory`` now less its connections' buffers, in bytes: what the data
    holds. The buffers shrink by tens of KB a while after a burst of commands (Redis trims an
    idle client's query buffer), which would read as sessions costing less."""
    used, clients = _memory_info(client)
    return used - clients


def settle(client: redis.Redis, quiet_s: float = 1.0, patience_s: float = 15.0) -> bool:
    """Wait until Redis's data memory (``used_memory_dataset``) has not moved for ``quiet_s``
    (at most ``patience_s``); True if it settled. A pool that just started frees a few
    hundred KB of it within a second, which would read as sessions costing less."""
    deadline = time.monotonic() + patience_s
    last, since = _dataset(client), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(quiet_s / 4)
        now = _dataset(client)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return True
    return False


def _dataset(client: redis.Redis) -> int:
    info: dict[str, int] = client.info("memory")
    return int(info["used_memory_dataset"])


def _memory_info(client: redis.Redis) -> tuple[int, int]:
    """``used_memory`` and, of it, the buffers of normal clients' connections."""
    info: dict[str, int] = client.info("memory")
    return int(info["used_memory"]), int(info["mem_clients_normal"])


def key_bytes(client: redis.Redis, keys: Iterable[str]) -> int:
    """The summed ``MEMORY USAGE`` of ``keys`` (each counted whole: ``SAMPLES 0``; a key
    that does not exist counts 0), in one round trip."""
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.memory_usage(key, samples=0)
        sizes = pipe.execute()
    return sum(int(size or 0) for size in sizes)


def session_families(client: redis.Redis, keys: Keys, names: Sequence[str]) -> dict[str, int]:
    """Bytes of each family of the sessions' own keys, summed over ``names`` (``NAME``, the
    sessions set, is left to the caller: it is one key shared by all)."""
    return {
        RECORD: key_bytes(client, (keys.session(name) for name in names)),
        CALLS: key_bytes(client, (keys.session_calls(name) for name in names)),
        PROCESSES: key_bytes(client, (keys.session_processes(name) for name in names)),
        LOCK: key_bytes(
            client,
            (key for name in names for key in keys.lock(session_scope(name)).script_keys()),
        ),
    }


def index_bytes(client: redis.Redis, keys: Keys) -> int:
    """``MEMORY USAGE`` of the sessions set (0 while there is none)."""
    return key_bytes(client, [keys.sessions_index])


def finished_job_bytes(client: redis.Redis, queue_name: str) -> int:
    """The bytes of the records of the jobs RQ keeps as finished on ``queue_name``, with the
    registry itself."""
    registry = FinishedJobRegistry(name=queue_name, connection=client)
    ids = registry.get_job_ids()
    return key_bytes(client, [registry.key, *(Job.key_for(i) for i in ids)])


@dataclass(frozen=True)
class Snapshot:
    """What grows as sessions are made: ``used_memory`` and the connections' buffers in it,
    the sessions set, and RQ's records of the finished jobs of the host's queue (the
    creates'), in bytes."""

    used: int
    clients: int
    index: int
    rq_records: int


def snapshot(client: redis.Redis, keys: Keys, queue_name: str) -> Snapshot:
    """The ``Snapshot`` now (``queue_name``: the host's queue)."""
    used, clients = _memory_info(client)
    return Snapshot(
        used, clients, index_bytes(client, keys), finished_job_bytes(client, queue_name)
    )
