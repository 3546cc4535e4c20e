"""A call delivered twice, the first delivery's claim dropped, runs once.

A failover can lose the last writes of the old primary: a worker's dequeue of a job and its
claim on the call. The job is then on the queue again, a second worker takes it and claims
the call, while the first still waits for the lock to run it. Both deliveries then wait for
the lock. At its grant each confirms its claim (``claim_hold.lua``): only the claim's holder
runs the tool; the other answers with that run's result.

Staged on a real redis-server with two real worker processes: the test holds the lock, so the
first delivery waits for it; then it does to Redis what such a failover leaves (the claim gone,
the job back on its queue), and lets the lock go once the second delivery waits too.

Oracle: the command ran once (one line in its log, one ``tool_execution_started``), the turn's
answer is that run's, and the delivery without the claim said it waited for the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from rq import Queue

from executor import Executor, Settings, ToolStatus
from executor._rq.jobs import call_queue, started_by
from executor.lock import RWLock
from executor.wire import Keys, job_id
from tests.support.procs import MakeWorkers, WorkerProcess, events, named
from tests.support.waiting import wait_for

pytestmark = pytest.mark.proof

KEYS = Keys()


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    # A heartbeat slower than the staging, so that nothing but the grant settles the claim.
    return Settings(
        redis_url=redis_url,
        workspace=root,
        call_heartbeat_s=60.0,
        call_liveness_s=180.0,
        lock_wait_timeout=120.0,
    )


def test_a_job_delivered_again_after_its_claim_was_lost_runs_once(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    workers = make_workers(settings).start(2)
    ran_log = settings.worker.workspace / "ran.log"
    call = {"id": "once", "name": "bash", "arguments": {"command": "echo ran >> ran.log"}}
    lock = RWLock.from_url(str(settings.redis.url), settings.worker.scope, keys=KEYS)
    held = lock.acquire_exclusive(timeout=60)
    try:
        with Executor(settings=settings) as executor:
            turn = executor.submit([call])

            def waiting_workers() -> set[str]:
                return {e.worker for e in named(events(client), "lock_wait", ["once"])}

            wait_for(lambda: len(waiting_workers()) == 1, "the first delivery to wait")
            [first] = waiting_workers()
            assert client.get(KEYS.running("once")) == first.encode()
            # What a failover that lost the old primary's last writes leaves behind.
            queue = call_queue(client, KEYS, settings.client.queue)
            client.delete(KEYS.running("once"))
            client.lpush(queue.key, job_id(turn.turn_id, 0))
            try:
                wait_for(lambda: len(waiting_workers()) == 2, "the second delivery to wait")
            except AssertionError as exc:
                # Seen once in a full run beside two CPU burners, never alone: what each side
                # was doing, for whoever meets it next.
                raise AssertionError(_staged(client, queue, workers, exc)) from None
            [second] = waiting_workers() - {first}
            assert client.get(KEYS.running("once")) == second.encode()
            held.release()
            [result] = executor.collect(turn, timeout=120)
            # Both deliveries over, so a run that comes after the answer is seen too.
            wait_for(
                lambda: not started_by(queue, first) and not started_by(queue, second),
                "both deliveries to end",
            )
    finally:
        if not held.released:
            held.release()
        lock.close()

    assert result.status is ToolStatus.OK, result.content
    assert ran_log.read_text() == "ran\n", "the command ran more than once"
    seen = events(client)
    [started] = named(seen, "tool_execution_started", ["once"])
    assert started.worker == second  # the claim's holder ran it
    [duplicate] = named(seen, "call_duplicate", ["once"])
    assert duplicate.worker == first


def _staged(client: redis.Redis, queue: Queue, workers: list[WorkerProcess], exc: Exception) -> str:
    """What the staging left: the queue, its intermediate list, the claim, each worker's log."""
    lines = [
        str(exc),
        f"queue {client.lrange(queue.key, 0, -1)!r}",
        f"intermediate {client.lrange(queue.intermediate_queue_key, 0, -1)!r}",
        f"claim {client.get(KEYS.running('once'))!r}",
        *(worker.diagnosis() for worker in workers),
    ]
    return "\n".join(lines)
