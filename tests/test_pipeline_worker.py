"""The worker's path as a whole, in this process: the steps in order, around a real lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import ErrorType, Settings, ToolCall, ToolContext, ToolRegistry, ToolStatus
from executor.lock import RWLock
from executor.wire import CallJob, Keys, ResultStore, read_events
from workers.pipeline import WorkerRuntime
from workers.pipeline._claim import Claim, skip_cancelled
from workers.pipeline._emit import Emit
from workers.pipeline._heartbeat import Heartbeat
from workers.pipeline._lock import lock
from workers.pipeline._lock_loss import restate
from workers.pipeline._runner import CALL_STEPS
from workers.pipeline._session import EnterSession
from workers.pipeline._store import Store
from workers.pipeline._validate import validate

KEYS = Keys()
registry = ToolRegistry()
runs: dict[str, int] = {}
#: The Redis the runtime fixture's worker uses, for the tools that reach into it.
redis_of: dict[str, str] = {}


@registry.tool(concurrency_safe=True, read_only=True)
def echo(text: str) -> str:
    """Repeat text."""
    runs["echo"] = runs.get("echo", 0) + 1
    return text


@registry.tool(read_only=True)
def loses_its_lease_once(ctx: ToolContext) -> str:
    """A read whose first run finds its lease gone (forced off), as a paused worker's does."""
    runs["lose"] = runs.get("lose", 0) + 1
    if runs["lose"] == 1:
        other = RWLock.from_url(redis_of["url"], keys=KEYS)
        try:
            for holder in other.status().holders:
                other.force_release(holder.token)
        finally:
            other.close()
        ctx.check_fence()  # the fence check finds the lease gone: the loss cancels the run
    return "consistent"


@registry.tool(concurrency_safe=True, read_only=True)
def peek(ctx: ToolContext) -> str:
    """The call's events in the stream as its tool runs."""
    client = redis.Redis.from_url(redis_of["url"])
    try:
        return ",".join(_names(client, ctx.call_id))
    finally:
        client.close()


@registry.tool(concurrency_safe=True, read_only=True)
def until_announced(ctx: ToolContext) -> str:
    """Runs until the stream holds its call's start (30 s at most): a tool that takes a while."""
    client = redis.Redis.from_url(redis_of["url"])
    try:
        for _ in range(3000):
            if "tool_execution_started" in _names(client, ctx.call_id):
                return "announced while running"
            threading.Event().wait(0.01)
        return "never announced while running"
    finally:
        client.close()


@pytest.fixture
def runtime(redis_url: str, tmp_path: Path) -> Iterator[WorkerRuntime]:
    root = tmp_path / "ws"
    root.mkdir()
    runs.clear()
    redis_of["url"] = redis_url
    settings = Settings(redis_url=redis_url, workspace=root, lock_lease_ms=5000)
    made = WorkerRuntime(redis_url, settings, registry, worker_name="w1")
    yield made
    made.close()


