"""toolpool's RQ worker class: RQ's worker heartbeat coalesced, its state written only when it
changes, dependents released only where a turn has more batches."""

from __future__ import annotations

import signal

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from executor.wire import ENTRY_POINT
from workers.pool import _rq_worker
from workers.pool._rq_worker import ToolpoolWorker


def test_the_worker_heartbeat_is_sent_at_most_once_a_second_in_one_round_trip(
    client: redis.Redis,
) -> None:
    queue = Queue("beats", connection=client, serializer=JSONSerializer)
    worker = ToolpoolWorker([queue], connection=client, serializer=JSONSerializer, name="w-beat")
    worker.register_birth()  # type: ignore[no-untyped-call]
    client.hdel(worker.key, "last_heartbeat")
    sent: list[int] = []
    original = client.pipeline

    def counting(*args: object, **kwargs: object) -> redis.client.Pipeline:
        sent.append(1)
        return original(*args, **kwargs)

    client.pipeline = counting  # type: ignore[method-assign]
    try:
        worker.heartbeat()
        first = client.hget(worker.key, "last_heartbeat")
        worker.heartbeat()  # within the second: not sent
        assert client.hget(worker.key, "last_heartbeat") == first
        worker._beat_at -= 2.0  # a second later, as far as the worker knows
        worker.heartbeat()
    finally:
        del client.pipeline
    assert first is not None
    assert len(sent) == 2
    assert client.ttl(worker.key) > 0


def test_only_a_call_of_a_turns_last_batch_skips_the_release_of_dependents(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = Queue("ready", connection=client, serializer=JSONSerializer)
    worker = ToolpoolWorker([queue], connection=client, serializer=JSONSerializer, name="w-r")
    released: list[str] = []
    monkeypatch.setattr(_rq_worker, "enqueue_ready", lambda q: released.append(q.name))
    monkeypatch.setattr(ToolpoolWorker, "_execute_or_refuse", lambda self, job, q: None)
    for job_id, payload in [
        ("last", {"call": {}, "last_batch": True}),
        ("middle", {"call": {}, "last_batch": False}),
        ("old-client", {"call": {}}),  # sent before the field existed: released, to be safe
    ]:
        job = queue.enqueue_call(func=ENTRY_POINT, args=(payload,), job_id=job_id)
        worker.execute_job(job, queue)
    assert released == ["ready", "ready"]


def test_idle_goes_with_the_jobs_last_pipeline_and_a_stop_meanwhile_is_warm(
    client: redis.Redis,
) -> None:
    queue = Queue("states", connection=client, serializer=JSONSerializer)
    worker = ToolpoolWorker([queue], connection=client, serializer=JSONSerializer, name="w-st")
    worker.register_birth()  # type: ignore[no-untyped-call]
    worker.set_state(WorkerStatus.BUSY)
    job = queue.enqueue_call(func=ENTRY_POINT, args=({},))
    with client.pipeline() as pipe:
        worker.cleanup_execution(job, pipe)
        # Still busy here: a SIGTERM now must wait for this pipeline (a warm stop).
        assert worker.get_state() == WorkerStatus.BUSY
        worker.request_stop(signal.SIGTERM, None)  # type: ignore[no-untyped-call]
        assert worker._stop_requested
        pipe.execute()
    assert client.hget(worker.key, "state") == b"idle"
    client.hset(worker.key, "state", "marker")  # a write now would replace the marker
    worker.set_state(WorkerStatus.IDLE)  # RQ's own, after the job: no round trip
    worker.set_state(WorkerStatus.IDLE)  # before the next dequeue: none either
    assert worker.get_state() == WorkerStatus.IDLE
    assert client.hget(worker.key, "state") == b"marker"
    worker.set_state(WorkerStatus.BUSY)  # a change is written
    assert client.hget(worker.key, "state") == b"busy"
