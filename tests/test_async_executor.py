"""``AsyncExecutor`` from one asyncio event loop, on a real redis-server and real workers.

50 turns at once from one loop: every turn gets its results in order, and a heartbeat task
on the same loop keeps beating (its worst lag is printed, and must stay far below one call's
time, which is what a blocking client would cost it). The turns are waited for on the loop,
not on threads: the process's thread count stays far below the number of turns. Cancelling an
awaited ``run`` cancels the turn on the pool.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from pathlib import Path

import pytest
import redis

from executor import AsyncExecutor, NoWorkerError, Settings, ToolStatus
from executor.client._async import DEFAULT_THREADS
from executor.wire import Keys, ResultStore
from tests.support.procs import MakeWorkers
from tests.support.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.proof  # real worker processes

TURNS = 50
# Each turn's slow read takes this long on a worker: a client that blocked the loop for a
# turn would make the heartbeat late by at least as much.
DELAY_MS = 1200
# Threads submitting at once contend for the GIL with the loop: lags of a few hundred ms were
# seen on a busy machine. A client that blocked would cost at least DELAY_MS.
LAG_BOUND_S = 1.0


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    return Settings(redis_url=redis_url, workspace=workspace)


def test_fifty_turns_from_one_loop_keep_it_responsive(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(4)
    lags: list[float] = []
    threads: list[int] = []
    threads_before = threading.active_count()

    async def heartbeat(stop: asyncio.Event) -> None:
        while not stop.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - before - 0.01)
            threads.append(threading.active_count())

    async def main() -> list[list[str]]:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            stop = asyncio.Event()
            beating = asyncio.create_task(heartbeat(stop))
            turns = [
                ex.run(
                    [
                        {"id": f"t{i}-echo", "name": "echo", "arguments": {"text": str(i)}},
                        {
                            "id": f"t{i}-read",
                            "name": "slow_read",
                            "arguments": {"path": "a.txt", "delay_ms": DELAY_MS},
                        },
                    ],
                    timeout=PATIENCE_S * 4,
                )
                for i in range(TURNS)
            ]
            results = await asyncio.gather(*turns)
            stop.set()
            await beating
        return [
            [f"{r.call_id}={r.status.value}:{r.content.strip()}" for r in turn] for turn in results
        ]

    started = time.monotonic()
    answers = asyncio.run(main())
    took = time.monotonic() - started

    assert answers == [[f"t{i}-echo=ok:{i}", f"t{i}-read=ok:alpha"] for i in range(TURNS)]
    worst, typical = max(lags), statistics.median(lags)
    print(
        f"\n{TURNS} turns in {took:.1f} s; heartbeat every 10 ms: {len(lags)} beats, "
        f"median lag {typical * 1000:.1f} ms, worst {worst * 1000:.1f} ms; "
        f"at most {max(threads)} threads ({threads_before} before)"
    )
    assert worst < LAG_BOUND_S, f"the loop was blocked for {worst:.2f} s"
    # The submit threads, and asyncio's default pool running the liveness checks: a thread
    # per waiting turn would be 50 more.
    spare = DEFAULT_THREADS + min(32, (os.cpu_count() or 1) + 4)
    assert max(threads) <= threads_before + spare, (max(threads), threads_before, spare)


def test_cancelling_an_awaited_run_cancels_the_turn(
    settings: Settings, make_workers: MakeWorkers, tmp_path: Path, client: redis.Redis
) -> None:
    make_workers(settings).start(1)
    started = tmp_path / "started"
    arguments = {"path": "a.txt", "delay_ms": 10_000, "started": str(started)}
    call = {"id": "slow", "name": "slow_read", "arguments": arguments}

    async def main() -> None:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            running = asyncio.create_task(ex.run([call]))
            while not started.exists():  # the tool runs on the worker now
                await asyncio.sleep(0.02)
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running

    asyncio.run(main())
    # The worker's read saw the turn's cancel flag and stopped well before its 10 s.
    results = ResultStore(client, Keys())
    wait_for(lambda: results.get("slow") is not None, "the cancelled call's result")
    result = results.get("slow")
    assert result is not None
    assert result.status is ToolStatus.ERROR
    assert "cancelled" in result.content


def test_no_worker_is_an_error_at_once(settings: Settings) -> None:
    async def main() -> None:
        async with AsyncExecutor(settings=settings) as ex:
            await ex.run([{"name": "echo", "arguments": {"text": "x"}}])

    with pytest.raises(NoWorkerError):
        asyncio.run(main())