def _payload(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    call = ToolCall(id=call_id, name=name, arguments=arguments)
    return CallJob(call=call, turn_id="t1", index=0).model_dump(mode="json")


#: A call's events, in order, when it runs once under its lease.
_ONE_RUN = ["lock_acquired", "tool_execution_started", "lock_released", "tool_result"]


def _names(client: redis.Redis, call_id: str) -> list[str]:
    return [e.event for _, e in read_events(client, KEYS) if e.call_id == call_id]


def test_the_workers_steps_are_listed_in_order(runtime: WorkerRuntime) -> None:
    steps = runtime.steps
    kinds = [type(step) for step in steps[:5]]
    assert kinds[:2] == [Claim, Store]
    assert getattr(steps[2], "__name__", "") == "rerun"
    assert kinds[3:] == [Heartbeat, Emit]
    assert steps[5] is skip_cancelled
    assert isinstance(steps[6], EnterSession)
    assert steps[7:] == CALL_STEPS
    assert (validate, restate, lock) == CALL_STEPS


def test_a_call_is_run_under_the_lock_stored_and_recorded(
    runtime: WorkerRuntime, client: redis.Redis
) -> None:
    answer = runtime.execute(_payload("c1", "echo", text="hi"))
    assert (answer["status"], answer["content"]) == ("ok", "hi")
    stored = ResultStore(client, KEYS).get("c1")
    assert stored is not None
    assert stored.model_dump(mode="json") == answer
    assert _names(client, "c1") == _ONE_RUN
    assert not client.exists(KEYS.running("c1"), KEYS.worker_current("w1"))


def test_a_quick_calls_opening_events_go_with_its_result(
    runtime: WorkerRuntime, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However slow the tool thread is to start on a busy machine, the run step has not yet
    # given up waiting for it: nothing of the call is in the stream while it runs.
    monkeypatch.setattr("workers.pipeline._run.ANNOUNCE_AFTER_S", 60.0)
    answer = runtime.execute(_payload("c1", "peek"))
    assert (answer["status"], answer["content"]) == ("ok", "")
    assert _names(client, "c1") == _ONE_RUN


def test_a_tool_that_takes_a_while_is_announced_as_it_runs(
    runtime: WorkerRuntime, client: redis.Redis
) -> None:
    answer = runtime.execute(_payload("c1", "until_announced"))
    assert (answer["status"], answer["content"]) == ("ok", "announced while running")
    assert _names(client, "c1") == _ONE_RUN


def test_a_job_delivered_again_is_answered_without_running(
    runtime: WorkerRuntime, client: redis.Redis
) -> None:
    first = runtime.execute(_payload("c1", "echo", text="hi"))
    assert runtime.execute(_payload("c1", "echo", text="hi")) == first
    assert runs["echo"] == 1
    assert _names(client, "c1").count("tool_execution_started") == 1


def test_a_call_of_a_cancelled_turn_is_answered_and_recorded_without_running(
    runtime: WorkerRuntime, client: redis.Redis
) -> None:
    client.set(KEYS.turn_cancel("t1"), "1")
    answer = runtime.execute(_payload("c1", "echo", text="hi"))
    assert (answer["error_type"], answer["content"]) == (
        "cancelled",
        "'echo' did not run: its turn was cancelled.",
    )
    assert "echo" not in runs
    assert _names(client, "c1") == ["tool_result"]


def test_a_bad_call_is_answered_by_the_worker(runtime: WorkerRuntime, client: redis.Redis) -> None:
    answer = runtime.execute(_payload("c1", "echo", txt="x"))
    assert answer["error_type"] == ErrorType.INVALID_ARGUMENTS.value
    assert _names(client, "c1") == ["tool_result"]


def test_a_malformed_payload_fails_the_job(runtime: WorkerRuntime) -> None:
    with pytest.raises(ValueError, match="Malformed toolpool job payload"):
        runtime.execute({"junk": True})


def test_a_read_that_lost_its_lease_is_run_once_more_in_the_same_job(
    runtime: WorkerRuntime, client: redis.Redis
) -> None:
    answer = runtime.execute(_payload("r1", "loses_its_lease_once"))
    assert (answer["status"], answer["content"]) == (ToolStatus.OK.value, "consistent")
    assert runs["lose"] == 2
    assert _names(client, "r1") == [
        "lock_acquired",
        "tool_execution_started",
        "lock_lost",
        "lock_released",
        "tool_result",
        "call_rerun",
        "lock_acquired",
        "tool_execution_started",
        "lock_released",
        "tool_result",
    ]
    first_result = next(
        e for _, e in read_events(client, KEYS) if e.event == "tool_result" and e.call_id == "r1"
    )
    assert first_result.data["error_type"] == "lock_lost"


def test_calls_do_not_start_a_thread_each_beyond_the_tools(runtime: WorkerRuntime) -> None:
    runtime.execute(_payload("warm", "echo", text="x"))  # the heartbeat thread starts once
    before = threading.active_count()
    for index in range(5):
        runtime.execute(_payload(f"c{index}", "echo", text="x"))
    assert threading.active_count() == before
