"""A turn's plan: answered calls stay with their turn, even when a call id is reused."""

from __future__ import annotations

from pathlib import Path

from executor import ErrorType, Settings, ToolCall, ToolStatus
from executor.client import Executor
from executor.wire import TurnPlan, job_id, read_events
from workers import builtin_registry
from workers.pool._process import run_worker


def test_a_reused_call_id_is_rejected_without_reading_the_other_turns_result(
    redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "first.txt").write_text("first turn")
    (tmp_path / "second.txt").write_text("second turn")
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        first = executor.submit(
            [ToolCall(id="same", name="read_file", arguments={"path": "first.txt"})]
        )
        run_worker(redis_url, settings, builtin_registry(), burst=True)
        assert executor.collect(first, timeout=10)[0].content == "first turn"

        (again,) = executor.run(
            [ToolCall(id="same", name="read_file", arguments={"path": "second.txt"})],
            timeout=10,
        )
        assert again.status is ToolStatus.ERROR
        assert again.error_type is ErrorType.REJECTED
        assert "already used by another turn" in again.content
        # The first turn's answer is untouched.
        assert executor.collect(first.turn_id, timeout=10)[0].content == "first turn"


def test_answered_calls_are_kept_in_the_plan_for_other_collectors(
    redis_url: str, tmp_path: Path
) -> None:
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    with (
        Executor(settings=settings, registry=builtin_registry()) as submitter,
        Executor(settings=settings, registry=builtin_registry()) as collector,
    ):
        turn = submitter.submit(
            [
                {"id": "bad", "name": "read_file", "arguments": {"pth": "x"}},
                {"id": "calc", "name": "calculator", "arguments": {"expression": "2*21"}},
            ]
        )
        run_worker(redis_url, settings, builtin_registry(), burst=True)
        bad, calc = collector.collect(turn.turn_id, timeout=10)
    assert bad.error_type is ErrorType.INVALID_ARGUMENTS
    assert calc.content == "2*21 = 42"


def test_events_carry_long_arguments_cut_and_the_call_keeps_them_whole(
    redis_url: str, tmp_path: Path
) -> None:
    settings = Settings(redis_url=redis_url, workspace=tmp_path)
    content = "x" * 50_000
    with Executor(settings=settings, registry=builtin_registry()) as executor:
        arguments = {"path": "big.txt", "content": content}
        turn = executor.submit([ToolCall(id="big-write", name="write_file", arguments=arguments)])
        run_worker(redis_url, settings, builtin_registry(), burst=True)
        (result,) = executor.collect(turn, timeout=10)
        started = [
            item
            for _, item in read_events(executor.client, executor.keys)
            if item.event == "tool_execution_started" and item.call_id == "big-write"
        ]
    assert result.content == "Successfully wrote 50000 bytes to big.txt"
    assert (tmp_path / "big.txt").read_text() == content
    (event,) = started
    shown = event.data["arguments"]["content"]
    assert len(shown) < 2100
    assert "48000 characters, 1 line dropped" in shown


def test_a_stored_plan_leaves_out_what_is_derived_and_reads_back_whole() -> None:
    plan = TurnPlan(
        turn_id="t1", call_ids=["a", "b", "c"], tools=["x", "y", "z"], batches=[[0, 2]], queue="q"
    )
    stored = plan.stored_json()
    for derived_or_default in ("job_ids", "answered", "session"):
        assert derived_or_default not in stored
    again = TurnPlan.model_validate_json(stored)
    assert again == plan
    assert again.job_ids == {0: job_id("t1", 0), 2: job_id("t1", 2)}
    assert again.enqueued() == ["a", "c"]
