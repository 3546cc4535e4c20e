"""Lock: the step holds the call's guard around the run; the worker's guard is a lease.

Only a failure to enter the guard answers "did not run"; leaving it never changes the answer.
The lease guard takes the lock shared or exclusive, passes the commit barrier, announces the
grant, and gives the lease back (announced in the events it queues).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import (
    ErrorType,
    FenceError,
    Settings,
    Tool,
    ToolCall,
    ToolError,
    ToolRegistry,
    ToolResult,
    ToolStatus,
    tool,
)
from executor.contract import Workspace
from executor.lock import EXCLUSIVE, SHARED, RWLock
from executor.wire import CallJob, EventLog, Keys, ResultStore, read_events
from workers._commit import CommitBusy
from workers.pipeline._chain import CallState, Held
from workers.pipeline._lock import LeaseGuard, lock
from workers.pipeline._lock_loss import LockLoss
from workers.pipeline._store import Store


@tool(concurrency_safe=True, read_only=True)
def reader(text: str = "") -> str:
    """Read."""
    return text


@tool
def writer() -> str:
    """Write."""
    return "wrote"


class _Held:
    committed = False
    lost = False

    def check_fence(self) -> None:
        return None


def _state(tmp_path: Path, chosen: Tool = writer, **arguments: object) -> CallState:
    call = ToolCall(id="c1", name=chosen.name, arguments=arguments)
    return CallState(
        call=call,
        registry=ToolRegistry([chosen]),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=CallJob(call=call, turn_id="t1", index=0),
        tool=chosen,
        arguments=dict(arguments),
    )


def _ok(state: CallState) -> ToolResult:
    return ToolResult(
        call_id=state.call.id, name=state.call.name, status=ToolStatus.OK, content="ran"
    )


# --- the step --------------------------------------------------------------------------------


def test_without_a_guard_the_run_goes_on_unguarded(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert lock(state, _ok).content == "ran"
    assert state.held is None


def test_the_run_goes_on_under_the_guard_and_leaves_it_after(tmp_path: Path) -> None:
    seen: list[str] = []
    held = _Held()

    @contextmanager
    def guard(state: CallState) -> Iterator[Held]:
        seen.append("enter")
        yield held
        seen.append("leave")

    def body(state: CallState) -> ToolResult:
        assert state.held is held
        seen.append("run")
        return _ok(state)

    state = _state(tmp_path)
    state.guard = guard
    assert lock(state, body).content == "ran"
    assert seen == ["enter", "run", "leave"]


def test_a_guard_not_had_answers_did_not_run(tmp_path: Path) -> None:
    def guard(state: CallState) -> AbstractContextManager[Held]:
        raise ToolError("No lock within 300 s.")

    def body(state: CallState) -> ToolResult:
        raise AssertionError("the tool must not run")

    state = _state(tmp_path)
    state.guard = guard
    result = lock(state, body)
    assert result.error_type is ErrorType.LOCK_UNAVAILABLE
    assert result.content == "'writer' did not run: No lock within 300 s. Try again later."
    assert state.held is None


def test_a_guard_that_fails_otherwise_is_a_bug_and_raises(tmp_path: Path) -> None:
    def guard(state: CallState) -> AbstractContextManager[Held]:
        raise redis.ConnectionError("gone")

    state = _state(tmp_path)
    state.guard = guard
    with pytest.raises(redis.ConnectionError):
        lock(state, _ok)


def test_leaving_the_guard_badly_is_logged_and_the_answer_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    @contextmanager
    def guard(state: CallState) -> Iterator[Held]:
        yield _Held()
        raise ToolError("could not release")

    state = _state(tmp_path)
    state.guard = guard
    with caplog.at_level(logging.ERROR, logger="workers.pipeline._lock"):
        assert lock(state, _ok).content == "ran"
    assert "leaving the guard of call c1 failed" in caplog.text


def test_the_guard_is_left_when_the_run_raises(tmp_path: Path) -> None:
    left = threading.Event()

    @contextmanager
    def guard(state: CallState) -> Iterator[Held]:
        try:
            yield _Held()
        finally:
            left.set()

    def body(state: CallState) -> ToolResult:
        raise KeyboardInterrupt  # what RQ's job timeout does to the main thread

    state = _state(tmp_path)
    state.guard = guard
    with pytest.raises(KeyboardInterrupt):
        lock(state, body)
    assert left.is_set()


# --- the lease guard -------------------------------------------------------------------------


@pytest.fixture
def rwlock(redis_url: str) -> Iterator[RWLock]:
    made = RWLock.from_url(redis_url, keys=Keys(), lease_ms=5000)
    yield made
    made.close()


def _names(client: redis.Redis) -> list[str]:
    return [event.event for _, event in read_events(client, Keys())]


class _Events(EventLog):
    """The stream's log, which also tells the test when the guard starts waiting."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, Keys(), worker="w1")
        self.redis = client
        self.waiting = threading.Event()

    def emit(
        self, event: str, *, call_id: str = "", turn_id: str = "", tool: str = "", **data: Any
    ) -> None:
        super().emit(event, call_id=call_id, turn_id=turn_id, tool=tool, **data)
        if event == "lock_wait":
            self.waiting.set()


