"""Distributed execution on a real redis-server with real worker processes.

Each test starts its own worker processes (``tests.support.procs.Workers``: ``python -m
tests.support.procs`` running ``workers.pool._process.run_worker`` with
``tests.support.dist_tools:registry``) and stops them by PID.
What ran where and when is read back from the event stream the workers write: stream order
for "in a safe batch, every start before any result", and the lock events' intervals for "an
exclusive call overlaps no other call".
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import ErrorType, Settings, ToolResult, ToolStatus
from executor.client import Executor
from executor.lock import RWLock
from executor.wire import Keys
from tests.support import dist_tools
from tests.support.pids import ancestors, processes_with, sleep_marker
from tests.support.procs import (
    MakeWorkers,
    events,
    exclusive_overlaps,
    holds,
    named,
    wait_for_event,
)
from tests.support.waiting import wait_for

# A process-heavy proof (worker processes): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    return Settings(redis_url=redis_url, workspace=root, lock_lease_ms=3000)


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def _ok(result: ToolResult) -> str:
    assert result.status is ToolStatus.OK, (result.call_id, result.content)
    return result.content


def test_safe_batch_overlaps_write_runs_alone_and_is_seen(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    (settings.worker.workspace / "a.txt").write_text("alpha\n")
    (settings.worker.workspace / "b.txt").write_text("beta\n")
    pool = make_workers(settings)
    pool.start(2)
    calls = [
        _call("ra", "slow_read", path="a.txt"),
        _call("rb", "slow_read", path="b.txt"),
        _call("wc", "write_file", path="c.txt", content="written by wc"),
        _call("rc", "read_file", path="c.txt"),
    ]
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        results = executor.run(calls, timeout=60)

    assert [r.call_id for r in results] == ["ra", "rb", "wc", "rc"], pool.diagnosis()
    assert [_ok(r) for r in results[:2]] == ["alpha\n", "beta\n"]
    assert _ok(results[2]).startswith("Successfully wrote")
    assert _ok(results[3]) == "written by wc"

    stream = events(client)
    reads = [
        e
        for e in stream
        if e.call_id in {"ra", "rb"} and e.event in {"tool_execution_started", "tool_result"}
    ]
    assert [e.event for e in reads] == ["tool_execution_started"] * 2 + ["tool_result"] * 2
    starts, ends = reads[:2], reads[2:]
    assert max(e.ts for e in starts) < min(e.ts for e in ends)
    assert len({e.worker for e in starts}) == 2, "the two reads ran on one worker"

    found = {h.call_id: h for h in holds(stream)}
    assert set(found) == {"ra", "rb", "wc", "rc"}
    assert found["ra"].overlaps(found["rb"])
    assert found["wc"].mode == "exclusive"
    assert not [h for h in found.values() if h is not found["wc"] and h.overlaps(found["wc"])]
    assert found["wc"].end <= found["rc"].start


def _orchestrate(
    settings: Settings, tag: str, rounds: int, go: threading.Barrier
) -> list[list[ToolResult]]:
    """One orchestrator: ``rounds`` turns of reads, a write, a read of it and a bash."""
    out: list[list[ToolResult]] = []
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        go.wait(timeout=30)
        for r in range(rounds):
            mine = f"{tag}.txt"
            calls = [
                _call(f"{tag}{r}-r1", "slow_read", path="shared.txt", delay_ms=150),
                _call(f"{tag}{r}-r2", "slow_read", path="shared.txt", delay_ms=150),
                _call(f"{tag}{r}-w", "write_file", path=mine, content=f"{tag} round {r}"),
                _call(f"{tag}{r}-r3", "read_file", path=mine),
                _call(f"{tag}{r}-sh", "bash", command=f"sleep 0.05; cat {mine}"),
                _call(f"{tag}{r}-r4", "slow_read", path="shared.txt", delay_ms=100),
            ]
            out.append(executor.run(calls, timeout=90))
    return out


def test_two_orchestrators_exclusive_calls_never_overlap(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    (settings.worker.workspace / "shared.txt").write_text("shared\n")
    make_workers(settings).start(3)
    rounds = 3
    go = threading.Barrier(2)
    with ThreadPoolExecutor(2) as threads:
        futures = [threads.submit(_orchestrate, settings, tag, rounds, go) for tag in "xy"]
        turns = {tag: f.result(timeout=120) for tag, f in zip("xy", futures, strict=True)}

    for tag, results in turns.items():
        for r, turn in enumerate(results):
            contents = [_ok(result) for result in turn]
            # The exclusive calls of a turn ran in order, whatever the other orchestrator did.
            assert contents[3] == f"{tag} round {r}"
            assert f"{tag} round {r}" in contents[4]

    found = holds(events(client))
    assert len(found) == 2 * rounds * 6
    assert exclusive_overlaps(found) == []
    shared = [h for h in found if h.mode == "shared"]
    assert any(a.overlaps(b) for i, a in enumerate(shared) for b in shared[i + 1 :])
    assert len({h.worker for h in found}) == 3


def test_worker_truncates_one_megabyte_and_keeps_the_full_output(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(1)
    calls = [
        _call("zeros", "bash", command="head -c 1000000 /dev/zero | tr '\\0' a"),
        _call("lines", "bash", command="yes abcdefghi | head -c 1000000"),
    ]
    with Executor(settings=settings, registry=dist_tools.registry()) as executor:
        results = executor.run(calls, timeout=60)
        full = {r.call_id: executor.full_output(r.call_id) for r in results}

    marker = re.compile(
        r"\n\n\.\.\. \[(\d+) characters, (\d+) lines? dropped; "
        r"full output: toolpool output (\S+)\] \.\.\.\n\n"
    )
    limit = settings.truncation.default_max_chars
    head = int(limit * settings.truncation.head_ratio)
    for result in results:
        text = full[result.call_id]
        assert text is not None, f"no full output kept for {result.call_id}"
        assert len(text) == result.original_chars > 1_000_000
        assert result.truncated
        found = marker.search(_ok(result))
        assert found is not None, result.content[:3000]
        dropped = text[head : len(text) - (limit - head)]
        assert int(found.group(1)) == len(dropped) == result.dropped_chars
        assert int(found.group(2)) == dropped.count("\n") + 1 == result.dropped_lines
        assert found.group(3) == result.call_id
        assert result.content == text[:head] + found.group(0) + text[len(text) - (limit - head) :]
    assert "a" * 1_000_000 in str(full["zeros"])
    assert results[0].dropped_lines == 1
    assert str(full["lines"]).count("abcdefghi") == 100_000
    assert results[1].dropped_lines > 99_000


def test_sigkilled_worker_call_gets_worker_lost_and_the_turn_goes_on(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    fast = settings.with_changes(call_liveness_s=2.0, call_heartbeat_s=0.5, lock_lease_ms=1500)
    (fast.worker.workspace / "after.txt").write_text("still here")
    pool = make_workers(fast)
    [doomed] = pool.start(1)
    marker = sleep_marker()
    calls = [
        _call("long", "bash", command=f"sleep {marker}", timeout=60),
        _call("next", "read_file", path="after.txt"),
    ]
    lock = RWLock.from_url(str(fast.redis.url), fast.worker.scope, keys=Keys(), lease_ms=1500)
    with Executor(settings=fast, registry=dist_tools.registry()) as executor:
        turn = executor.submit(calls)
        wait_for_event(client, "tool_execution_started", "long")
        # The sleep itself, under this worker: a first call may start short-lived children
        # first (the sandbox's probe), which are no sign that the command runs.
        wait_for(
            lambda: any(doomed.pid in ancestors(pid) for pid in processes_with(marker)),
            "the worker's bash to run its sleep",
        )
        collected: list[list[ToolResult]] = []
        collector = threading.Thread(
            target=lambda: collected.append(executor.collect(turn, timeout=60))
        )
        collector.start()
        orphans = pool.kill(doomed)
        killed_at = time.time()
        try:
            wait_for(
                lambda: not lock.status().holders, "the dead worker's lease to end", timeout=5.0
            )
            freed_after = time.time() - killed_at
            pool.start(1)
        finally:
            collector.join(timeout=90)
            lock.close()

    assert orphans, "the worker was not running the bash call when it was killed"
    assert freed_after <= 1.5 + 0.5
    [results] = collected
    lost, after = results
    assert lost.error_type is ErrorType.WORKER_LOST, lost.content
    assert "stopped" in lost.content
    assert "check its effects" in lost.content
    assert _ok(after) == "still here"
    [reported] = named(events(client), "call_lost", ["long"])
    # The liveness key outlives the worker by up to call_liveness_s; the client then allows
    # two heartbeats of grace, and it looks once a second.
    assert (
        reported.ts - killed_at
        <= fast.client.call_liveness_s + 2 * fast.client.call_heartbeat_s + 2.0
    )


def test_worker_answers_unknown_tool_invalid_arguments_and_timeout_then_serves(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    make_workers(settings).start(1)
    # The orchestrator's registry lets these calls through; the worker's refuses them.
    calls = [
        _call("g", "ghost"),
        _call("bad", "echo", text=["not", "a", "string"]),
        _call("slow", "stall"),
        _call("fine", "echo", text="still serving"),
        _call("write", "write_file", path="w.txt", content="exclusive again"),
    ]
    with Executor(settings=settings, registry=dist_tools.client_registry()) as executor:
        results = executor.run(calls, timeout=60)

    ghost, bad, slow, fine, write = results
    assert ghost.error_type is ErrorType.UNKNOWN_TOOL
    assert "Unknown tool 'ghost'" in ghost.content
    assert "slow_read" in ghost.content  # the worker lists the tools it has
    assert bad.error_type is ErrorType.INVALID_ARGUMENTS
    assert "Invalid arguments for tool 'echo'" in bad.content
    assert "text" in bad.content
    assert slow.error_type is ErrorType.TIMEOUT
    assert f"did not finish within {dist_tools.STALL_LIMIT_S:g} s" in slow.content
    assert slow.duration_ms < dist_tools.STALL_SLEEP_S * 1000 / 2
    assert _ok(fine) == "still serving"
    assert _ok(write).startswith("Successfully wrote")
    assert (settings.worker.workspace / "w.txt").read_text() == "exclusive again"
    answered = named(events(client), "tool_result")
    assert [e.call_id for e in answered] == ["g", "bad", "slow", "fine", "write"]
    assert len({e.worker for e in answered}) == 1
