"""Read-only calls that lose their lease are run once more by their worker; others never.

A read-only call changes nothing, so when its lease is lost while it runs (its worker was
paused, or cut off from Redis, past the lease) the worker runs it again under a new lease,
once, in the same job, so the turn's order holds. A call with side effects is answered
``lock_lost`` and never re-run.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from executor import ErrorType, Settings
from executor.client import Executor
from tests.support import dist_tools
from tests.support.expect import ok
from tests.support.procs import Workers, events, named, wait_for_event
from tests.support.waiting import wait_for

pytestmark = pytest.mark.proof  # worker processes paused past their leases

LEASE_MS = 800


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("content")
    return Settings(
        redis_url=redis_url, workspace=root, lock_lease_ms=LEASE_MS, call_liveness_s=60.0
    )


@pytest.fixture
def pool(settings: Settings, tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(settings, tmp_path / "workers")
    try:
        yield workers
    finally:
        for worker in workers.started:
            if worker.alive():
                os.kill(worker.pid, signal.SIGCONT)
        workers.stop_all()


def _pause_past_the_lease(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(LEASE_MS / 1000 * 2)
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_read_that_lost_its_lease_is_run_again_and_answers(
    settings: Settings, pool: Workers, client: redis.Redis
) -> None:
    [worker] = pool.start(1)
    started = Path(settings.worker.workspace).parent / "started"
    call = {
        "id": "r",
        "name": "slow_read",
        "arguments": {"path": "a.txt", "delay_ms": 2000, "started": str(started)},
    }
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        turn = executor.submit([call])
        # The tool itself runs (not only its start event): the pause lands inside the read.
        wait_for(started.exists, "slow_read to run")
        _pause_past_the_lease(worker.pid)
        [result] = executor.collect(turn, timeout=60)

    assert ok(result) == "content"
    seen = events(client)
    [rerun] = named(seen, "call_rerun", ["r"])
    assert rerun.data["reason"] == "lock_lost"
    assert len(named(seen, "tool_execution_started", ["r"])) == 2
    assert len(named(seen, "lock_lost", ["r"])) == 1


def test_a_call_with_side_effects_that_lost_its_lease_is_not_run_again(
    settings: Settings, pool: Workers, client: redis.Redis
) -> None:
    [worker] = pool.start(1)
    call = {"id": "b", "name": "bash", "arguments": {"command": "echo ran >> runs.txt; sleep 3"}}
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        turn = executor.submit([call])
        # bash itself runs (it wrote its line), not only its start event.
        wait_for((Path(settings.worker.workspace) / "runs.txt").exists, "bash to run")
        _pause_past_the_lease(worker.pid)
        [result] = executor.collect(turn, timeout=60)

    assert result.error_type is ErrorType.LOCK_LOST, result.content
    assert "check its effects" in result.content.lower()
    assert (Path(settings.worker.workspace) / "runs.txt").read_text() == "ran\n"
    seen = events(client)
    assert not named(seen, "call_rerun", ["b"])
    assert len(named(seen, "tool_execution_started", ["b"])) == 1


def test_a_job_delivered_twice_runs_once_and_its_second_delivery_waits_for_the_result(
    settings: Settings, pool: Workers, client: redis.Redis
) -> None:
    # RQ can deliver a job again (its maintenance puts back jobs it thinks stuck): the second
    # delivery must neither run the call nor end the job before the first run has answered.
    pool.start(2)
    call = {"id": "d", "name": "slow_read", "arguments": {"path": "a.txt", "delay_ms": 1500}}
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        write = {"id": "next", "name": "write_file", "arguments": {"path": "b", "content": "x"}}
        turn = executor.submit([call, write])  # the write waits for the read
        wait_for_event(client, "tool_execution_started", "d")
        executor.queue.push_job_id(turn.plan.job_ids[0])
        wait_for_event(client, "call_duplicate", "d")
        first, after = executor.collect(turn, timeout=60)

    assert ok(first) == "content"
    assert ok(after) == "Successfully wrote 1 bytes to b"
    seen = events(client)
    assert len(named(seen, "tool_execution_started", ["d"])) == 1
    [result] = named(seen, "tool_result", ["d"])
    [started_next] = named(seen, "tool_execution_started", ["next"])
    assert started_next.ts > result.ts  # the turn's order held
