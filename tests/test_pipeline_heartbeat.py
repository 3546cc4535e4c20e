"""The claim's heartbeat: one thread renews the running call's claim and watches for cancel."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import redis

from executor import Settings, ToolCall, ToolRegistry, ToolResult, ToolStatus
from executor.contract import Workspace
from executor.wire import CallJob, Keys
from workers.pipeline._chain import CallState
from workers.pipeline._heartbeat import Heartbeat

KEYS = Keys()
FAST = Settings(call_heartbeat_s=0.02, call_liveness_s=5.0)


def _job(call_id: str, turn_id: str = "t1") -> CallJob:
    return CallJob(call=ToolCall(id=call_id, name="t"), turn_id=turn_id, index=0)


def _heartbeat(client: redis.Redis) -> Heartbeat:
    return Heartbeat(client, KEYS, FAST, worker_name="w1")


def _renewed(client: redis.Redis, call_id: str) -> bool:
    """Wait until a beat renews ``call_id``'s claim (its value set to the worker's name)."""
    deadline = time.monotonic() + 30
    while client.get(KEYS.running(call_id)) != b"w1":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_watched_call_is_kept_alive_and_learns_of_its_cancel(client: redis.Redis) -> None:
    heartbeat = _heartbeat(client)
    cancelled = threading.Event()
    client.set(KEYS.running("a"), "w1", px=60_000)  # its claim, taken with a longer life
    with heartbeat.watching(_job("a"), cancelled):
        deadline = time.monotonic() + 30
        while client.pttl(KEYS.running("a")) > 5000 and time.monotonic() < deadline:
            time.sleep(0.01)
        ttl = client.pttl(KEYS.running("a"))
        assert 0 < ttl <= 5000, "no beat renewed the claim to the liveness"
        assert client.get(KEYS.running("a")) == b"w1"
        assert not cancelled.is_set()
        client.set(KEYS.turn_cancel("t1"), "1")
        assert cancelled.wait(30), "the cancel was not noticed"


def test_a_call_no_longer_watched_is_not_renewed(client: redis.Redis) -> None:
    heartbeat = _heartbeat(client)
    with heartbeat.watching(_job("a"), threading.Event()):
        assert _renewed(client, "a")
    client.set(KEYS.running("a"), "ended")
    with heartbeat.watching(_job("b"), threading.Event()):
        assert _renewed(client, "b")  # a beat ran since "a" ended
    assert client.get(KEYS.running("a")) == b"ended"


def test_one_thread_serves_every_call_of_the_process(client: redis.Redis) -> None:
    heartbeat = _heartbeat(client)

    def beats() -> int:
        return sum(t.name == "toolpool-heartbeat" for t in threading.enumerate())

    before = beats()
    for call_id in ("a", "b", "c"):
        with heartbeat.watching(_job(call_id), threading.Event()):
            assert _renewed(client, call_id)
    assert beats() == before + 1


def test_the_step_watches_the_run_it_is_given(client: redis.Redis, tmp_path: Path) -> None:
    job = _job("a")
    state = CallState(
        call=job.call,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=FAST,
        job=job,
    )
    rerun = state.again()

    def proceed(seen: CallState) -> ToolResult:
        assert seen is rerun
        client.set(KEYS.turn_cancel("t1"), "1")
        assert seen.cancelled.wait(30), "the run's own flag was not watched"
        return ToolResult(call_id="a", name="t", status=ToolStatus.OK, content="ran")

    assert _heartbeat(client)(rerun, proceed).content == "ran"
    assert not state.cancelled.is_set()
