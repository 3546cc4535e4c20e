"""The orchestrator's client: scheduling, approval, limits, submit/collect, cancel.

Most tests drain the queue with a burst worker in this process (``run_worker(burst=True)``):
submit, drain, collect. Tests about calls running at the same time as the client acts
(cancel, the JSONL order of a parallel batch) use real worker processes (``tests.support.procs``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.job import JobStatus

from executor import ErrorType, Settings, Tool, ToolCall, ToolResult, ToolStatus
from executor._rq.jobs import job_status
from executor.client import Executor, TurnError, anthropic_tool_results, openai_tool_messages
from executor.wire import Batch, NextBatch, partition
from tests.support import dist_tools
from tests.support.procs import Workers, events, named, wait_for_event
from tests.support.waiting import wait_for
from workers.pool._process import run_worker


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "ws"
    root.mkdir()
    return Settings(redis_url=redis_url, workspace=root, lock_lease_ms=3000)


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(settings, tmp_path / "workers")
    yield pool
    pool.stop_all()


def _executor(settings: Settings, **options: Any) -> Executor:
    return Executor(settings=settings, registry=dist_tools.registry(), **options)


def _drain(settings: Settings) -> None:
    """Run every queued call with a burst worker in this process."""
    assert settings.redis.url
    name = f"burst-{uuid.uuid4().hex[:8]}"
    run_worker(settings.redis.url, settings, dist_tools.registry(), name=name, burst=True)


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def _run(executor: Executor, settings: Settings, calls: list[Any]) -> list[ToolResult]:
    turn = executor.submit(calls)
    _drain(settings)
    return executor.collect(turn, timeout=10)


def _statuses(results: list[ToolResult]) -> list[str]:
    return [r.error_type.value if r.error_type else r.status.value for r in results]


# -- partition of a turn -------------------------------------------------------------------------

_SAFE = {"read_file", "grep", "glob", "list_directory"}


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ((), []),
        (("read_file",), [Batch(True, (0,))]),
        (("read_file", "grep", "glob"), [Batch(True, (0, 1, 2))]),
        (("write_file", "bash"), [Batch(False, (0,)), Batch(False, (1,))]),
        (
            ("read_file", "read_file", "write_file", "read_file"),
            [Batch(True, (0, 1)), Batch(False, (2,)), Batch(True, (3,))],
        ),
        (
            ("bash", "grep", "glob", "edit_file", "list_directory"),
            [Batch(False, (0,)), Batch(True, (1, 2)), Batch(False, (3,)), Batch(True, (4,))],
        ),
    ],
)
def test_partition_groups_consecutive_safe_calls_and_isolates_the_rest(
    names: tuple[str, ...], expected: list[Batch]
) -> None:
    calls = [ToolCall(id=f"c{i}", name=name) for i, name in enumerate(names)]
    assert partition(calls, lambda c: c.name in _SAFE) == expected


def test_submitted_plan_follows_the_tools_flags(settings: Settings) -> None:
    calls = [
        _call("c0", "read_file", path="a.txt"),
        _call("c1", "grep", pattern="x"),
        _call("c2", "write_file", path="w.txt", content=""),
        _call("c3", "read_file", path="a.txt"),
        _call("c4", "bash", command="true"),
        _call("c5", "glob", pattern="*"),
        _call("c6", "list_directory", path="."),
    ]
    with _executor(settings) as executor:
        turn = executor.submit(calls)
    assert turn.plan.batches == [[0, 1], [2], [3], [4], [5, 6]]
    assert sorted(turn.plan.job_ids) == list(range(7))


def test_bad_calls_are_answered_before_anything_is_enqueued(settings: Settings) -> None:
    with _executor(settings) as executor:
        turn = executor.submit([_call("u", "no_such_tool"), _call("i", "read_file", pth="x")])
        results = executor.collect(turn, timeout=5)
        assert executor.queue.count == 0
    assert _statuses(results) == ["unknown_tool", "invalid_arguments"]
    assert "Available tools" in results[0].content
    assert "Fix the arguments" in results[1].content
    assert turn.plan.job_ids == {}


# -- approval, check, limits --------------------------------------------------------------


def test_rejection_stops_the_turn_and_read_only_tools_are_auto_approved(
    settings: Settings, client: redis.Redis
) -> None:
    asked: list[tuple[str, int]] = []

    def approve(call: ToolCall, tool: Tool) -> bool:
        # Approval comes before anything of the turn is enqueued.
        asked.append((call.id, executor.queue.count))
        return call.id != "w2"

    calls = [
        _call("r1", "read_file", path="in.txt"),
        _call("w1", "write_file", path="one.txt", content="1"),
        _call("r2", "read_file", path="one.txt"),
        _call("w2", "write_file", path="two.txt", content="2"),
        _call("r3", "read_file", path="in.txt"),
        _call("b", "bash", command="touch ran.txt"),
    ]
    (settings.worker.workspace / "in.txt").write_text("in")
    with _executor(settings, approve=approve) as executor:
        results = _run(executor, settings, calls)

    assert asked == [("w1", 0), ("w2", 0)]
    assert _statuses(results) == ["ok", "ok", "ok", "rejected", "rejected", "rejected"]
    assert results[2].content == "1"
    assert "The user rejected this call." in results[3].content
    assert "the turn stopped at call w2" in results[4].content
    assert "the turn stopped at call w2" in results[5].content
    assert not (settings.worker.workspace / "two.txt").exists()
    assert not (settings.worker.workspace / "ran.txt").exists()
    approvals = [(e.call_id, e.data["approved"]) for e in named(events(client), "approval")]
    assert approvals == [("w1", True), ("w2", False)]


def test_read_only_tools_are_asked_too_without_auto_approval(
    settings: Settings, client: redis.Redis
) -> None:
    asked: list[str] = []

    def approve(call: ToolCall, tool: Tool) -> bool:
        asked.append(call.id)
        return call.name != "read_file" or call.id == "r1"

    (settings.worker.workspace / "in.txt").write_text("in")
    calls = [
        _call("r1", "read_file", path="in.txt"),
        _call("r2", "read_file", path="in.txt"),
        _call("r3", "read_file", path="in.txt"),
    ]
    with _executor(settings, approve=approve, auto_approve_read_only=False) as executor:
        results = _run(executor, settings, calls)
    assert asked == ["r1", "r2"]
    assert _statuses(results) == ["ok", "rejected", "rejected"]
    approvals = [(e.call_id, e.data["approved"]) for e in named(events(client), "approval")]
    assert approvals == [("r1", True), ("r2", False)]


def test_check_callback_blocks_a_call_and_stops_the_turn(settings: Settings) -> None:
    def check(call: ToolCall, tool: Tool) -> str | None:
        return "no shell in this session" if call.name == "bash" else None

    calls = [
        _call("w", "write_file", path="a.txt", content="a"),
        _call("b", "bash", command="touch ran.txt"),
        _call("r", "read_file", path="a.txt"),
    ]
    with _executor(settings, check=check) as executor:
        results = _run(executor, settings, calls)
    assert _statuses(results) == ["ok", "rejected", "rejected"]
    assert "Tool blocked: no shell in this session" in results[1].content
    assert "the turn stopped at call b" in results[2].content
    assert not (settings.worker.workspace / "ran.txt").exists()


def test_max_tool_calls_caps_the_calls_of_an_executor(settings: Settings) -> None:
    (settings.worker.workspace / "in.txt").write_text("in")
    calls = [_call(f"c{i}", "read_file", path="in.txt") for i in range(4)]
    with _executor(settings, max_tool_calls=3) as executor:
        first = _run(executor, settings, calls)
        second = _run(executor, settings, [_call("d0", "read_file", path="in.txt")])
    assert _statuses(first) == ["ok", "ok", "ok", "rejected"]
    assert "tool call limit (3)" in first[3].content
    assert _statuses(second) == ["rejected"]


# -- call ids and call forms -----------------------------------------------------------------


def test_duplicate_ids_in_a_turn_are_refused(settings: Settings) -> None:
    calls = [_call("same", "read_file", path="a"), _call("same", "read_file", path="b")]
    with _executor(settings) as executor, pytest.raises(TurnError, match="'same' appears twice"):
        executor.submit(calls)
    with _executor(settings) as executor:
        assert executor.queue.count == 0


# A reused id's rejection must live in the turn's plan: under the call id it would read as the
# other turn's result, or replace it before that call even ran.
def test_a_call_id_used_by_an_earlier_turn_is_rejected(settings: Settings) -> None:
    with _executor(settings) as executor:
        first = _run(executor, settings, [_call("once", "write_file", path="a.txt", content="1")])
        again = _run(executor, settings, [_call("once", "write_file", path="a.txt", content="2")])
        assert executor.results.get("once") == first[0].model_copy(update={"turn_id": None})
    assert (settings.worker.workspace / "a.txt").read_text() == "1"
    assert _statuses(first) == ["ok"]
    assert _statuses(again) == ["rejected"]
    assert "already used by another turn" in again[0].content


def test_a_reused_id_leaves_the_rest_of_its_turn_in_order_for_any_collector(
    settings: Settings,
) -> None:
    # The plan goes in with the claims, before they are known to hold: a claim that failed
    # rewrites it before anything is enqueued, so a collector elsewhere reads the rewrite.
    with _executor(settings) as executor:
        _run(executor, settings, [_call("taken", "write_file", path="a.txt", content="1")])
        turn = executor.submit(
            [
                _call("n1", "write_file", path="b.txt", content="b"),
                _call("taken", "write_file", path="a.txt", content="2"),
                _call("n2", "read_file", path="b.txt"),
            ]
        )
        assert executor.queue.count == 1  # the first batch: n1 alone
    _drain(settings)
    with _executor(settings) as elsewhere:
        results = elsewhere.collect(turn.turn_id, timeout=10)
    assert _statuses(results) == ["ok", "rejected", "ok"]
    assert "already used by another turn" in results[1].content
    assert results[2].content.endswith("b")
    assert (settings.worker.workspace / "a.txt").read_text() == "1"


def test_small_and_large_results_both_reach_the_collector(settings: Settings) -> None:
    # A small result rides on the turn's wake-up list; a large one (quotes double in JSON)
    # wakes the collector by name and is read from its key.
    calls = [_call("small", "echo", text="hi"), _call("large", "echo", text='"' * 2500)]
    with _executor(settings) as executor:
        results = _run(executor, settings, calls)
        stored = [executor.results.get("small"), executor.results.get("large")]
        # Stored as the worker wrote them; handed back naming their turn.
        assert [r.model_copy(update={"turn_id": None}) for r in results] == stored
    assert [r.content for r in results] == ["hi", '"' * 2500]


def test_reusing_a_pending_call_id_leaves_the_first_call_alone(settings: Settings) -> None:
    with _executor(settings) as executor:
        first = executor.submit([_call("once", "bash", command="echo first")])
        second = executor.submit([_call("once", "write_file", path="a.txt", content="2")])
        _drain(settings)
        first_results = executor.collect(first, timeout=10)
        second_results = executor.collect(second, timeout=10)
    assert _statuses(second_results) == ["rejected"]
    assert _statuses(first_results) == ["ok"]
    assert "first" in first_results[0].content
    assert not (settings.worker.workspace / "a.txt").exists()


def test_openai_and_anthropic_call_dicts_are_accepted(settings: Settings) -> None:
    calls: list[Any] = [
        {
            "id": "oa",
            "type": "function",
            "function": {
                "name": "write_file",
                "arguments": json.dumps({"path": "o.txt", "content": "from openai"}),
            },
        },
        {"type": "tool_use", "id": "an", "name": "read_file", "input": {"path": "o.txt"}},
        ToolCall(id="tc", name="calculator", arguments={"expression": "6 * 7"}),
        _call("pl", "echo", text="plain"),
    ]
    with _executor(settings) as executor:
        results = _run(executor, settings, calls)
    assert [r.call_id for r in results] == ["oa", "an", "tc", "pl"]
    assert _statuses(results) == ["ok"] * 4
    assert [r.name for r in results] == ["write_file", "read_file", "calculator", "echo"]
    assert results[1].content == "from openai"
    assert "42" in results[2].content
    assert results[3].content == "plain"


# -- submit, collect, cancel, timeout --------------------------------------------------------


def test_another_executor_collects_a_turn_by_its_id(settings: Settings) -> None:
    (settings.worker.workspace / "in.txt").write_text("in")
    with _executor(settings) as first:
        turn = first.submit(
            [
                _call("a", "read_file", path="in.txt"),
                _call("b", "write_file", path="out.txt", content="o"),
            ]
        )
    _drain(settings)
    with _executor(settings) as second:
        results = second.collect(turn.turn_id, timeout=10)
        with pytest.raises(TurnError, match="No turn 'nope'"):
            second.collect("nope", timeout=1)
    assert [r.call_id for r in results] == ["a", "b"]
    assert _statuses(results) == ["ok", "ok"]


def test_collect_without_workers_times_out_and_the_calls_never_run_later(
    settings: Settings, client: redis.Redis
) -> None:
    (settings.worker.workspace / "in.txt").write_text("in")
    calls = [
        _call("r", "read_file", path="in.txt"),
        _call("w", "write_file", path="late.txt", content="late"),
    ]
    with _executor(settings) as executor:
        started = time.monotonic()
        results = executor.run(calls, timeout=1)
        elapsed = time.monotonic() - started
    assert elapsed < 4.0
    assert _statuses(results) == ["timeout", "timeout"]
    assert "No result for 'write_file' within 1 s" in results[1].content
    _drain(settings)
    assert not (settings.worker.workspace / "late.txt").exists()
    assert named(events(client), "tool_execution_started") == []


@pytest.mark.proof  # real worker processes
def test_cancel_stops_a_running_bash_and_the_queued_calls(
    settings: Settings, workers: Workers, client: redis.Redis
) -> None:
    workers.start(1)
    (settings.worker.workspace / "in.txt").write_text("in")
    calls = [
        _call("sh", "bash", command="sleep 30", timeout=60),
        _call("w", "write_file", path="never.txt", content="no"),
        _call("r", "read_file", path="in.txt"),
    ]
    with _executor(settings) as executor:
        turn = executor.submit(calls)
        wait_for_event(client, "tool_execution_started", "sh")
        started = time.monotonic()
        executor.cancel(turn)
        results = executor.collect(turn, timeout=20)
        elapsed = time.monotonic() - started

    assert elapsed < 5.0
    assert results[0].status is ToolStatus.ERROR
    assert "Command cancelled and killed" in results[0].content
    assert [r.error_type for r in results[1:]] == [ErrorType.CANCELLED] * 2
    assert "its turn was cancelled" in results[1].content
    # The queued jobs still reach a worker once the bash ends; they must not run.
    # None: RQ keeps no record of a job that ended well.
    terminal = {JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FAILED, None}
    queued = [turn.plan.job_ids[1], turn.plan.job_ids[2]]
    wait_for(lambda: all(job_status(client, j) in terminal for j in queued), what="their end")
    assert not (settings.worker.workspace / "never.txt").exists()
    assert named(events(client), "tool_execution_started", ["w", "r"]) == []


def test_a_cancel_answers_a_batchs_calls_before_it_starts_that_batch(settings: Settings) -> None:
    calls = [
        _call("w1", "write_file", path="a.txt", content="a"),
        _call("w2", "write_file", path="b.txt", content="b"),
        _call("r", "read_file", path="a.txt"),
    ]
    with _executor(settings) as executor:
        turn = executor.submit(calls)  # no worker: nothing has started
        call_of = {job: turn.plan.call_ids[index] for index, job in turn.plan.job_ids.items()}
        answered_before: list[bool] = []
        publish = executor.results.publish

        def watched(turn_id: str, result: ToolResult, then: NextBatch | None = None) -> Any:
            if then is not None:  # this answer puts the next batch's jobs on the queue
                later = [call_of[job] for job in then.jobs]
                answered_before.append(set(executor.results.get_many(later)) == set(later))
            return publish(turn_id, result, then)

        executor.results.publish = watched  # type: ignore[method-assign]
        executor.cancel(turn)
        results = executor.collect(turn, timeout=10)

    assert answered_before == [True, True]
    assert [r.error_type for r in results] == [ErrorType.CANCELLED] * 3


@pytest.mark.proof  # real worker processes
def test_jsonl_log_has_every_start_of_a_safe_batch_before_any_result(
    settings: Settings, workers: Workers, tmp_path: Path
) -> None:
    workers.start(2)
    for name in ("a", "b"):
        (settings.worker.workspace / f"{name}.md").write_text(f"{name}\n" * 500)
    log = tmp_path / "agent.jsonl"
    calls = [
        _call("pa", "slow_read", path="a.md"),
        _call("pb", "slow_read", path="b.md"),
        _call("w", "write_file", path="c.md", content="c"),
    ]
    with _executor(
        settings, jsonl=log, approve=lambda call, tool: True, auto_approve_read_only=False
    ) as executor:
        turn = executor.submit(calls)
        results = executor.collect(turn, timeout=30)
    assert _statuses(results) == ["ok"] * 3

    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert {line["turn_id"] for line in lines} == {turn.turn_id}
    assert all(line["call_id"] and line["tool"] and line["ts"] for line in lines)
    names = [line["event"] for line in lines]
    assert names.count("approval") == 3
    assert names.index("tool_execution_started") > max(
        i for i, n in enumerate(names) if n == "approval"
    )
    batch = [
        (line["event"], line["call_id"], line["worker"])
        for line in lines
        if line["call_id"] in {"pa", "pb"}
        and line["event"] in {"tool_execution_started", "tool_result"}
    ]
    assert [event for event, _, _ in batch] == ["tool_execution_started"] * 2 + ["tool_result"] * 2
    assert len({worker for _, _, worker in batch[:2]}) == 2


# -- messages --------------------------------------------------------------------------------


def test_results_become_openai_and_anthropic_messages() -> None:
    ok = ToolResult(call_id="call_1", name="read_file", status=ToolStatus.OK, content="text")
    failed = ToolResult(
        call_id="toolu_2",
        name="bash",
        status=ToolStatus.ERROR,
        content="Command timed out",
        error_type=ErrorType.TIMEOUT,
    )
    assert openai_tool_messages([ok, failed]) == [
        {"role": "tool", "tool_call_id": "call_1", "content": "text"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Command timed out"},
    ]
    assert anthropic_tool_results([ok, failed]) == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "text", "is_error": False},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": "Command timed out",
                "is_error": True,
            },
        ],
    }