def _no_barrier(root: Path) -> None:
    return None


def _lease_guard(
    rwlock: RWLock,
    events: _Events,
    settings: Settings | None = None,
    barrier: Callable[[Path], None] = _no_barrier,
) -> LeaseGuard:
    return LeaseGuard(
        rwlock,
        events,
        settings or Settings(),
        worker_name="w1",
        barrier=barrier,
        lock_loss=LockLoss(events.redis, Keys(), events),
    )


@pytest.fixture
def events(client: redis.Redis) -> _Events:
    return _Events(client)


@pytest.mark.parametrize(("chosen", "mode"), [(writer, EXCLUSIVE), (reader, SHARED)])
def test_the_lease_is_exclusive_unless_the_tool_is_concurrency_safe(
    tmp_path: Path, rwlock: RWLock, events: _Events, chosen: Tool, mode: str
) -> None:
    with _lease_guard(rwlock, events).hold(_state(tmp_path, chosen)) as held:
        [holder] = rwlock.status().holders
        assert (holder.mode, holder.owner.call_id, holder.owner.worker) == (mode, "c1", "w1")
        assert not held.lost
    assert not rwlock.status().holders


def test_the_grant_is_announced_before_the_run_and_the_release_queued_after(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    with _lease_guard(rwlock, events).hold(_state(tmp_path, reader, text="x" * 5000)):
        assert _names(client) == ["lock_acquired", "tool_execution_started"]
    assert _names(client) == ["lock_acquired", "tool_execution_started"]  # queued, not sent
    events.flush()
    stream = [event for _, event in read_events(client, Keys())]
    assert [event.event for event in stream] == [
        "lock_acquired",
        "tool_execution_started",
        "lock_released",
    ]
    acquired, started, released = stream
    assert acquired.data["mode"] == SHARED
    assert acquired.data["waited_ms"] >= 0
    assert (acquired.turn_id, acquired.call_id, acquired.tool) == ("t1", "c1", "reader")
    assert len(started.data["arguments"]["text"]) < 2100  # long arguments are cut for events
    assert released.data["held"] is True
    assert released.data["released_at"] <= released.ts


def test_a_busy_lock_is_waited_for_and_said_so(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis, redis_url: str
) -> None:
    other = RWLock.from_url(redis_url, keys=Keys(), lease_ms=5000)
    blocker = other.acquire(EXCLUSIVE, timeout=0)
    granted = threading.Event()
    failures: list[BaseException] = []

    def take() -> None:
        try:
            with _lease_guard(rwlock, events).hold(_state(tmp_path)):
                granted.set()
        except BaseException as exc:
            failures.append(exc)

    taker = threading.Thread(target=take)
    taker.start()
    try:
        assert events.waiting.wait(30), "the guard did not say it waits"
        assert not granted.is_set()
    finally:
        blocker.release()
        taker.join(30)
        other.close()
    assert not failures
    assert granted.is_set()
    assert _names(client)[:3] == ["lock_wait", "lock_acquired", "tool_execution_started"]


def test_no_lock_within_the_wait_is_did_not_run(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis, redis_url: str
) -> None:
    other = RWLock.from_url(redis_url, keys=Keys(), lease_ms=5000)
    blocker = other.acquire(EXCLUSIVE, timeout=0)
    state = _state(tmp_path)
    state.guard = _lease_guard(rwlock, events, Settings(lock_wait_timeout=0.1)).hold
    try:
        result = lock(state, _ok)
    finally:
        blocker.release()
        other.close()
    assert result.error_type is ErrorType.LOCK_UNAVAILABLE
    assert result.content.startswith("'writer' did not run: ")
    assert _names(client) == ["lock_wait"]


def test_a_barrier_that_fails_gives_the_lease_back_unannounced(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    def busy(root: Path) -> None:
        raise CommitBusy("Another call has been committing a write; nothing was changed.")

    state = _state(tmp_path)
    state.guard = _lease_guard(rwlock, events, barrier=busy).hold
    result = lock(state, _ok)
    events.flush()
    assert result.error_type is ErrorType.LOCK_UNAVAILABLE
    assert "did not run: Another call has been committing" in result.content
    assert not rwlock.status().holders
    assert _names(client) == []


def test_the_barrier_is_passed_after_the_grant_and_before_its_announcement(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    seen: list[tuple[int, list[str]]] = []

    def barrier(root: Path) -> None:
        seen.append((len(rwlock.status().holders), _names(client)))

    with _lease_guard(rwlock, events, barrier=barrier).hold(_state(tmp_path)):
        pass
    assert seen == [(1, [])]


def test_a_lost_lease_cancels_the_run_and_fails_its_fence(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    state = _state(tmp_path)
    with _lease_guard(rwlock, events).hold(state) as held:
        [holder] = rwlock.status().holders
        rwlock.force_release(holder.token)
        with pytest.raises(FenceError, match="lost the exclusive lock"):
            held.check_fence()
        assert held.lost
        assert not held.committed
        assert state.cancelled.is_set()
    events.flush()
    stream = [event for _, event in read_events(client, Keys())]
    [lost] = [event for event in stream if event.event == "lock_lost"]
    assert (lost.call_id, lost.data["mode"]) == ("c1", EXCLUSIVE)
    assert "fence check" in lost.data["reason"]
    [released] = [event for event in stream if event.event == "lock_released"]
    assert released.data["held"] is False


def test_a_fence_check_that_passes_marks_the_run_committed(
    tmp_path: Path, rwlock: RWLock, events: _Events
) -> None:
    for chosen in (writer, reader):
        with _lease_guard(rwlock, events).hold(_state(tmp_path, chosen)) as held:
            assert not held.committed
            held.check_fence()
            assert held.committed


def test_a_shared_lease_lost_fails_its_fence_too(
    tmp_path: Path, rwlock: RWLock, events: _Events
) -> None:
    state = _state(tmp_path, reader)
    with _lease_guard(rwlock, events).hold(state) as held:
        [holder] = rwlock.status().holders
        rwlock.force_release(holder.token)
        # A shared lease has no fence: its loss shows at the keeper's next renewal.
        assert state.cancelled.wait(30), "the loss was not noticed"
        with pytest.raises(FenceError, match="The shared lock was lost"):
            held.check_fence()
        assert not held.committed


# --- the release sent with the result ----------------------------------------------------------


def _store(client: redis.Redis, events: _Events) -> Store:
    return Store(ResultStore(client, Keys()), events)


def test_under_a_store_step_the_release_goes_with_the_result(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    state = _state(tmp_path)
    guard = _lease_guard(rwlock, events)
    seen: list[int] = []

    def run(state: CallState) -> ToolResult:
        with guard.hold(state):
            pass
        # Left the guard: the lease is still held, its release waits for the store.
        seen.append(len(rwlock.status().holders))
        return _ok(state)

    assert _store(client, events)(state, run).content == "ran"
    assert seen == [1]
    assert not rwlock.status().holders
    names = _names(client)
    assert names[-1] == "lock_released"
    [(_, released)] = [
        item for item in read_events(client, Keys()) if item[1].event == "lock_released"
    ]
    assert released.data["held"] is True
    assert ResultStore(client, Keys()).get("c1") is not None


def test_steps_that_raise_after_the_guard_still_release_the_lease(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    guard = _lease_guard(rwlock, events)

    def run(state: CallState) -> ToolResult:
        with guard.hold(state):
            pass
        raise RuntimeError("a step failed after the run")

    with pytest.raises(RuntimeError, match="after the run"):
        _store(client, events)(_state(tmp_path), run)
    assert not rwlock.status().holders


def test_a_store_that_cannot_reach_redis_releases_the_lease_alone(
    tmp_path: Path,
    rwlock: RWLock,
    events: _Events,
    client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_execute = redis.client.Pipeline.execute
    failed: list[bool] = []

    def cut_once(pipe: redis.client.Pipeline, raise_on_error: bool = True) -> list[object]:
        if not failed:
            failed.append(True)
            pipe.reset()
            raise redis.ConnectionError("cut")
        return real_execute(pipe, raise_on_error)

    guard = _lease_guard(rwlock, events)

    def run(state: CallState) -> ToolResult:
        with guard.hold(state):
            pass
        monkeypatch.setattr(redis.client.Pipeline, "execute", cut_once)
        return _ok(state)

    assert _store(client, events)(_state(tmp_path), run).content == "ran"
    assert failed == [True]
    assert not rwlock.status().holders
    assert ResultStore(client, Keys()).get("c1") is not None


def test_a_release_forced_first_is_reported_after_the_result(
    tmp_path: Path, rwlock: RWLock, events: _Events, client: redis.Redis
) -> None:
    guard = _lease_guard(rwlock, events)

    def run(state: CallState) -> ToolResult:
        with guard.hold(state):
            [holder] = rwlock.status().holders
        rwlock.force_release(holder.token)
        return _ok(state)

    assert _store(client, events)(_state(tmp_path), run).content == "ran"
    lost = [event for _, event in read_events(client, Keys()) if event.event == "lock_lost"]
    assert [event.data["after_release"] for event in lost] == [True]
