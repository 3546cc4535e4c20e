"""Claim: one round trip to start; a second delivery waits; the claim is let go at the end."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from executor import ErrorType, Settings, ToolCall, ToolRegistry, ToolResult, ToolStatus, _patience
from executor import _texts as texts
from executor.contract import Workspace
from executor.wire import CallJob, EventLog, Keys, ResultStore, read_events
from workers.pipeline._chain import CallState
from workers.pipeline._claim import Claim, skip_cancelled
from workers.pipeline._heartbeat import Heartbeat
from workers.pipeline._store import Store

KEYS = Keys()
CALL = ToolCall(id="c1", name="t")
JOB = CallJob(call=CALL, turn_id="t1", index=0)


class _Events(EventLog):
    """The stream's log, which also tells the test when a second delivery starts waiting."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, KEYS, worker="w1")
        self.duplicate = threading.Event()

    def emit(
        self, event: str, *, call_id: str = "", turn_id: str = "", tool: str = "", **data: Any
    ) -> None:
        super().emit(event, call_id=call_id, turn_id=turn_id, tool=tool, **data)
        if event == "call_duplicate":
            self.duplicate.set()


@pytest.fixture
def events(client: redis.Redis) -> _Events:
    return _Events(client)


def _claim(client: redis.Redis, events: EventLog, settings: Settings | None = None) -> Claim:
    store = Store(ResultStore(client, KEYS), events)
    return Claim(client, KEYS, settings or Settings(), events, store, worker_name="w1")


def _state(tmp_path: Path) -> CallState:
    return CallState(
        call=CALL,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=JOB,
    )


def _result(text: str) -> ToolResult:
    return ToolResult(call_id=CALL.id, name=CALL.name, status=ToolStatus.OK, content=text)


def _never(state: CallState) -> ToolResult:
    raise AssertionError("this delivery must not run the call")


def test_the_first_delivery_claims_the_call_runs_it_and_lets_go(
    tmp_path: Path, client: redis.Redis, events: _Events
) -> None:
    inside: list[tuple[Any, Any]] = []

    def proceed(state: CallState) -> ToolResult:
        inside.append((client.get(KEYS.running("c1")), client.get(KEYS.worker_current("w1"))))
        return _result("ran")

    assert _claim(client, events)(_state(tmp_path), proceed).content == "ran"
    [(running, current)] = inside
    assert running == b"w1"
    assert CallJob.model_validate_json(current) == JOB
    assert not client.exists(KEYS.running("c1"), KEYS.worker_current("w1"))


