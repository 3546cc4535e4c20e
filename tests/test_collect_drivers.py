"""``collect``'s answers, the same from ``Executor`` (blocking) and ``AsyncExecutor`` (awaited).

Both drive one waiting logic (the collector's steps), one with blocking calls and one on
``redis.asyncio``: each test here runs against both. Results in call order, by ``Turn`` or by
id; an unknown turn; a worker killed mid-call; the deadline; a poll, which answers nothing
``timeout``; a Redis outage that outlasts the collect, then the results once it is back.
Real redis-server, real worker processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from executor import AsyncExecutor, ErrorType, RedisUnavailable, Settings, ToolResult, Turn
from executor.client import Executor, TurnError
from tests.support.expect import ok
from tests.support.procs import MakeWorkers
from tests.support.waiting import PATIENCE_S, wait_for
from workers import builtin_registry
from workers._embedded_redis import RedisServer

pytestmark = pytest.mark.proof  # real worker processes, a Redis restarted

Collect = Callable[[Settings, "Turn | str", float], list[ToolResult]]


@pytest.fixture(params=["Executor", "AsyncExecutor"])
def collect(request: pytest.FixtureRequest) -> Collect:
    """``collect(settings, turn, timeout)`` by a client of its own, of each kind in turn."""
    if request.param == "Executor":

        def blocking(settings: Settings, turn: Turn | str, timeout: float) -> list[ToolResult]:
            with Executor(settings=settings, registry=builtin_registry()) as executor:
                return executor.collect(turn, timeout=timeout)

        return blocking

    def awaited(settings: Settings, turn: Turn | str, timeout: float) -> list[ToolResult]:
        async def main() -> list[ToolResult]:
            async with AsyncExecutor(settings=settings, registry=builtin_registry()) as ex:
                return await ex.collect(turn, timeout=timeout)

        return asyncio.run(main())

    return awaited


Poll = Callable[[Settings, "Turn | str", float], "list[ToolResult | None]"]


@pytest.fixture(params=["Executor", "AsyncExecutor"])
def poll(request: pytest.FixtureRequest) -> Poll:
    """``poll(settings, turn, wait)`` by a client of its own, of each kind in turn."""
    if request.param == "Executor":

        def blocking(settings: Settings, turn: Turn | str, wait: float) -> list[ToolResult | None]:
            with Executor(settings=settings, registry=builtin_registry()) as executor:
                return executor.poll(turn, wait=wait)

        return blocking

    def awaited(settings: Settings, turn: Turn | str, wait: float) -> list[ToolResult | None]:
        async def main() -> list[ToolResult | None]:
            async with AsyncExecutor(settings=settings, registry=builtin_registry()) as ex:
                return await ex.poll(turn, wait=wait)

        return asyncio.run(main())

    return awaited


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    return Settings(
        redis_url=redis_url, workspace=workspace, call_liveness_s=2.0, call_heartbeat_s=0.5
    )


def _submit(settings: Settings, calls: list[dict[str, object]]) -> Turn:
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        return executor.submit(calls)


def test_results_come_in_call_order_by_turn_and_by_id(
    settings: Settings, make_workers: MakeWorkers, collect: Collect
) -> None:
    make_workers(settings).start(2)
    turn = _submit(
        settings,
        [
            {"id": "w", "name": "write_file", "arguments": {"path": "b.txt", "content": "beta"}},
            {"id": "r1", "name": "read_file", "arguments": {"path": "b.txt"}},
            {"id": "nope", "name": "no_such_tool", "arguments": {}},
            {"id": "r2", "name": "read_file", "arguments": {"path": "a.txt"}},
        ],
    )

    by_turn = collect(settings, turn, PATIENCE_S)
    by_id = collect(settings, turn.turn_id, PATIENCE_S)

    for results in (by_turn, by_id):
        assert [r.call_id for r in results] == ["w", "r1", "nope", "r2"]
        assert ok(results[1]) == "beta"  # the read after the write saw it
        assert results[2].error_type is ErrorType.UNKNOWN_TOOL
        assert ok(results[3]) == "alpha\n"
    assert by_turn == by_id


def test_an_unknown_turn_is_a_clear_error(settings: Settings, collect: Collect) -> None:
    with pytest.raises(TurnError, match="No turn 'no-such-turn' is known"):
        collect(settings, "no-such-turn", PATIENCE_S)


def test_a_worker_killed_mid_call_gets_a_worker_lost_result(
    settings: Settings, make_workers: MakeWorkers, collect: Collect
) -> None:
    [worker] = make_workers(settings).start(1)
    started = Path(settings.worker.workspace) / "started"  # the workspace: bash may be sandboxed
    turn = _submit(
        settings,
        [
            {
                "id": "slow",
                "name": "bash",
                "arguments": {"command": "touch started; sleep 60", "timeout": 120},
            }
        ],
    )
    wait_for(started.exists, "the command to start")
    os.kill(worker.pid, signal.SIGKILL)

    [result] = collect(settings, turn, PATIENCE_S)

    assert result.error_type is ErrorType.WORKER_LOST, result.content
    assert "check its effects" in result.content


def test_the_deadline_answers_timeout(
    settings: Settings, make_workers: MakeWorkers, collect: Collect
) -> None:
    make_workers(settings).start(1)
    started = Path(settings.worker.workspace) / "started"  # the workspace: bash may be sandboxed
    turn = _submit(
        settings,
        [
            {
                "id": "slow",
                "name": "bash",
                "arguments": {"command": "touch started; sleep 60", "timeout": 120},
            }
        ],
    )
    wait_for(started.exists, "the command to start")

    before = time.monotonic()
    [result] = collect(settings, turn, 1.0)

    assert result.error_type is ErrorType.TIMEOUT, result.content
    assert "within 1 s" in result.content
    assert time.monotonic() - before < PATIENCE_S
    # The command still runs: stopped now, the worker ends at once, not at its stop grace.
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        executor.cancel(turn)


def test_a_poll_reads_what_is_there_and_leaves_the_rest_running(
    settings: Settings, make_workers: MakeWorkers, poll: Poll
) -> None:
    make_workers(settings).start(1)
    workspace = Path(settings.worker.workspace)
    turn = _submit(
        settings,
        [
            {"id": "r", "name": "read_file", "arguments": {"path": "a.txt"}},
            {
                "id": "held",
                "name": "bash",
                "arguments": {
                    "command": (
                        "touch started; while [ ! -e go ]; do sleep 0.05; done; echo released"
                    ),
                    "timeout": 120,
                },
            },
        ],
    )
    wait_for((workspace / "started").exists, "the command to start")

    read, held = poll(settings, turn.turn_id, 0.3)

    assert read is not None
    assert ok(read) == "alpha\n"
    assert held is None  # still running, and not answered `timeout`
    (workspace / "go").write_text("")
    read, held = poll(settings, turn, PATIENCE_S)
    assert held is not None
    assert ok(held) == "exit code: 0\nstdout:\nreleased"


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tcp=True, append_only=True) as started:
        yield started


def test_an_outage_past_the_deadline_raises_then_the_results_come(
    restartable: RedisServer, make_workers: MakeWorkers, collect: Collect, tmp_path: Path
) -> None:
    workspace = tmp_path / "outage-ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("hello")
    settings = Settings(redis_url=restartable.tcp_url, workspace=workspace)
    # No worker yet: the call waits on the queue, which the append-only file keeps.
    turn = _submit(settings, [{"id": "r", "name": "read_file", "arguments": {"path": "a.txt"}}])
    outage = threading.Thread(target=restartable.restart, args=(4.0,))
    outage.start()
    wait_for(lambda: not _answers(restartable), "Redis to go down")

    with pytest.raises(RedisUnavailable) as raised:
        collect(settings, turn, 1.5)
    outage.join()

    assert raised.value.turn_id == turn.turn_id
    assert f"collect({turn.turn_id!r}) again" in str(raised.value)
    make_workers(settings).start(1)
    [result] = collect(settings, turn.turn_id, PATIENCE_S)
    assert ok(result) == "hello"


def _answers(server: RedisServer) -> bool:
    client = redis.Redis.from_url(server.tcp_url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False
    finally:
        client.close()
