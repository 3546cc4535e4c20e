"""Store: a call's first stored result is its answer; a blip in Redis is ridden out."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from executor import ErrorType, Settings, ToolCall, ToolRegistry, ToolResult, ToolStatus, _patience
from executor.contract import Workspace
from executor.wire import CallJob, EventLog, Keys, NextBatch, ResultStore, read_events
from workers.pipeline._chain import CallState
from workers.pipeline._store import Store

KEYS = Keys()
CALL = ToolCall(id="c1", name="t")
JOB = CallJob(call=CALL, turn_id="t1", index=0)


def _result(text: str) -> ToolResult:
    return ToolResult(call_id=CALL.id, name=CALL.name, status=ToolStatus.OK, content=text)


def _store_of(client: redis.Redis, results: ResultStore | None = None) -> Store:
    return Store(results or ResultStore(client, KEYS), EventLog(client, KEYS, worker="w1"))


def test_the_step_stores_the_answer_and_returns_it(client: redis.Redis, tmp_path: Path) -> None:
    state = CallState(
        call=CALL,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=JOB,
    )
    result = _store_of(client)(state, lambda state: _result("ran"))
    assert result.content == "ran"
    assert ResultStore(client, KEYS).get("c1") == result
    # The wake-up carries the (small) result itself: the collector it wakes needs no read.
    [wake] = client.lrange(KEYS.turn_done("t1"), 0, -1)
    assert isinstance(wake, bytes)
    assert ResultStore.woken([wake]) == ([result], False)


def test_a_large_result_wakes_its_collector_by_name_only(client: redis.Redis) -> None:
    _store_of(client).publish(JOB, _result("x" * 10_000))
    [wake] = client.lrange(KEYS.turn_done("t1"), 0, -1)
    assert wake == b"c1"
    assert ResultStore.woken([wake]) == ([], True)


def test_events_go_first_and_the_claim_is_let_go_in_the_same_round_trip(
    client: redis.Redis, tmp_path: Path
) -> None:
    events = EventLog(client, KEYS, worker="w1")
    store = Store(ResultStore(client, KEYS), events)
    client.set("claim:current", "1")
    client.set("claim:running", "1")
    state = CallState(
        call=CALL,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=JOB,
        claim_keys=("claim:current", "claim:running"),
    )
    sent: list[int] = []
    real_execute = redis.client.Pipeline.execute

    def counted(pipe: redis.client.Pipeline, raise_on_error: bool = True) -> list[object]:
        sent.append(len(pipe.command_stack))
        return real_execute(pipe, raise_on_error)

    def proceed(state: CallState) -> ToolResult:
        events.defer("tool_result", call_id="c1")  # what the emit step leaves queued
        return _result("ran")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis.client.Pipeline, "execute", counted)
        assert store(state, proceed).content == "ran"
    assert sent == [3]  # the event, the result, the release: one round trip
    assert state.claim_released
    assert client.exists("claim:current", "claim:running") == 0
    [(_, event)] = read_events(client, KEYS)
    assert event.event == "tool_result"


def test_a_redis_that_lost_its_scripts_still_gets_the_result(client: redis.Redis) -> None:
    client.script_flush()
    assert _store_of(client).publish(JOB, _result("ran")).content == "ran"
    assert ResultStore(client, KEYS).get("c1") is not None


def test_a_second_result_is_dropped_and_the_first_answers(client: redis.Redis) -> None:
    store = _store_of(client)
    store.publish(JOB, _result("first"))
    assert store.publish(JOB, _result("second")).content == "first"
    [(_, dropped)] = read_events(client, KEYS)
    assert (dropped.event, dropped.call_id, dropped.turn_id) == ("result_dropped", "c1", "t1")


class _Flaky(ResultStore):
    """A store whose first two tries meet a Redis that does not answer."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, KEYS)
        self.tries = 0

    def publish_into(
        self,
        pipe: redis.client.Pipeline,
        turn_id: str,
        result: ToolResult,
        then: NextBatch | None = None,
    ) -> None:
        self.tries += 1
        raise redis.ConnectionError("Connection refused")

    def publish(self, turn_id: str, result: ToolResult, then: NextBatch | None = None) -> bool:
        self.tries += 1
        if self.tries == 2:
            raise redis.ConnectionError("Connection refused")
        return super().publish(turn_id, result, then)


def test_redis_away_for_a_moment_is_ridden_out(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_patience, "RETRY_S", 0.0)
    flaky = _Flaky(client)
    assert _store_of(client, flaky).publish(JOB, _result("ran")).content == "ran"
    assert flaky.tries == 3
    assert ResultStore(client, KEYS).get("c1") is not None


def test_redis_away_past_the_patience_fails_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_patience, "PATIENCE_S", 0.0)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    away = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        _store_of(away).publish(JOB, _result("ran"))
    away.close()


def test_a_stored_result_leaves_out_its_defaults_and_reads_back_whole(
    client: redis.Redis,
) -> None:
    result = _result("ran")
    _store_of(client).publish(JOB, result)
    raw = client.get(KEYS.result("c1"))
    assert raw is not None
    assert b"error_type" not in raw
    assert b"truncated" not in raw
    assert ResultStore(client, KEYS).get("c1") == result


def test_a_claim_that_could_not_be_let_go_is_left_to_the_claim_step(
    client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_patience, "RETRY_S", 0.0)
    flaky = _Flaky(client)

    def refuse(*keys: str) -> int:
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(client, "delete", refuse)
    state = CallState(
        call=CALL,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=JOB,
        claim_keys=("claim:current",),
    )
    assert _store_of(client, flaky)(state, lambda state: _result("ran")).content == "ran"
    assert not state.claim_released  # the claim's own finally deletes it once more
    assert ResultStore(client, KEYS).get("c1") is not None


def test_a_step_that_lost_redis_before_the_run_still_answers_the_call(
    client: redis.Redis, tmp_path: Path
) -> None:
    # A session's entry or a lease request that could not reach Redis within its patience: the
    # call must get an answer (and release its turn's next batch), not wait for a timeout.
    state = CallState(
        call=CALL,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=JOB,
    )

    def away(state: CallState) -> ToolResult:
        raise redis.ConnectionError("Connection refused")

    answer = _store_of(client)(state, away)
    assert answer.error_type == ErrorType.UNEXPECTED_ERROR
    assert "did not run" in answer.content
    assert ResultStore(client, KEYS).get("c1") == answer
