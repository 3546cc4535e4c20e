"""A tool's two flags each do one job, on the client and on the worker.

``concurrency_safe`` decides batching (client) and the lock mode (worker); ``read_only``
decides approval (client) and what a read-only worker serves. A tool whose published entry
has no ``is_concurrency_safe`` at all, as a third-party worker may publish it, is exclusive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import Settings, Tool, ToolCall, ToolRegistry, tool
from executor.client import Executor
from executor.contract import ToolInfo, Workspace
from executor.lock import EXCLUSIVE, SHARED, RWLock
from executor.wire import CallJob, EventLog, Keys, WorkerCatalog, publish_catalog, read_catalog
from workers.pipeline._chain import CallState
from workers.pipeline._lock import LeaseGuard
from workers.pipeline._lock_loss import LockLoss
from workers.pool._process import served_registry


@tool(concurrency_safe=True, read_only=False)
def parallel_writer(text: str = "") -> str:
    """Safe to run beside others, but it changes things."""
    return text


@tool(concurrency_safe=False, read_only=True)
def serial_reader(text: str = "") -> str:
    """Changes nothing, but must run alone."""
    return text


MIXED = ToolRegistry([parallel_writer, serial_reader])
# Calls named by tool: p = parallel_writer, s = serial_reader.
NAMES = {"p": "parallel_writer", "s": "serial_reader"}


def _calls(spec: str) -> list[ToolCall]:
    return [ToolCall(id=f"{kind}{i}", name=NAMES[kind]) for i, kind in enumerate(spec)]


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_url, workspace=tmp_path)


def _publish(client: redis.Redis, executor: Executor, tools: list[ToolInfo]) -> None:
    entry = WorkerCatalog.build("w-pins", executor.queue.name, tools, host="h", pid=1)
    publish_catalog(client, executor.keys, entry)


def _publish_raw(client: redis.Redis, executor: Executor, tools: list[dict[str, Any]]) -> None:
    """An entry written as another worker might: tool fields left out where it has none."""
    entry = {
        "worker": "w-raw",
        "queue": executor.queue.name,
        "host": "h",
        "pid": 1,
        "tools": tools,
        "version": "raw",
        "published_at": time.time(),
    }
    client.set(executor.keys.catalog("w-raw"), json.dumps(entry), ex=60)
    client.sadd(executor.keys.catalog_index, "w-raw")


def _raw_tool(name: str, **flags: bool) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}, published without some flags",
        "parameters": {"type": "object", "properties": {}},
        "timeout": 30.0,
        **flags,
    }


# -- a published entry without the concurrency flag ---------------------------------------------


def test_a_tool_published_without_the_concurrency_flag_runs_alone(
    settings: Settings, client: redis.Redis
) -> None:
    with Executor(settings=settings) as executor:
        _publish_raw(
            client,
            executor,
            [_raw_tool("bare"), _raw_tool("declared_safe", is_concurrency_safe=True)],
        )
        catalog = read_catalog(client, executor.keys, executor.queue.name)
        assert catalog.get("bare").is_concurrency_safe is False
        assert catalog.get("declared_safe").is_concurrency_safe is True
        calls = [
            ToolCall(id=f"c{i}", name=name)
            for i, name in enumerate(["bare", "bare", "declared_safe", "declared_safe", "bare"])
        ]
        turn = executor.submit(calls)
    assert turn.plan.batches == [[0], [1], [2, 3], [4]]
    assert sorted(turn.plan.job_ids) == [0, 1, 2, 3, 4]


def test_a_tool_published_without_the_read_only_flag_is_asked_for_approval(
    settings: Settings, client: redis.Redis
) -> None:
    asked: list[str] = []

    def approve(call: ToolCall, info: ToolInfo) -> bool:
        asked.append(call.id)
        return True

    with Executor(settings=settings, approve=approve) as executor:
        _publish_raw(
            client, executor, [_raw_tool("bare"), _raw_tool("declared_ro", is_read_only=True)]
        )
        executor.submit([ToolCall(id="b", name="bare"), ToolCall(id="r", name="declared_ro")])
    assert asked == ["b"]


# -- flags that differ: batching follows concurrency_safe, approval follows read_only -------------


def _executor(settings: Settings, source: str, **options: Any) -> Executor:
    if source == "registry":
        return Executor(settings=settings, registry=MIXED, **options)
    return Executor(settings=settings, **options)


@pytest.fixture(params=["catalog", "registry"])
def source(request: pytest.FixtureRequest, client: redis.Redis, settings: Settings) -> str:
    """Where the client learns the tools: the workers' published catalog, or its own registry.

    Either way a worker entry is published: the client refuses to submit to a queue no live
    worker serves.
    """
    with Executor(settings=settings) as executor:
        _publish(client, executor, [ToolInfo.of(t) for t in MIXED])
    name: str = request.param
    return name


def test_batches_follow_concurrency_safe_not_read_only(settings: Settings, source: str) -> None:
    with _executor(settings, source) as executor:
        turn = executor.submit(_calls("ppsspp"))
    assert turn.plan.batches == [[0, 1], [2], [3], [4, 5]]


def test_approval_follows_read_only_not_concurrency_safe(settings: Settings, source: str) -> None:
    asked: list[tuple[str, bool, bool]] = []

    def approve(call: ToolCall, info: ToolInfo) -> bool:
        asked.append((call.id, info.is_concurrency_safe, info.is_read_only))
        return True

    with _executor(settings, source, approve=approve) as executor:
        turn = executor.submit(_calls("psps"))
    assert asked == [("p0", True, False), ("p2", True, False)]
    assert turn.plan.batches == [[0], [1], [2], [3]]


def test_without_auto_approval_every_call_is_asked(settings: Settings, source: str) -> None:
    asked: list[str] = []

    def approve(call: ToolCall, info: ToolInfo) -> bool:
        asked.append(call.id)
        return call.name == "parallel_writer"

    with _executor(settings, source, approve=approve, auto_approve_read_only=False) as executor:
        turn = executor.submit(_calls("pps"))
    assert asked == ["p0", "p1", "s2"]
    assert turn.plan.answered[2].content == "The user rejected this call."
    assert turn.plan.batches == [[0, 1]]


# -- the worker: the lock mode follows concurrency_safe, read-only serving follows read_only -----


@pytest.fixture
def rwlock(redis_url: str) -> Iterator[RWLock]:
    made = RWLock.from_url(redis_url, keys=Keys(), lease_ms=5000)
    yield made
    made.close()


def _state(tmp_path: Path, chosen: Tool) -> CallState:
    call = ToolCall(id="c1", name=chosen.name, arguments={})
    return CallState(
        call=call,
        registry=MIXED,
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=CallJob(call=call, turn_id="t1", index=0),
        tool=chosen,
        arguments={},
    )


def _no_barrier(root: Path) -> None:
    return None


@pytest.mark.parametrize(
    ("chosen", "mode"),
    [(parallel_writer, SHARED), (serial_reader, EXCLUSIVE)],
    ids=["parallel_writer-shared", "serial_reader-exclusive"],
)
def test_the_worker_locks_by_concurrency_safe_not_read_only(
    tmp_path: Path, rwlock: RWLock, client: redis.Redis, chosen: Tool, mode: str
) -> None:
    events = EventLog(client, Keys(), worker="w1")
    guard = LeaseGuard(
        rwlock,
        events,
        Settings(),
        worker_name="w1",
        barrier=_no_barrier,
        lock_loss=LockLoss(client, Keys(), events),
    )
    with guard.hold(_state(tmp_path, chosen)):
        [holder] = rwlock.status().holders
        assert (holder.mode, holder.owner.tool) == (mode, chosen.name)
        assert (holder.fence is None) is (mode == SHARED)
    assert not rwlock.status().holders


def test_a_read_only_worker_serves_by_read_only_not_concurrency_safe() -> None:
    served = served_registry(MIXED, read_only=True)
    assert served.names() == ["serial_reader"]
    assert "parallel_writer" in served.withheld
