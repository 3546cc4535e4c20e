"""The gap between a fence check and the rename it guards (fault F4 of the fault run).

A writer paused after its fence check and before its rename, past its lease, used to land its
write after the next holder's: the fence cannot be checked by the file system. The commit now
happens under the workspace's commit lock, with a second fence check after the rename that
undoes it; every call passes the commit barrier after its grant; edit_file commits only onto
the version it read; and a call stopped for its time limit waits for a commit in flight.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from executor import ErrorType, FenceError, Settings, Tool, ToolContext, ToolError, ToolResult, tool
from executor.client import Executor
from executor.contract import ToolRegistry, Workspace
from executor.lock import RWLock
from executor.wire import Keys, ToolCall
from tests.support import dist_tools
from tests.support.expect import ok
from tests.support.procs import Workers, events, named
from tests.support.waiting import wait_for
from workers._commit import CommitBusy, commit_barrier, exclusive_commit
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools import edit_file, write_file
from workers.tools._atomic import replace_file


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


def _run(chosen: Tool, env: CallEnvironment, **arguments: object) -> ToolResult:
    call = ToolCall(id="c1", name=chosen.name, arguments=arguments)
    return run_call(call, ToolRegistry([chosen]), env)


def _fence_failing_on(call: int) -> Callable[[], None]:
    """A fence that passes until its ``call``-th check, as if the lease ended right then."""
    count = 0

    def fence() -> None:
        nonlocal count
        count += 1
        if count >= call:
            raise FenceError("The write was not committed: this call lost the exclusive lock.")

    return fence


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# --- the second fence check undoes the rename ------------------------------------------------


def test_a_lease_lost_during_the_rename_undoes_the_write(workspace: Workspace) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old")
    inode = target.stat().st_ino

    env = CallEnvironment(workspace=workspace, fence=_fence_failing_on(2))
    result = _run(write_file, env, path="data.txt", content="new")

    assert result.error_type is ErrorType.LOCK_LOST
    assert "not committed" in result.content
    assert target.read_text() == "old"
    assert target.stat().st_ino == inode  # the very version that was there, not a copy
    assert _names(workspace.root) == ["data.txt"]  # no temp file, no second name left


def test_a_new_file_whose_lease_was_lost_during_the_rename_is_removed(
    workspace: Workspace,
) -> None:
    env = CallEnvironment(workspace=workspace, fence=_fence_failing_on(2))
    result = _run(write_file, env, path="new.txt", content="new")

    assert result.error_type is ErrorType.LOCK_LOST
    assert _names(workspace.root) == []


def test_a_write_that_keeps_its_lease_commits_once(workspace: Workspace) -> None:
    checks: list[int] = []
    env = CallEnvironment(workspace=workspace, fence=lambda: checks.append(1))
    ok(_run(write_file, env, path="a.txt", content="x"))
    assert (workspace.root / "a.txt").read_text() == "x"
    assert len(checks) == 2


# --- the commit lock and the barrier -----------------------------------------------------------


def test_a_commit_waits_for_the_commit_lock(workspace: Workspace) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old")
    ctx = ToolContext(workspace=workspace)
    done = threading.Event()

    def write() -> None:
        replace_file(ctx, target, b"new")
        done.set()

    with exclusive_commit(workspace.root, timeout=1.0):
        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.3), "the commit went ahead while another one held the lock"
        assert target.read_text() == "old"
    writer.join(timeout=10)
    assert done.is_set()
    assert target.read_text() == "new"


def test_a_commit_that_cannot_get_the_lock_in_its_time_changes_nothing(
    workspace: Workspace,
) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old")
    ctx = ToolContext(workspace=workspace, deadline=time.monotonic() + 0.2)

    with (
        exclusive_commit(workspace.root, timeout=1.0),
        pytest.raises(CommitBusy, match="committing a write to the workspace"),
    ):
        replace_file(ctx, target, b"new")

    assert target.read_text() == "old"
    assert _names(workspace.root) == ["data.txt"]


def test_the_barrier_waits_for_a_commit_in_flight_and_times_out_clearly(
    workspace: Workspace,
) -> None:
    passed = threading.Event()
    with exclusive_commit(workspace.root, timeout=1.0):
        with pytest.raises(CommitBusy, match="nothing was changed"):
            commit_barrier(workspace.root, timeout=0.05)

        def wait_then_mark() -> None:
            commit_barrier(workspace.root, timeout=10)
            passed.set()

        waiter = threading.Thread(target=wait_then_mark)
        waiter.start()
        assert not passed.wait(0.2)
    waiter.join(timeout=10)
    assert passed.is_set()
    # Barriers do not hold each other up.
    commit_barrier(workspace.root, timeout=0)


# --- edit_file commits only onto the version it read -----------------------------------------


def test_edit_file_refuses_when_the_file_changed_after_it_was_read(
    workspace: Workspace,
) -> None:
    target = workspace.root / "log.txt"
    target.write_text("start\nEND\n")
    changed = False

    def another_writer_lands_first() -> None:
        # Runs at the first fence check, under the commit lock, after the edit read the file.
        nonlocal changed
        if not changed:
            changed = True
            (workspace.root / "other").write_text("start\nother\nEND\n")
            os.replace(workspace.root / "other", target)

    env = CallEnvironment(workspace=workspace, fence=another_writer_lands_first)
    result = _run(edit_file, env, path="log.txt", old_string="END", new_string="mine\nEND")

    assert result.error_type is ErrorType.TOOL_ERROR
    assert "log.txt changed while this edit was being made" in result.content
    assert "Read the file again" in result.content
    assert target.read_text() == "start\nother\nEND\n"  # the other write is not lost
    assert _names(workspace.root) == ["log.txt"]


# --- a call stopped for its time limit waits for a commit in flight ---------------------------


@tool(timeout=0.2)
def slow_commit(ctx: ToolContext) -> str:
    """Commit while the time limit runs out, then return."""
    with ctx.commit_gate:
        time.sleep(0.5)
        ctx.committed = True
    return "committed"


@tool(timeout=0.2)
def commit_then_hang(ctx: ToolContext) -> str:
    """Commit while the time limit runs out, then never return in time."""
    with ctx.commit_gate:
        time.sleep(0.4)
        ctx.committed = True
    time.sleep(30)
    return "late"


def test_a_commit_in_flight_at_the_time_limit_gives_the_true_answer(
    workspace: Workspace,
) -> None:
    result = _run(slow_commit, CallEnvironment(workspace=workspace))
    assert ok(result) == "committed"


def test_a_call_stopped_after_its_commit_says_so(workspace: Workspace) -> None:
    result = _run(commit_then_hang, CallEnvironment(workspace=workspace))
    assert result.error_type is ErrorType.TIMEOUT
    assert "stopped after its write was committed" in result.content


def test_a_call_stopped_before_its_commit_cannot_commit(workspace: Workspace) -> None:
    target = workspace.root / "data.txt"
    target.write_text("old")
    ctx = ToolContext(workspace=workspace)
    assert ctx.stop() is False
    with pytest.raises(ToolError, match="cancelled before its write was committed"):
        replace_file(ctx, target, b"new")
    assert target.read_text() == "old"


# --- F4 with real workers: a holder frozen between its fence check and its rename ------------


@pytest.fixture
def frozen_pids() -> Iterator[list[int]]:
    """Processes a test stopped: sent SIGCONT at the end whatever happens."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            continue


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.proof  # a worker process frozen past its lease
def test_a_holder_frozen_before_its_rename_never_lands_its_write(
    redis_url: str, tmp_path: Path, client: redis.Redis, frozen_pids: list[int]
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "shared.txt").write_text("initial")
    settings = Settings(
        redis_url=redis_url, workspace=root, lock_lease_ms=800, call_liveness_s=60.0
    )
    pool = Workers(settings, tmp_path / "workers")
    lock = RWLock.from_url(redis_url, settings.worker.scope, keys=Keys(), lease_ms=800)
    pid_file = tmp_path / "frozen.pid"
    try:
        pool.start(2)
        with Executor(settings=settings, registry=dist_tools.registry()) as executor:
            stale = executor.submit(
                [
                    {
                        "id": "stale",
                        "name": "write_then_freeze",
                        "arguments": {
                            "path": "shared.txt",
                            "content": "stale",
                            "pid_file": str(pid_file),
                        },
                    }
                ]
            )
            wait_for(
                lambda: pid_file.exists() and _state(int(pid_file.read_text())) == "T",
                "the first writer to freeze between its fence check and its rename",
            )
            frozen = int(pid_file.read_text())
            frozen_pids.append(frozen)
            fresh = executor.submit(
                [
                    {
                        "id": "fresh",
                        "name": "write_file",
                        "arguments": {"path": "shared.txt", "content": "fresh"},
                    }
                ]
            )
            # The frozen lease runs out; the other worker is granted the lock and waits at
            # the commit barrier (its lock_acquired event comes after the barrier).
            wait_for(
                lambda: [h.owner.call_id for h in lock.status().holders] == ["fresh"],
                "the second writer to be granted the lock",
            )
            os.kill(frozen, signal.SIGCONT)
            [stale_result] = executor.collect(stale, timeout=60)
            [fresh_result] = executor.collect(fresh, timeout=60)
    finally:
        lock.close()
        pool.stop_all()

    assert stale_result.error_type is ErrorType.LOCK_LOST, stale_result.content
    assert "not committed" in stale_result.content
    assert ok(fresh_result) == "Successfully wrote 5 bytes to shared.txt"
    assert (root / "shared.txt").read_text() == "fresh"
    assert _names(root) == ["shared.txt"]
    [grant] = named(events(client), "lock_acquired", ["fresh"])
    [released] = named(events(client), "lock_released", ["stale"])
    assert released.data["held"] is False  # the stale lease had ended before the fresh grant
    assert grant.data["fence"] > released.data["fence"]


def test_a_file_system_without_locks_is_a_clear_error(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NFS, say: flock on a directory fails with EBADF or ENOLCK. A test cannot mount one.
    def refuse(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr("workers._commit.fcntl.flock", refuse)
    target = workspace.root / "data.txt"
    target.write_text("old")
    with pytest.raises(ToolError, match=r"refuses file locks .* nothing was changed"):
        replace_file(ToolContext(workspace=workspace), target, b"new")
    assert target.read_text() == "old"
    assert _names(workspace.root) == ["data.txt"]
