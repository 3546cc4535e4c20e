"""``TurnBatcher`` on its own, driven the way agent frameworks drive it, on real workers.

No framework here: each test starts asyncio tasks in one go, one tool call each, as a framework
does for a model response (a few ``await asyncio.sleep(0)`` stand for the framework's own steps
before the tool). What ran in which pool turn is read back from the pool's events.

Three tests hold defects found while writing these: a batch all its callers left while it
gathered took the next call in and was never sent; the last caller left before the turn's
cancel was sent (a framework that then closed the executor lost it); a run cancelled while
its submit was under way left the submitted turn running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis

from executor import (
    AsyncExecutor,
    ErrorType,
    RedisUnavailable,
    Settings,
    ToolCall,
    ToolInfo,
    ToolResult,
    ToolStatus,
)
from executor.adapters import TurnBatcher
from executor.wire import Keys, ResultStore, read_events
from tests.support.pids import sleep_marker, sleeping, survivors
from tests.support.ports import free_port_url
from tests.support.procs import MakeWorkers
from tests.support.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.proof  # real worker processes

# What a framework does in a task before it reaches the tool: a few loop iterations.
FRAMEWORK_STEPS = 2

Arguments = dict[str, object] | str


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    return Settings(redis_url=redis_url, workspace=workspace)


@pytest.fixture
def pool(settings: Settings, make_workers: MakeWorkers) -> Settings:
    """The settings of a running pool of two workers."""
    make_workers(settings).start(2)
    return settings


def executor_for(settings: Settings) -> AsyncExecutor:
    return AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S)


def start_together(
    batcher: TurnBatcher, calls: list[tuple[str, Arguments, str | None]]
) -> list[asyncio.Task[ToolResult]]:
    """One task a call, all created in one go, as a framework does for a model response."""

    async def framework_task(name: str, arguments: Arguments, call_id: str | None) -> ToolResult:
        for _ in range(FRAMEWORK_STEPS):
            await asyncio.sleep(0)
        return await batcher.call(name, arguments, call_id)

    return [asyncio.create_task(framework_task(*call)) for call in calls]


def run(main: Callable[[], Awaitable[None]]) -> None:
    """``main`` on a fresh event loop; a hang fails the test instead of stalling the suite."""

    async def bounded() -> None:
        await asyncio.wait_for(main(), PATIENCE_S * 2)

    asyncio.run(bounded())


async def until(condition: Callable[[], object], what: str) -> None:
    """Wait (off the loop, which keeps running) until ``condition`` holds."""
    await asyncio.to_thread(wait_for, condition, what)


def pool_id_of(framework_id: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(framework_id)}-[0-9a-f]{{12}}")


def turn_of_each(settings: Settings, call_ids: list[str]) -> dict[str, set[str]]:
    """The turn ids the pool's events give for each call, once each call's result is logged."""
    client = redis.Redis.from_url(str(settings.redis.url))
    keys = Keys(settings.redis.key_prefix)
    try:

        def logged() -> dict[str, set[str]]:
            found: dict[str, set[str]] = {}
            for _, event in read_events(client, keys):
                if event.call_id in call_ids and event.event == "tool_result":
                    found.setdefault(event.call_id, set()).add(event.turn_id)
            return found

        wait_for(lambda: len(logged()) == len(call_ids), "every call's tool_result event")
        return logged()
    finally:
        client.close()


def stored_now(settings: Settings, call_id: str) -> ToolResult | None:
    """The result the pool has stored for ``call_id`` so far, if any."""
    client = redis.Redis.from_url(str(settings.redis.url))
    try:
        return ResultStore(client, Keys(settings.redis.key_prefix)).get(call_id)
    finally:
        client.close()


def stored_result(settings: Settings, call_id: str) -> ToolResult:
    """The result the pool stored for ``call_id`` (waited for)."""
    wait_for(lambda: stored_now(settings, call_id) is not None, f"the result of {call_id}")
    result = stored_now(settings, call_id)
    assert result is not None
    return result


# -- calls started together: one turn, in order -------------------------------------------


def test_calls_started_together_are_one_turn_in_the_order_started(pool: Settings) -> None:
    got: list[ToolResult] = []
    turns: list[list[str]] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            tasks = start_together(
                batcher,
                [
                    ("write_file", {"path": "new.txt", "content": "written\n"}, "w"),
                    ("read_file", {"path": "new.txt"}, "r"),
                    ("echo", {"text": "hello"}, "e"),
                ],
            )
            got.extend(await asyncio.gather(*tasks))
            turns.extend([call.name for call in turn] for turn in batcher.turns)
            assert [r.call_id for r in got] == [c.id for c in batcher.turns[0]]

    run(main)

    assert turns == [["write_file", "read_file", "echo"]]
    for result, framework_id in zip(got, ["w", "r", "e"], strict=True):
        assert pool_id_of(framework_id).fullmatch(result.call_id), result.call_id
        assert result.status is ToolStatus.OK, result.content
    _, read, echo = got
    assert read.name == "read_file"
    assert "written" in read.content  # the read saw the write
    assert echo.content == "hello"
    # One turn on the pool: every call's events carry the same turn id.
    turn_ids = turn_of_each(pool, [r.call_id for r in got])
    assert len(set().union(*turn_ids.values())) == 1, turn_ids


def test_a_call_started_after_the_batch_was_sent_makes_a_new_turn(pool: Settings) -> None:
    got: list[ToolResult] = []
    turns: list[list[str]] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            first = start_together(
                batcher,
                [
                    ("slow_read", {"path": "a.txt"}, "slow"),
                    ("echo", {"text": "one"}, "one"),
                ],
            )
            while not batcher.turns:  # the first batch is on its way to the pool
                await asyncio.sleep(0)
            later = start_together(batcher, [("echo", {"text": "two"}, "two")])
            got.extend(await asyncio.gather(*first, *later))
            turns.extend([call.name for call in turn] for turn in batcher.turns)

    run(main)

    assert turns == [["slow_read", "echo"], ["echo"]]
    assert [r.content.strip() for r in got] == ["alpha", "one", "two"]
    turn_ids = turn_of_each(pool, [r.call_id for r in got])
    assert turn_ids[got[0].call_id] == turn_ids[got[1].call_id]
    assert turn_ids[got[2].call_id].isdisjoint(turn_ids[got[0].call_id])


# -- arguments and ids ------------------------------------------------------------------------


def test_json_text_arguments_work_and_unreadable_ones_are_an_error_result(
    pool: Settings,
) -> None:
    got: list[ToolResult] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            tasks = start_together(
                batcher,
                [
                    ("echo", '{"text": "from json"}', "json"),
                    ("echo", '{"text": "cut off', "broken"),
                    ("echo", {"text": "after"}, "after"),
                ],
            )
            got.extend(await asyncio.gather(*tasks))
            assert len(batcher.turns) == 1

    run(main)

    from_json, broken, after = got
    assert (from_json.status, from_json.content) == (ToolStatus.OK, "from json")
    assert broken.status is ToolStatus.ERROR
    assert broken.error_type is ErrorType.INVALID_ARGUMENTS
    assert pool_id_of("broken").fullmatch(broken.call_id)
    assert (after.status, after.content) == (ToolStatus.OK, "after")


def test_two_calls_with_one_framework_id_both_run(pool: Settings) -> None:
    got: list[ToolResult] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            tasks = start_together(
                batcher,
                [
                    ("echo", {"text": "first"}, "same"),
                    ("echo", {"text": "second"}, "same"),
                    ("echo", {"text": "no id"}, None),
                ],
            )
            got.extend(await asyncio.gather(*tasks))
            assert len(batcher.turns) == 1

    run(main)

    assert [(r.status, r.content) for r in got] == [
        (ToolStatus.OK, "first"),
        (ToolStatus.OK, "second"),
        (ToolStatus.OK, "no id"),
    ]
    assert pool_id_of("same").fullmatch(got[0].call_id)
    assert pool_id_of("same").fullmatch(got[1].call_id)
    assert got[0].call_id != got[1].call_id
    assert pool_id_of("call").fullmatch(got[2].call_id)


# -- cancellation -----------------------------------------------------------------------------


def test_cancelling_one_caller_leaves_the_others_result(pool: Settings, tmp_path: Path) -> None:
    started = tmp_path / "started"
    pool_ids: list[str] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            slow, echo = start_together(
                batcher,
                [
                    (
                        "slow_read",
                        {"path": "a.txt", "delay_ms": 1000, "started": str(started)},
                        "slow",
                    ),
                    ("echo", {"text": "kept"}, "echo"),
                ],
            )
            await until(started.exists, "the slow read to run on a worker")
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            result = await echo
            assert (result.status, result.content) == (ToolStatus.OK, "kept")
            pool_ids.extend(call.id for call in batcher.turns[0])

    run(main)

    # The turn ran on for the caller still waiting: the cancelled caller's call finished too.
    slow_result = stored_result(pool, pool_ids[0])
    assert (slow_result.status, slow_result.content.strip()) == (ToolStatus.OK, "alpha")


def test_cancelling_every_caller_cancels_the_turn_on_the_pool(pool: Settings) -> None:
    marker = sleep_marker()
    pool_ids: list[str] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            # timeout: bash's own limit must not be what ends the sleep.
            tasks = start_together(
                batcher,
                [
                    ("bash", {"command": f"sleep {marker}", "timeout": 600}, "sleep"),
                    ("echo", {"text": "never"}, "after"),
                ],
            )
            await until(lambda: sleeping(marker), "the sleep to run on a worker")
            for task in tasks:
                task.cancel()
            for task in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await task
            pool_ids.extend(call.id for call in batcher.turns[0])
            # The executor stays open while the turn's cancel reaches the pool (see the
            # regression guard below for closing it at once).
            assert await asyncio.to_thread(survivors, marker, PATIENCE_S) == []

    run(main)

    sleep, queued = (stored_result(pool, call_id) for call_id in pool_ids)
    assert sleep.status is ToolStatus.ERROR
    assert "Command cancelled and killed" in sleep.content
    assert queued.error_type is ErrorType.CANCELLED  # never started


def test_the_turn_is_cancelled_by_the_time_its_last_caller_is(pool: Settings) -> None:
    """A framework whose run is cancelled may close the executor next: the pool turn's
    cancel must have been sent by then, or it is lost and the turn runs on unattended."""
    marker = sleep_marker()
    when_callers_left: list[ToolResult | None] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            tasks = start_together(
                batcher,
                [
                    ("bash", {"command": f"sleep {marker}", "timeout": 600}, "sleep"),
                    ("echo", {"text": "never"}, "queued"),  # waits behind the bash: never starts
                ],
            )
            await until(lambda: sleeping(marker), "the sleep to run on a worker")
            for task in tasks:
                task.cancel()
            for task in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await task
            # Read at once: a call not started gets its `cancelled` result from the cancel.
            when_callers_left.append(stored_now(pool, batcher.turns[0][1].id))
            # Closed only once the cancel has landed: a cancel that failed on a closed
            # executor would be reported, mid-report, by the garbage collector.
            assert await asyncio.to_thread(survivors, marker, PATIENCE_S) == []

    run(main)

    (queued,) = when_callers_left
    assert queued is not None, "the callers were gone before the turn's cancel was sent"
    assert queued.error_type is ErrorType.CANCELLED


def test_callers_cancelled_while_gathering_do_not_strand_the_next_call(pool: Settings) -> None:
    """The batch its callers all left before it was sent must not take the next call in."""

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)
            (left,) = start_together(batcher, [("echo", {"text": "left"}, "left")])
            for _ in range(FRAMEWORK_STEPS + 1):  # the call has reached the batcher
                await asyncio.sleep(0)
            left.cancel()
            with pytest.raises(asyncio.CancelledError):
                await left
            (later,) = start_together(batcher, [("echo", {"text": "later"}, "later")])
            # A live batch is sent within a few quiet loop iterations; no pool I/O needed.
            for _ in range(100):
                await asyncio.sleep(0)
            assert [[call.name for call in turn] for turn in batcher.turns] == [["echo"]], (
                "the later call joined the abandoned batch, which is never sent"
            )
            result = await later
            assert (result.status, result.content) == (ToolStatus.OK, "later")

    run(main)


def test_callers_cancelled_while_the_turn_is_submitted_cancel_it(pool: Settings) -> None:
    """Every caller cancelled while the turn is being enqueued: the turn is cancelled once
    enqueued, not left to run."""
    checking, release = threading.Event(), threading.Event()
    when_callers_left: list[ToolResult | None] = []
    marker = sleep_marker()

    def hold_submit(call: ToolCall, tool: ToolInfo) -> None:
        checking.set()  # the submit is under way, in the executor's thread
        release.wait(PATIENCE_S)

    async def main() -> None:
        async with AsyncExecutor(
            settings=pool, wait_for_workers=PATIENCE_S, check=hold_submit
        ) as ex:
            batcher = TurnBatcher(ex)
            # bash's own limit must not end the sleep before the cancel lands, however slow
            # the machine: the echo would start, and be left without a result to read.
            tasks = start_together(
                batcher,
                [
                    ("bash", {"command": f"sleep {marker}", "timeout": 600}, "sleep"),
                    ("echo", {"text": "never"}, "queued"),  # waits behind the bash
                ],
            )
            await asyncio.to_thread(checking.wait, PATIENCE_S)
            for task in tasks:
                task.cancel()
            release.set()
            for task in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await task
            queued = batcher.turns[0][1].id
            # Read at once: left running, the turn has not reached the echo yet.
            when_callers_left.append(stored_now(pool, queued))
            # A turn left running is ended here (its sleep, ours alone), so that the test
            # fails at once; the executor is closed only once the turn is over.
            await asyncio.to_thread(
                wait_for,
                lambda: stored_now(pool, queued) is not None or bool(sleeping(marker)),
                "the echo's result, or else the sleep to run",
            )
            for pid in sleeping(marker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.to_thread(stored_result, pool, queued)

    run(main)

    (queued,) = when_callers_left
    assert queued is not None, "the turn was enqueued and left running"
    assert queued.error_type is ErrorType.CANCELLED


# -- no pool, and a loop that never goes quiet ---------------------------------------------


def test_an_unreachable_pool_is_every_callers_exception(tmp_path: Path) -> None:
    settings = Settings(redis_url=free_port_url(), workspace=tmp_path)

    async def main() -> None:
        async with AsyncExecutor(settings=settings) as ex:
            batcher = TurnBatcher(ex)
            tasks = start_together(
                batcher,
                [
                    ("echo", {"text": "a"}, "a"),
                    ("read_file", {"path": "a.txt"}, "b"),
                    ("echo", {"text": "c"}, "c"),
                ],
            )
            outcomes = await asyncio.wait_for(
                asyncio.gather(*tasks, return_exceptions=True), PATIENCE_S
            )
            assert len(batcher.turns) == 1
            assert all(isinstance(outcome, RedisUnavailable) for outcome in outcomes), outcomes

    run(main)


def test_a_loop_that_never_goes_quiet_still_sends_its_batches(pool: Settings) -> None:
    """A new call every loop iteration never leaves the batch quiet; the wall-clock bound
    (MAX_GATHER_S) sends it anyway, and the calls still arriving make the next turns."""
    texts: list[str] = []
    got: list[ToolResult] = []
    turns: list[list[str]] = []

    async def main() -> None:
        async with executor_for(pool) as ex:
            batcher = TurnBatcher(ex)

            async def spin() -> None:  # other framework work that never lets the loop idle
                while True:
                    await asyncio.sleep(0)

            spinner = asyncio.create_task(spin())
            tasks: list[asyncio.Task[ToolResult]] = []
            # Until the first call is answered, a new call reaches the batcher every iteration.
            while not tasks or not tasks[0].done():
                texts.append(f"call {len(tasks)}")
                tasks.append(asyncio.create_task(batcher.call("echo", {"text": texts[-1]}, "c")))
                time.sleep(0.005)  # work that holds the loop: keeps each turn to a few calls
                await asyncio.sleep(0)
            got.extend(await asyncio.gather(*tasks))
            spinner.cancel()
            turns.extend([call.id for call in turn] for turn in batcher.turns)

    run(main)

    assert [r.content for r in got] == texts
    assert [call_id for turn in turns for call_id in turn] == [r.call_id for r in got]
    # The first turn went while calls were still arriving; those made the next turns.
    assert len(turns) >= 2, [len(turn) for turn in turns]
