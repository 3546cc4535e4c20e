"""Lock loss: restated answers ("did not run", lock_lost) and the one rerun of a read."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import cast

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor import (
    ErrorType,
    Settings,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolStatus,
    TruncationPolicy,
    tool,
)
from executor.contract import Workspace
from executor.lock import Lease
from executor.wire import CallJob, EventLog, Keys, read_events
from workers.pipeline._chain import CallState, Proceed
from workers.pipeline._lock_loss import LockLoss, restate


@tool(concurrency_safe=True, read_only=True)
def read() -> str:
    """Read."""
    return ""


@tool
def change() -> str:
    """Change something."""
    return ""


class _Held:
    def __init__(self, *, lost: bool, committed: bool = False) -> None:
        self.lost = lost
        self.committed = committed

    def check_fence(self) -> None:
        return None


def _state(tmp_path: Path, chosen: Tool = change, held: _Held | None = None) -> CallState:
    call = ToolCall(id="c1", name=chosen.name)
    state = CallState(
        call=call,
        registry=ToolRegistry([read, change]),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=CallJob(call=call, turn_id="t1", index=0),
        tool=chosen,
    )
    state.held = held
    return state


def _answering(
    error_type: ErrorType | None, text: str = "done", seen: list[CallState] | None = None
) -> Proceed:
    def proceed(state: CallState) -> ToolResult:
        if seen is not None:
            seen.append(state)
        status = ToolStatus.OK if error_type is None else ToolStatus.ERROR
        return ToolResult(
            call_id=state.call.id,
            name=state.call.name,
            status=status,
            content=text,
            error_type=error_type,
        )

    return proceed


# --- restate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("error_type", [None, ErrorType.TOOL_ERROR, ErrorType.CANCELLED])
def test_a_held_guard_or_none_leaves_the_answer_as_it_is(
    tmp_path: Path, error_type: ErrorType | None
) -> None:
    for held in (None, _Held(lost=False)):
        result = restate(_state(tmp_path, held=held), _answering(error_type))
        assert (result.error_type, result.content) == (error_type, "done")


def test_a_lease_lost_before_the_tool_started_is_did_not_run(tmp_path: Path) -> None:
    result = restate(_state(tmp_path, held=_Held(lost=True)), _answering(ErrorType.CANCELLED))
    assert result.error_type is ErrorType.LOCK_UNAVAILABLE
    assert result.content == (
        "'change' did not run: its lock lease ended before the tool started (its worker was "
        "paused or cut off from Redis). Call it again."
    )


@pytest.mark.parametrize(
    ("chosen", "advice"),
    [(read, "Call it again."), (change, "Check its effects before calling it again.")],
)
def test_a_success_under_a_lost_lease_is_lock_lost(
    tmp_path: Path, chosen: Tool, advice: str
) -> None:
    result = restate(_state(tmp_path, chosen, _Held(lost=True)), _answering(None))
    assert result.error_type is ErrorType.LOCK_LOST
    assert result.content == (
        f"{chosen.name!r} ran, but the lock was lost while it ran, so its result may be "
        f"inconsistent with concurrent changes. {advice}"
    )


def test_a_tool_error_under_a_lost_lease_says_both(tmp_path: Path) -> None:
    state = _state(tmp_path, held=_Held(lost=True))
    result = restate(state, _answering(ErrorType.TOOL_ERROR, "x" * 400))
    assert result.error_type is ErrorType.LOCK_LOST
    assert result.content.endswith(f"It ended with: {'x' * 300}")


@pytest.mark.parametrize(
    "error_type", [ErrorType.UNEXPECTED_ERROR, ErrorType.TIMEOUT, ErrorType.LOCK_LOST]
)
def test_other_errors_under_a_lost_lease_stay_as_they_are(
    tmp_path: Path, error_type: ErrorType
) -> None:
    result = restate(_state(tmp_path, held=_Held(lost=True)), _answering(error_type))
    assert (result.error_type, result.content) == (error_type, "done")


def test_a_commit_that_passed_the_fence_keeps_its_success(tmp_path: Path) -> None:
    held = _Held(lost=True, committed=True)
    result = restate(_state(tmp_path, held=held), _answering(None))
    assert (result.status, result.content) == (ToolStatus.OK, "done")


def test_a_restated_answer_is_cut_to_the_tools_limit(tmp_path: Path) -> None:
    state = _state(tmp_path, held=_Held(lost=True))
    state.settings = Settings(truncation=TruncationPolicy(default_max_chars=40))
    result = restate(state, _answering(None))
    assert result.error_type is ErrorType.LOCK_LOST
    assert result.truncated


# --- the worker's side: on_lost and the rerun --------------------------------------------------


def _stream(client: redis.Redis) -> list[tuple[str, dict[str, object]]]:
    return [(event.event, event.data) for _, event in read_events(client, Keys())]


def _loss(client: redis.Redis) -> LockLoss:
    return LockLoss(client, Keys(), EventLog(client, Keys(), worker="w1"))


def test_on_lost_cancels_the_run_and_records_the_loss(tmp_path: Path, client: redis.Redis) -> None:
    state = _state(tmp_path)

    class _Lease:
        fence = 7
        lost_reason = "a renewal found the lease gone"

    events = EventLog(client, Keys(), worker="w1")
    lost = LockLoss(client, Keys(), events).on_lost(state, "exclusive")
    lost(cast(Lease, _Lease()))
    assert state.cancelled.is_set()
    # Queued on the keeper thread, which must not wait on Redis; the call's emit writes it.
    assert _stream(client) == []
    events.flush()
    assert _stream(client) == [
        ("lock_lost", {"mode": "exclusive", "fence": 7, "reason": "a renewal found the lease gone"})
    ]


def test_a_read_that_lost_its_lease_runs_once_more_with_a_fresh_run(
    tmp_path: Path, client: redis.Redis
) -> None:
    seen: list[CallState] = []
    answers = iter([ErrorType.LOCK_LOST, None])

    def proceed(state: CallState) -> ToolResult:
        return _answering(next(answers), seen=seen)(state)

    first = _state(tmp_path, read)
    first.cancelled.set()
    result = _loss(client).rerun(first, proceed)
    assert (result.status, result.content) == (ToolStatus.OK, "done")
    assert len(seen) == 2
    assert seen[0] is first
    assert seen[1].call is first.call
    assert not seen[1].cancelled.is_set()  # its own cancel flag
    assert _stream(client) == [("call_rerun", {"reason": "lock_lost"})]


def test_a_read_is_run_again_only_once(tmp_path: Path, client: redis.Redis) -> None:
    seen: list[CallState] = []
    result = _loss(client).rerun(_state(tmp_path, read), _answering(ErrorType.LOCK_LOST, seen=seen))
    assert result.error_type is ErrorType.LOCK_LOST
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("chosen", "error_type"),
    [(change, ErrorType.LOCK_LOST), (read, None), (read, ErrorType.LOCK_UNAVAILABLE)],
)
def test_no_rerun_for_a_call_with_side_effects_or_a_read_that_did_not_lose(
    tmp_path: Path, client: redis.Redis, chosen: Tool, error_type: ErrorType | None
) -> None:
    seen: list[CallState] = []
    result = _loss(client).rerun(_state(tmp_path, chosen), _answering(error_type, seen=seen))
    assert result.error_type is error_type
    assert len(seen) == 1
    assert _stream(client) == []


def test_no_rerun_once_the_turn_is_cancelled(tmp_path: Path, client: redis.Redis) -> None:
    client.set(Keys().turn_cancel("t1"), "1")
    seen: list[CallState] = []
    result = _loss(client).rerun(_state(tmp_path, read), _answering(ErrorType.LOCK_LOST, seen=seen))
    assert result.error_type is ErrorType.LOCK_LOST
    assert len(seen) == 1


def test_no_rerun_of_a_tool_the_registry_does_not_hold(tmp_path: Path, client: redis.Redis) -> None:
    state = _state(tmp_path, read)
    state.registry = ToolRegistry([change])
    seen: list[CallState] = []
    _loss(client).rerun(state, _answering(ErrorType.LOCK_LOST, seen=seen))
    assert len(seen) == 1


def test_no_rerun_while_redis_is_away(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    away = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    seen: list[CallState] = []
    loss = LockLoss(away, Keys(), EventLog(None, Keys()))
    result = loss.rerun(_state(tmp_path, read), _answering(ErrorType.LOCK_LOST, seen=seen))
    assert result.error_type is ErrorType.LOCK_LOST
    assert len(seen) == 1
    away.close()