def test_the_start_is_one_round_trip(
    tmp_path: Path, client: redis.Redis, events: _Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    original: Any = AbstractConnection.send_packed_command

    def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        sent.append(1)
        original(self, command, check_health)

    claim = _claim(client, events)
    client.ping()  # connected beforehand, as a worker is
    counts: list[int] = []

    def proceed(state: CallState) -> ToolResult:
        counts.append(len(sent))
        return _result("ran")

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    claim(_state(tmp_path), proceed)
    monkeypatch.undo()
    assert counts == [1]


def test_a_cancelled_turn_sets_the_runs_cancel_flag(
    tmp_path: Path, client: redis.Redis, events: _Events
) -> None:
    client.set(KEYS.turn_cancel("t1"), "1")
    flags: list[bool] = []

    def proceed(state: CallState) -> ToolResult:
        flags.append(state.cancelled.is_set())
        return _result("ran")

    _claim(client, events)(_state(tmp_path), proceed)
    assert flags == [True]


def test_a_job_delivered_again_after_its_answer_gets_the_stored_result(
    tmp_path: Path, client: redis.Redis, events: _Events
) -> None:
    ResultStore(client, KEYS).publish("t1", _result("first"))
    assert _claim(client, events)(_state(tmp_path), _never).content == "first"
    assert not client.exists(KEYS.running("c1"), KEYS.worker_current("w1"))


def _second_delivery(claim: Claim, tmp_path: Path) -> tuple[threading.Thread, list[ToolResult]]:
    answers: list[ToolResult] = []
    waiter = threading.Thread(target=lambda: answers.append(claim(_state(tmp_path), _never)))
    waiter.start()
    return waiter, answers


def test_a_second_delivery_waits_for_the_first_runs_result(
    tmp_path: Path, client: redis.Redis, events: _Events
) -> None:
    client.set(KEYS.running("c1"), "w0")  # the first delivery runs on w0
    waiter, answers = _second_delivery(_claim(client, events), tmp_path)
    assert events.duplicate.wait(30), "the second delivery did not say it waits"
    assert not client.exists(KEYS.worker_current("w1"))
    ResultStore(client, KEYS).publish("t1", _result("from w0"))
    waiter.join(30)
    assert [answer.content for answer in answers] == ["from w0"]
    assert client.get(KEYS.running("c1")) == b"w0"  # not its claim to let go
    [duplicate] = [event for _, event in read_events(client, KEYS)]
    assert (duplicate.event, duplicate.call_id, duplicate.turn_id) == ("call_duplicate", "c1", "t1")


def test_a_second_delivery_answers_worker_lost_when_the_first_run_dies(
    tmp_path: Path, client: redis.Redis, events: _Events
) -> None:
    client.set(KEYS.running("c1"), "w0")
    claim = _claim(client, events, Settings(call_heartbeat_s=0.05))
    waiter, answers = _second_delivery(claim, tmp_path)
    assert events.duplicate.wait(30)
    client.delete(KEYS.running("c1"))  # w0 died: its liveness key expired
    waiter.join(30)
    [answer] = answers
    assert answer.error_type is ErrorType.WORKER_LOST
    assert answer.content == texts.worker_lost("t")  # the words the collector uses
    stored = ResultStore(client, KEYS).get("c1")
    assert stored is not None
    assert stored.error_type is ErrorType.WORKER_LOST


def test_the_claim_is_let_go_when_the_run_raises(
    tmp_path: Path, client: redis.Redis, events: _Events
) -> None:
    def proceed(state: CallState) -> ToolResult:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _claim(client, events)(_state(tmp_path), proceed)
    assert not client.exists(KEYS.running("c1"), KEYS.worker_current("w1"))


def test_a_cancelled_run_does_not_start(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.cancelled.set()
    result = skip_cancelled(state, _never)
    assert result.error_type is ErrorType.CANCELLED
    assert result.content == "'t' did not run: its turn was cancelled."
    assert skip_cancelled(_state(tmp_path), lambda state: _result("ran")).content == "ran"


def test_a_start_whose_reply_was_lost_is_tried_again_and_still_claims(
    tmp_path: Path, client: redis.Redis, events: _Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis ran the start's commands but the reply never came (a restart at that moment): the
    # retry finds the claim already set, by this worker, and runs the call once.
    monkeypatch.setattr(_patience, "RETRY_S", 0.0)
    original = redis.client.Pipeline.execute
    lost: list[int] = []

    def reply_lost_once(self: redis.client.Pipeline, raise_on_error: bool = True) -> Any:
        replies = original(self, raise_on_error)
        if not lost:
            lost.append(1)
            raise redis.ConnectionError("Connection closed by server.")
        return replies

    monkeypatch.setattr(redis.client.Pipeline, "execute", reply_lost_once)
    ran: list[int] = []

    def proceed(state: CallState) -> ToolResult:
        ran.append(1)
        return _result("ran")

    assert _claim(client, events)(_state(tmp_path), proceed).content == "ran"
    assert lost == [1]
    assert ran == [1]
    assert not events.duplicate.is_set()


# -- Two deliveries that both claimed the call (a failover dropped one's claim and put the job
# back): at the lock grant (``confirm_claim``) only the holder of the claim runs the tool.


# How the claim's check reaches Redis at the grant: riding on the grant's round trip (as the
# lock sends it), riding on one whose server lost the script (the check then asks alone), or
# never sent with a grant at all.
GRANT_WAYS = ("ride", "script lost", "alone")


@pytest.fixture(params=GRANT_WAYS)
def grant_way(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _granted(
    client: redis.Redis, way: str, then: Callable[[], ToolResult] | None = None
) -> Callable[[CallState], ToolResult]:
    """A ``proceed`` that does what the lock guard does at its grant: send the claim's check
    (``way``), confirm it; then ``then()`` (the tool) if it holds."""

    def proceed(state: CallState) -> ToolResult:
        check = state.confirm_claim
        assert check is not None
        if way != "alone":
            if way == "script lost":
                client.script_flush()
            with client.pipeline(transaction=False) as pipe:
                pipe.ping()  # the grant's own script, in the lock's round trip
                check.queue(pipe)
                _, reply = pipe.execute(raise_on_error=False)
            check.read(reply)
        check.confirm(state)
        return then() if then is not None else _result("ran")

    return proceed


def test_a_delivery_whose_claim_was_taken_before_its_grant_answers_the_holders_result(
    tmp_path: Path, client: redis.Redis, events: _Events, grant_way: str
) -> None:
    def claim_taken_then_granted(state: CallState) -> ToolResult:
        client.set(KEYS.running("c1"), "w0")  # the job's other delivery claimed it meanwhile
        return _granted(client, grant_way, lambda: _never(state))(state)

    answers: list[ToolResult] = []
    waiter = threading.Thread(
        target=lambda: answers.append(
            _claim(client, events)(_state(tmp_path), claim_taken_then_granted)
        )
    )
    waiter.start()
    assert events.duplicate.wait(30), "the delivery without the claim did not wait for w0's run"
    assert not client.exists(KEYS.worker_current("w1"))
    ResultStore(client, KEYS).publish("t1", _result("from w0"))
    waiter.join(30)
    assert [answer.content for answer in answers] == ["from w0"]
    assert client.get(KEYS.running("c1")) == b"w0"  # the holder's claim stays


def test_a_delivery_whose_call_was_answered_before_its_grant_returns_that_answer(
    tmp_path: Path, client: redis.Redis, events: _Events, grant_way: str
) -> None:
    def answered_then_granted(state: CallState) -> ToolResult:
        client.set(KEYS.running("c1"), "w0")
        ResultStore(client, KEYS).publish("t1", _result("answered by w0"))
        return _granted(client, grant_way, lambda: _never(state))(state)

    answer = _claim(client, events)(_state(tmp_path), answered_then_granted)
    assert answer.content == "answered by w0"
    assert client.get(KEYS.running("c1")) == b"w0"
    assert not events.duplicate.is_set()


def test_a_claim_that_lapsed_before_the_grant_is_taken_again_and_the_call_runs(
    tmp_path: Path, client: redis.Redis, events: _Events, grant_way: str
) -> None:
    inside: list[Any] = []

    def lapsed_then_granted(state: CallState) -> ToolResult:
        client.delete(KEYS.running("c1"))  # dropped by a failover, nobody else took it

        def tool() -> ToolResult:
            inside.append(client.get(KEYS.running("c1")))
            return _result("ran")

        return _granted(client, grant_way, tool)(state)

    assert _claim(client, events)(_state(tmp_path), lapsed_then_granted).content == "ran"
    assert inside == [b"w1"]
    assert not client.exists(KEYS.running("c1"))  # let go with the answer


def test_a_cancel_seen_at_the_grant_sets_the_runs_cancel_flag(
    tmp_path: Path, client: redis.Redis, events: _Events, grant_way: str
) -> None:
    flags: list[bool] = []

    def cancelled_then_granted(state: CallState) -> ToolResult:
        client.set(KEYS.turn_cancel("t1"), "1")

        def tool() -> ToolResult:
            flags.append(state.cancelled.is_set())
            return _result("ran")

        return _granted(client, grant_way, tool)(state)

    _claim(client, events)(_state(tmp_path), cancelled_then_granted)
    assert flags == [True]


def test_the_heartbeat_renews_its_own_claim_and_never_another_deliverys(
    client: redis.Redis,
) -> None:
    beat = Heartbeat(client, KEYS, Settings(), worker_name="w1")
    cancelled = threading.Event()
    client.set(KEYS.running("c1"), "w1", px=500)
    beat._beat(JOB, cancelled)
    assert client.get(KEYS.running("c1")) == b"w1"
    assert client.pttl(KEYS.running("c1")) > 500  # renewed to the liveness
    client.set(KEYS.running("c1"), "w0")  # another delivery holds it now
    beat._beat(JOB, cancelled)
    assert client.get(KEYS.running("c1")) == b"w0"
    client.set(KEYS.turn_cancel("t1"), "1")
    beat._beat(JOB, cancelled)
    assert cancelled.is_set()
    assert client.get(KEYS.running("c1")) == b"w0"
