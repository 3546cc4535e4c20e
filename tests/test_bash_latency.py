"""The bash tool hears the shell end at once, as ``subprocess.run`` does, and answers what it
printed; with a pidfd where the kernel has one, else by polling.

The extra latency over ``subprocess.run`` is a figure, printed by ``python -m
benchmarks.bash_latency`` (three runs, paired differences), not a bound a test holds: on a
busy machine any bound is either loose or flaky.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from benchmarks.bash_latency import reference_call, tool_call
from executor import ToolContext
from executor.contract import Workspace
from tests.support.waiting import PATIENCE_S
from workers.tools import _confine, _shell_run
from workers.tools._cgroup import Cgroups
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_warm import units
from workers.tools.shell import bash

# The tool as the worker calls it (validate, then invoke), and subprocess.run of the same
# command: the benchmark's own two sides.
_tool, _reference = tool_call, reference_call


@pytest.fixture
def context(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> ToolContext:
    # The tool's own loop against subprocess.run, so no sandbox and no cgroup (on some kernels
    # a sleeping process in a cgroup wakes late); benchmarks.sandbox measures their cost.
    monkeypatch.setattr(_confine, "find_cgroups", lambda: Cgroups(None, None, None))
    return ToolContext(workspace=workspace, settings=BashSettings(sandbox="off"))


@pytest.mark.parametrize(
    "command",
    [
        "true",
        "echo hi",
        "sleep 0.05",
        "sleep 0.1",
        # The shell exits at once; its background child holds stdout for 0.1 s. The tool kills
        # the child, subprocess.run waits for the pipe: the tool must not be the slower one.
        "sleep 0.1 & echo hi",
    ],
)
def test_the_tool_answers_what_subprocess_run_prints(
    context: ToolContext, workspace: Workspace, command: str
) -> None:
    tool, reference = _tool(context, command), _reference(command, workspace.root)
    report = tool()
    assert report.startswith("exit code: 0")
    assert reference().strip() in report


def _skip_without_pidfd() -> None:
    if not hasattr(os, "pidfd_open") or _shell_run.open_pidfd(os.getpid()) is None:
        pytest.skip(
            "pidfd_open is missing or refused here (old kernel or seccomp): the exit is polled"
        )


def test_shell_exit_is_heard_while_a_background_child_holds_the_pipes(
    context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No tight bound decides it: with the poll interval longer than the call's own limit (60
    # s), only the shell's pidfd can end the wait before that limit; a poll would wait it out.
    # Half the limit leaves any busy machine room.
    _skip_without_pidfd()
    monkeypatch.setattr(_shell_run, "_POLL", 3600.0)
    call = bash.validate({"command": "sleep 120 & echo $!", "timeout": 60})
    started = time.monotonic()
    report = bash.invoke(context, call)
    waited = time.monotonic() - started
    assert isinstance(report, str)
    assert report.startswith("exit code: 0"), report
    assert "background processes" in report
    assert waited < 30.0, f"the exit was heard only after {waited:.1f} s"


def test_without_a_pidfd_the_exit_is_still_polled_for(
    context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where pidfd_open is missing or refused, the loop falls back to polling for the exit.
    monkeypatch.setattr(_shell_run, "open_pidfd", lambda pid: None)

    assert _tool(context, "echo out; exit 3")() == "exit code: 3\nstdout:\nout"
    report = _tool(context, "sleep 5 & echo launched")()
    assert report.startswith("exit code: 0\nstdout:\nlaunched\n")
    assert "background processes" in report


def test_no_descriptor_is_left_open(context: ToolContext) -> None:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("open descriptors are counted through /proc")
    # Counted once the launch made ahead for the next call is ready (its pipes are open):
    # every call leaves exactly one such launch, and no descriptor of its own.
    _tool(context, "true")()
    assert units().settle(PATIENCE_S)
    before = len(os.listdir("/proc/self/fd"))

    for command in ("true", "sleep 5 & echo hi", "exit 1"):
        _tool(context, command)()

    assert units().settle(PATIENCE_S)
    assert len(os.listdir("/proc/self/fd")) == before
