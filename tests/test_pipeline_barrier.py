"""Commit barrier: a call just granted waits for an earlier holder's commit in flight."""

from __future__ import annotations

import threading

import pytest

from executor.contract import Workspace
from workers._commit import CommitBusy, exclusive_commit
from workers.pipeline._barrier import CommitBarrier


def test_no_commit_in_flight_passes_at_once(workspace: Workspace) -> None:
    CommitBarrier(timeout=0)(workspace.root)


def test_a_commit_in_flight_is_waited_for(workspace: Workspace) -> None:
    barrier = CommitBarrier(timeout=30)
    passed = threading.Event()

    def pass_it() -> None:
        barrier(workspace.root)
        passed.set()

    with exclusive_commit(workspace.root, timeout=1.0):
        waiter = threading.Thread(target=pass_it)
        waiter.start()
        assert not passed.wait(0.2), "the barrier let a call in during a commit"
    waiter.join(30)
    assert passed.is_set()


def test_a_commit_that_outlasts_the_wait_refuses_the_call(workspace: Workspace) -> None:
    with (
        exclusive_commit(workspace.root, timeout=1.0),
        pytest.raises(CommitBusy, match="nothing was changed"),
    ):
        CommitBarrier(timeout=0.05)(workspace.root)


def test_barriers_do_not_hold_each_other_up(workspace: Workspace) -> None:
    barrier = CommitBarrier(timeout=0)
    barrier(workspace.root)
    barrier(workspace.root)
