"""Tool threads: reused from call to call; a stuck tool keeps its thread, the next call gets
another, and every call still answers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from executor import ErrorType, Settings, ToolCall, ToolContext, ToolRegistry, ToolStatus
from executor.contract import Workspace
from workers.pipeline._chain import CallState
from workers.pipeline._run import run
from workers.pipeline._tool_threads import ToolThreads


def test_a_finished_thread_runs_the_next_task() -> None:
    threads = ToolThreads()
    seen: list[int] = []
    for _ in range(5):
        task = threads.start(lambda: seen.append(threading.get_ident()))
        assert task.wait(30)
    assert len(set(seen)) == 1
    assert threads.idle() == 1


def test_a_stuck_task_keeps_its_thread_and_the_next_gets_another() -> None:
    threads = ToolThreads()
    release = threading.Event()
    stuck_ident: list[int] = []

    def stuck() -> None:
        stuck_ident.append(threading.get_ident())
        release.wait(30)

    first = threads.start(stuck)
    assert not first.wait(0.05)  # still running: its caller gives up on it
    idents: list[int] = []
    second = threads.start(lambda: idents.append(threading.get_ident()))
    assert second.wait(30)
    assert idents != stuck_ident
    release.set()
    assert first.wait(30)  # it ends when its tool does, and may serve again
    assert threads.idle() <= 2


def test_a_raising_task_still_ends_and_its_thread_serves_on() -> None:
    threads = ToolThreads()

    def boom() -> None:
        raise RuntimeError("tool escaped")

    task = threads.start(boom)
    assert task.wait(30)
    after = threads.start(lambda: None)
    assert after.wait(30)


registry = ToolRegistry()
gate = threading.Event()


@registry.tool(timeout=0.2)
def wedged(ctx: ToolContext) -> str:
    """Ignore the cancel and wait for the test's gate: a tool stuck past its limit."""
    gate.wait(60)
    return "late"


@registry.tool
def quick() -> str:
    """Answer at once."""
    return "quick"


def _state(tmp_path: Path, name: str) -> CallState:
    tool = registry.get(name)
    return CallState(
        call=ToolCall(id=f"c-{name}", name=name),
        registry=registry,
        workspace=Workspace(tmp_path),
        settings=Settings(),
        tool=tool,
    )


def test_a_call_after_a_stuck_tool_runs_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("workers.pipeline._run.CLEANUP_GRACE", 0.05)
    try:
        stuck = run(_state(tmp_path, "wedged"))
        assert stuck.error_type is ErrorType.TIMEOUT
        answered = run(_state(tmp_path, "quick"))
        assert (answered.status, answered.content) == (ToolStatus.OK, "quick")
    finally:
        gate.set()
