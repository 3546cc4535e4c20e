"""toolpool's RQ worker class: RQ's worker heartbeat coalesced, its state written only when it
changes, a job's end in one round trip."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
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
from rq.worker import WorkerStatus

from executor import Settings, _patience
from executor._rq.jobs import ENTRY_POINT
from executor._rq.worker import ToolpoolWorker
from executor.client import Executor
from tests.support import dist_tools
from workers.pool._process import run_worker


def _born(client: redis.Redis, queue_name: str, name: str) -> tuple[Queue, ToolpoolWorker]:
    """A queue and a toolpool worker on it, registered as RQ registers a starting worker."""
    queue = Queue(queue_name, connection=client, serializer=JSONSerializer)
    worker = ToolpoolWorker([queue], connection=client, serializer=JSONSerializer, name=name)
    worker.register_birth()  # type: ignore[no-untyped-call]
    return queue, worker


@contextmanager
def _pipelines_sent(client: redis.Redis) -> Iterator[list[int]]:
    """Count the pipelines ``client`` opens (RQ sends each of its writes in one)."""
    sent: list[int] = []
    original = client.pipeline

    def counting(*args: object, **kwargs: object) -> redis.client.Pipeline:
        sent.append(1)
        return original(*args, **kwargs)

    client.pipeline = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del client.pipeline


def _started(worker: ToolpoolWorker, job: Job) -> Any:
    """RQ's start of ``job`` on ``worker``, as its work loop does; the execution it made."""
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job)
    job.started_at = job.ended_at = datetime.now(timezone.utc)
    return execution


def test_the_worker_heartbeat_is_sent_at_most_once_a_second_in_one_round_trip(
    client: redis.Redis,
) -> None:
    _, worker = _born(client, "beats", "w-beat")
    client.hdel(worker.key, "last_heartbeat")
    with _pipelines_sent(client) as sent:
        worker.heartbeat()
        first = client.hget(worker.key, "last_heartbeat")
        worker.heartbeat()  # within the second: not sent
        assert client.hget(worker.key, "last_heartbeat") == first
        worker._beat_at -= 2.0  # a second later, as far as the worker knows
        worker.heartbeat()
    assert first is not None
    assert len(sent) == 2
    assert client.ttl(worker.key) > 0


def test_idle_goes_with_the_jobs_last_pipeline_and_a_stop_meanwhile_is_warm(
    client: redis.Redis,
) -> None:
    queue, worker = _born(client, "states", "w-st")
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


def test_with_a_record_ttl_a_finished_call_keeps_rqs_record_but_no_copy_of_its_result(
    redis_url: str, tmp_path: Path
) -> None:
    # By default RQ keeps no record at all (tests/test_rq_records.py).
    settings = Settings(redis_url=redis_url, workspace=tmp_path, rq_record_ttl=600)
    assert settings.redis.url
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        turn = executor.submit([{"id": "r1", "name": "echo", "arguments": {"text": "hi"}}])
        run_worker(settings.redis.url, settings, dist_tools.registry(), name="w-res", burst=True)
        [result] = executor.collect(turn, timeout=10)
        rq_id = turn.plan.job_ids[0]
        job = Job.fetch(rq_id, connection=executor.client, serializer=JSONSerializer)
        assert result.content == "hi"
        assert job.get_status() == JobStatus.FINISHED
        assert rq_id in executor.queue.finished_job_registry.get_job_ids()
        assert job.latest_result() is None  # toolpool's result key is the one copy
        assert 0 < executor.client.ttl(job.key) <= settings.client.rq_record_ttl


def test_rq_info_shows_toolpools_queue_and_workers(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    rq_cli = Path(sys.executable).with_name("rq")

    def rq_info() -> str:
        done = subprocess.run(
            [str(rq_cli), "info", "-u", redis_url, "-S", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        for n in range(3):
            executor.submit([{"id": f"q{n}", "name": "echo", "arguments": {"text": "x"}}])
        worker = ToolpoolWorker(
            [executor.queue], connection=executor.client, serializer=JSONSerializer, name="w-info"
        )
        worker.register_birth()  # type: ignore[no-untyped-call]
        shown = rq_info()
        assert re.search(rf"{re.escape(executor.queue.name)}\s.*\b3\b", shown), shown
        assert "w-info" in shown
        worker.register_death()  # type: ignore[no-untyped-call]
        run_worker(redis_url, settings, dist_tools.registry(), name="w-drain", burst=True)
        assert re.search(rf"{re.escape(executor.queue.name)}\s.*\b0\b", rq_info())


def test_a_call_ends_in_one_round_trip_with_rqs_bookkeeping_intact(
    client: redis.Redis,
) -> None:
    queue, worker = _born(client, "ends", "w-end")
    job = queue.enqueue_call(func=ENTRY_POINT, args=({"call": {}},), job_id="last", result_ttl=60)
    execution = _started(worker, job)
    with _pipelines_sent(client) as sent:
        worker.handle_job_success(job, queue, queue.started_job_registry, execution)
    assert len(sent) == 1
    assert job.get_status(refresh=True) == JobStatus.FINISHED
    assert "last" in queue.finished_job_registry.get_job_ids()
    assert "last" not in queue.started_job_registry.get_job_ids()
    assert 0 < client.ttl(job.key) <= 60
    assert client.hget(worker.key, "successful_job_count") == b"1"
    assert client.hget(worker.key, "state") == b"idle"


def test_a_start_whose_reply_was_lost_is_sent_again_not_dropped(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis ran RQ's start transaction, then restarted before its reply: RQ alone would drop
    # the job, recorded started with nobody running it, and its call would wait for a timeout.
    monkeypatch.setattr(_patience, "RETRY_S", 0.0)
    queue, worker = _born(client, "q-lost-reply", "w-lost-reply")
    job = queue.enqueue_call(func=ENTRY_POINT, args=({},))
    original = redis.client.Pipeline.execute
    lost: list[int] = []

    def reply_lost_once(self: redis.client.Pipeline, raise_on_error: bool = True) -> Any:
        replies = original(self, raise_on_error)
        if bool(self.transaction) and not lost:  # the start is RQ's one MULTI/EXEC here
            lost.append(1)
            raise redis.ConnectionError("Connection closed by server.")
        return replies

    execution = worker.prepare_execution(job)
    monkeypatch.setattr(redis.client.Pipeline, "execute", reply_lost_once)
    worker.prepare_job_execution(job)
    monkeypatch.undo()
    assert lost == [1]
    assert job.get_status(refresh=True) == JobStatus.STARTED
    assert (job.id, execution.id) in queue.started_job_registry.get_job_and_execution_ids()
