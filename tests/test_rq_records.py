"""What RQ keeps of a call that ended well: nothing, by default (``rq_record_ttl`` 0).

toolpool stores each call's result under its own keys, and nothing of toolpool reads RQ's
record of a job once its call is answered. That record was the largest thing a call left in
Redis: the job's hash (about 1.6 KB: its payload is longer than Redis's compact encoding
takes) and its finished-registry entry, for 10 minutes. These tests count the keys and their
``MEMORY USAGE`` on a real redis-server around real calls, and check the worker still ends a
job in one round trip without the record.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from executor import Executor, Settings
from executor._rq import jobs
from executor._rq.jobs import ENTRY_POINT, end_job, job_status
from executor._rq.worker import ToolpoolWorker
from tests.support import dist_tools
from workers.pool._process import run_worker

# The goal: a retained trivial call costs at most this much of Redis, RQ included.
# MEMORY USAGE counts each key's own allocations; Redis's key tables come on top (the
# benchmark's used_memory figure, ``benchmarks.memory``, has them).
RETAINED_CALL_BYTES = 1024
# What RQ's per-worker and per-queue keys may change by between two looks (a worker's counters
# and timestamps), per call: the old record cost over 1,700 B a call.
RQ_DRIFT_PER_CALL = 64


# RQ's records of its workers and its maintenance marks: kept per worker and per queue, never
# per call, and they come and go with the workers (a dead worker's record expires in a minute).
_PER_WORKER = ("rq:worker:", "rq:workers", "rq:clean_registries:")


def _sizes(client: redis.Redis) -> dict[str, int]:
    """Every key of the Redis but the per-worker ones, with its MEMORY USAGE (the test's own,
    emptied Redis)."""
    sizes: dict[str, int] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        size = client.memory_usage(raw, samples=0)
        if size is not None and not key.startswith(_PER_WORKER):
            sizes[key] = int(size)
    return sizes


def _rq_bytes(sizes: dict[str, int]) -> int:
    return sum(size for key, size in sizes.items() if key.startswith("rq:"))


def _calls(tag: str) -> list[dict[str, Any]]:
    """A turn of three batches: two safe reads, a lone write, two safe reads (so RQ's deferred
    registry, the barrier and the release script all take part)."""
    echo = [{"name": "echo", "arguments": {"text": "hi"}}]
    write = [{"name": "write_file", "arguments": {"path": f"{tag}.txt", "content": "x"}}]
    return [
        {"id": f"{tag}-{index}", **call} for index, call in enumerate(echo * 2 + write + echo * 2)
    ]


def test_a_finished_turn_leaves_nothing_of_rq_and_under_a_kilobyte_a_call(
    redis_url: str, tmp_path: Path
) -> None:
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    registry = dist_tools.registry()
    with Executor(settings=settings, registry=registry) as executor:
        # A first call makes the keys RQ and toolpool keep per queue, not per call.
        warm = executor.submit([{"id": "warm", "name": "echo", "arguments": {"text": "hi"}}])
        run_worker(redis_url, settings, registry, name="w-records", burst=True)
        executor.collect(warm, timeout=10)
        before = _sizes(executor.client)

        turns = [executor.submit(_calls(f"t{n}")) for n in range(2)]
        run_worker(redis_url, settings, registry, name="w-records", burst=True)
        results = [result for turn in turns for result in executor.collect(turn, timeout=10)]
        after = _sizes(executor.client)

    calls = len(results)
    assert [result.status.value for result in results] == ["ok"] * calls, results
    job_ids = [job for turn in turns for job in turn.plan.job_ids.values()]
    # RQ forgot the jobs: no record, no key that names one, no key of RQ's that was not there
    # (per worker aside).
    assert [job_status(executor.client, job) for job in job_ids] == [None] * calls
    assert [key for key in after if any(job in key for job in job_ids)] == []
    assert {key for key in after if key.startswith("rq:")} <= set(before)
    rq_growth = _rq_bytes(after) - _rq_bytes(before)
    assert rq_growth < RQ_DRIFT_PER_CALL * calls, f"RQ kept {rq_growth / calls:.0f} B a call"
    # What the calls left is toolpool's own: results, call-id claims, turn plans and barriers.
    added = {key: size for key, size in after.items() if key not in before}
    assert {key.split(":")[1] for key in added} == {"call", "result", "turn"}, sorted(added)
    assert sum(added.values()) / calls < RETAINED_CALL_BYTES, added


@contextmanager
def _round_trips(client: redis.Redis) -> Iterator[dict[str, int]]:
    """Count what ``client`` sends: its pipelines, and commands sent outside of one."""
    sent = {"pipelines": 0, "commands": 0}
    pipeline, execute_command = client.pipeline, client.execute_command

    def counting_pipeline(*args: Any, **kwargs: Any) -> Any:
        sent["pipelines"] += 1
        return pipeline(*args, **kwargs)

    def counting_command(*args: Any, **kwargs: Any) -> Any:
        sent["commands"] += 1
        return execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    client.pipeline = counting_pipeline  # type: ignore[method-assign]
    client.execute_command = counting_command  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del client.pipeline, client.execute_command


def test_a_job_without_a_record_ends_in_one_round_trip(client: redis.Redis) -> None:
    queue = Queue("records", connection=client, serializer=JSONSerializer)
    worker = ToolpoolWorker([queue], connection=client, serializer=JSONSerializer, name="w-end0")
    worker.register_birth()  # type: ignore[no-untyped-call]
    job = queue.enqueue_call(func=ENTRY_POINT, args=({"call": {}},), job_id="last", result_ttl=0)
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job)
    job.started_at = job.ended_at = datetime.now(timezone.utc)

    with _round_trips(client) as sent:
        worker.handle_job_success(job, queue, queue.started_job_registry, execution)

    # RQ's own delete would first read the job's status and its executions.
    assert sent == {"pipelines": 1, "commands": 0}
    assert not client.exists(job.key)
    assert queue.finished_job_registry.get_job_ids() == []
    assert queue.started_job_registry.get_job_ids(cleanup=False) == []
    assert [key for key in client.scan_iter() if b"last" in key] == []
    assert client.hget(worker.key, "successful_job_count") == b"1"
    assert Job.exists("last", connection=client) is False


@pytest.fixture
def ending_job(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Job:
    """A queued job whose record its worker deletes (ending it) right after anyone fetches it:
    a collector or the pool reading a job just as it ends (a fault run's collector died of
    it)."""
    queue = Queue("records", connection=client, serializer=JSONSerializer)
    job = queue.enqueue_call(func=ENTRY_POINT, args=({"call": {}},), job_id="ends", result_ttl=0)
    fetch = jobs.fetch_job

    def fetch_then_end(connection: redis.Redis, rq_job_id: str) -> Job | None:
        found = fetch(connection, rq_job_id)
        connection.delete(Job.key_for(rq_job_id))
        return found

    monkeypatch.setattr(jobs, "fetch_job", fetch_then_end)
    return job


def test_the_status_of_a_job_that_ends_meanwhile_is_no_error(
    client: redis.Redis, ending_job: Job
) -> None:
    assert job_status(client, ending_job.id) in (JobStatus.QUEUED, None)


def test_ending_a_job_that_ends_meanwhile_writes_nothing_back(
    client: redis.Redis, ending_job: Job
) -> None:
    assert end_job(client, ending_job.id) is False
    # No record written back without an expiry, no entry in the cancelled registry.
    assert not client.exists(ending_job.key)
    assert Queue("records", connection=client).canceled_job_registry.get_job_ids() == []


def _transactions_of_a_burst(redis_url: str, settings: Settings, calls: int) -> int:
    """MULTI/EXEC transactions Redis ran while a burst worker drained a turn of ``calls``
    concurrency-safe calls (submitted before)."""
    registry = dist_tools.registry()
    with Executor(settings=settings, registry=registry) as executor:
        turn = executor.submit(
            [
                {"id": f"tx{calls}-{n}", "name": "echo", "arguments": {"text": "hi"}}
                for n in range(calls)
            ]
        )
        before = _execs(executor.client)
        run_worker(redis_url, settings, registry, name=f"w-tx{calls}", burst=True)
        ran = _execs(executor.client) - before
        results = executor.collect(turn, timeout=10)
        assert [r.status.value for r in results] == ["ok"] * calls
        worker_key = jobs.worker_key(f"w-tx{calls}")
        assert executor.client.hget(worker_key, "successful_job_count") == str(calls).encode()
        assert float(executor.client.hget(worker_key, "total_working_time") or 0) > 0
    return ran


def _execs(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))


def test_a_call_costs_its_worker_one_transaction_of_rqs(redis_url: str, tmp_path: Path) -> None:
    """RQ's record of the execution goes with its start, and RQ's end of the job with the
    call's answer (a plain pipeline): oracle, each call more in a burst adds exactly one
    transaction (RQ alone writes three)."""
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    one = _transactions_of_a_burst(redis_url, settings, 1)
    five = _transactions_of_a_burst(redis_url, settings, 5)
    assert five - one == 4
