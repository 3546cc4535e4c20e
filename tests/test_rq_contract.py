"""The RQ behaviour toolpool relies on, checked against the installed rq.

Everything toolpool does with RQ lives in ``executor/_rq/``; these are the facts of RQ it
builds on there. ``pyproject.toml`` pins rq to the minor version this file passed on: a new
rq is taken by widening the pin once this file passes on it.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
import redis
from rq import Queue, SimpleWorker, Worker
from rq.exceptions import DeserializationError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.registry import DeferredJobRegistry
from rq.serializers import JSONSerializer

from executor._rq import names
from executor._rq.jobs import ENTRY_POINT, end_job, fetch_job, worker_key, worker_queue_names
from executor._rq.worker import ToolpoolWorker

# What the release script (executor/wire/lua/publish_result.lua) does to a waiting job.
_RELEASE = """
redis.call('HSET', KEYS[1], 'status', 'queued', 'enqueued_at', ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
"""


def _queue(client: redis.Redis, name: str) -> Queue:
    return Queue(name, connection=client, serializer=JSONSerializer)


def test_the_pin_names_the_installed_minor_version() -> None:
    pinned = [
        line
        for line in importlib.metadata.requires("toolpool") or []
        if line.startswith("rq") and "extra" not in line
    ]
    major, minor = importlib.metadata.version("rq").split(".")[:2]
    assert pinned == [f"rq<{major}.{int(minor) + 1},>={major}.{minor}"], pinned


def test_key_names_are_rqs(client: redis.Redis) -> None:
    queue = _queue(client, "contract-names")
    assert names.queue_key(queue.name) == queue.key
    assert names.deferred_key(queue.name) == queue.deferred_job_registry.key
    assert names.job_key("j1") == Job(id="j1", connection=client).key
    worker = SimpleWorker([queue], connection=client, name="contract-w")
    assert worker_key("contract-w") == worker.key
    assert IntermediateQueue.get_intermediate_queue_key(queue.key) == queue.intermediate_queue_key


def test_a_waiting_job_released_by_a_script_runs_on_rqs_worker(client: redis.Redis) -> None:
    """A job saved as deferred (no RQ dependency) and put on the queue by toolpool's script is
    one RQ's worker takes and finishes, with RQ's registries right before and after."""
    queue = _queue(client, "contract-release")
    job = queue.create_job(
        "builtins.len", args=(["a", "b"],), job_id="waiting", status=JobStatus.DEFERRED
    )
    job.origin = queue.name
    with client.pipeline() as pipe:
        pipe.multi()
        job.save(pipeline=pipe)
        queue.deferred_job_registry.add(job, pipeline=pipe)
        pipe.execute()
    assert queue.deferred_job_registry.get_job_ids() == ["waiting"]
    assert queue.count == 0
    # RQ never expires a deferred entry on its own: a waiting batch stays listed until released.
    DeferredJobRegistry(queue=queue).cleanup()
    assert queue.deferred_job_registry.get_job_ids() == ["waiting"]

    release = client.register_script(_RELEASE)
    release(
        keys=[names.job_key("waiting"), queue.key, queue.deferred_job_registry.key],
        args=["waiting", names.timestamp()],
    )
    assert fetch_job(client, "waiting") is not None
    assert queue.get_job_ids() == ["waiting"]
    assert queue.deferred_job_registry.get_job_ids() == []
    released = Job.fetch("waiting", connection=client, serializer=JSONSerializer)
    assert released.get_status() is JobStatus.QUEUED
    assert released.enqueued_at is not None  # RQ parses the script's timestamp

    worker = SimpleWorker([queue], connection=client, serializer=JSONSerializer)
    assert worker.work(burst=True)
    assert released.get_status(refresh=True) is JobStatus.FINISHED
    assert released.return_value() == 2


def test_enqueue_goes_on_a_callers_transaction(client: redis.Redis) -> None:
    """``enqueue_call(pipeline=...)`` queues its writes on a MULTI the caller started and sent."""
    queue = _queue(client, "contract-multi")
    with client.pipeline() as pipe:
        pipe.multi()
        pipe.set("contract-before", "1")
        queue.enqueue_call("builtins.len", args=([1],), job_id="in-multi", pipeline=pipe)
        assert queue.count == 0  # nothing sent yet
        pipe.execute()
    assert queue.get_job_ids() == ["in-multi"]
    assert client.sadd(queue.redis_queues_keys, queue.key) == 0  # RQ registered the queue


def test_a_job_that_is_not_json_fails_to_read_without_running(client: redis.Redis) -> None:
    """The worker's refusal reads ``func_name``: a payload that is not JSON raises there."""
    queue = _queue(client, "contract-json")
    job = queue.enqueue_call(ENTRY_POINT, args=({"call": {}},), job_id="bad")
    client.hset(job.key, "data", b"\x80\x04not json")
    fetched = Job.fetch("bad", connection=client, serializer=JSONSerializer)
    with pytest.raises(DeserializationError):
        _ = fetched.func_name


def test_cancel_ends_a_started_job(client: redis.Redis) -> None:
    """``end_job`` relies on RQ's cancel taking a job out of the started registry."""
    queue = _queue(client, "contract-cancel")
    job = queue.enqueue_call("builtins.len", args=([1],), job_id="started")
    client.lrem(queue.key, 0, "started")
    job.set_status(JobStatus.STARTED)
    assert end_job(client, "started")
    assert job.get_status(refresh=True) is JobStatus.CANCELED
    assert "started" in queue.canceled_job_registry.get_job_ids()
    assert not end_job(client, "started")  # ended already
    assert not end_job(client, "no-such-job")


def test_a_workers_queues_are_recorded_under_its_key(client: redis.Redis) -> None:
    first, second = _queue(client, "contract-q1"), _queue(client, "contract-q2")
    worker = Worker([first, second], connection=client, name="contract-two")
    worker.register_birth()  # type: ignore[no-untyped-call]
    try:
        assert worker_queue_names(client, "contract-two") == ["contract-q1", "contract-q2"]
        assert worker_key("contract-two") in Worker.all_keys(connection=client, queue=first)
    finally:
        worker.register_death()  # type: ignore[no-untyped-call]
    assert worker_queue_names(client, "no-such-worker") == []


def _started(client: redis.Redis, worker: SimpleWorker, queue: Queue) -> dict[str, object]:
    """Take ``queue``'s one job as RQ's dequeue does and start it with ``worker``; what Redis
    then holds of the start, with the names that differ between the two runs made alike."""
    found = queue.dequeue_any([queue], timeout=None, connection=client, serializer=JSONSerializer)
    assert found is not None
    job = found[0]
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
    raw = client.hgetall(job.key)
    same = {job.id: "JOB", worker.name: "WORKER", execution.id: "EXEC", queue.name: "QUEUE"}

    def alike(raw: Any) -> str:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        for old, new in same.items():
            text = text.replace(old, new)
        return text

    keys = sorted(alike(key) for key in client.keys(f"*{job.id}*"))
    started_key = queue.started_job_registry.key
    return {
        "job fields": sorted(alike(field) for field in raw),
        "job status": raw[b"status"],
        "job worker": alike(raw[b"worker_name"]),
        "job ttl": client.ttl(job.key),
        "keys of the job": keys,
        "started registry": [alike(m) for m in client.zrange(started_key, 0, -1)],
        "execution fields": sorted(alike(f) for f in client.hgetall(execution.key)),
        "worker executions": [alike(m) for m in client.smembers(execution.worker_executions_key)],
        "worker state": client.hget(worker.key, "state"),
        "intermediate": client.llen(IntermediateQueue.get_intermediate_queue_key(queue.key)),
    }


def test_the_workers_one_transaction_start_writes_what_rqs_two_write(client: redis.Redis) -> None:
    """``ToolpoolWorker`` sends RQ's record of the execution and RQ's start of the job in one
    MULTI; oracle: what Redis holds after it equals what RQ's own worker leaves with two."""
    states, transactions = [], []
    for label, worker_class in (("rq", SimpleWorker), ("toolpool", ToolpoolWorker)):
        queue = _queue(client, f"contract-start-{label}")
        queue.enqueue_call(ENTRY_POINT, args=({"call": {}},), job_id=f"start-{label}", ttl=600)
        worker = worker_class([queue], connection=client, name=f"w-{label}")
        before = _exec_count(client)
        states.append(_started(client, worker, queue))
        transactions.append(_exec_count(client) - before)
    assert states[0] == states[1]
    assert states[0]["job status"] == b"started"
    assert states[0]["job ttl"] == -1  # the started job's hash no longer expires
    assert transactions == [2, 1]


def _exec_count(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_exec", {})
    return int(stats.get("calls", 0))
