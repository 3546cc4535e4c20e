"""The bash tool's extra latency over ``subprocess.run``: it hears the shell end at once.

Each figure is the median of paired differences (tool minus ``subprocess.run``, same command,
the two runs of a pair back to back and in alternating order), so load on a busy machine hits
both sides alike. ``pytest -s`` prints the figures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from executor import ToolContext
from executor.contract import Workspace
from tests.support.waiting import PATIENCE_S
from workers.tools import _confine, _shell_run
from workers.tools._cgroup import Cgroups
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_warm import units
from workers.tools.shell import bash

_PAIRS = 30
_WARMUP = 3
_BOUND_MS = 10.0
# A shell that exits while its background child holds the pipes, seen to end: the bound is
# above _BOUND_MS because the tool then also kills the child, which subprocess.run does not,
# and only a figure (the pidfd itself is proven without a clock, below).
_BACKGROUND_BOUND_MS = 100.0


def _tool(context: ToolContext, command: str) -> Callable[[], str]:
    """The tool as the worker calls it, minus the runner: validate, then invoke."""

    def run() -> str:
        result = bash.invoke(context, bash.validate({"command": command}))
        assert isinstance(result, str)
        return result

    return run


def _reference(command: str, cwd: Path) -> Callable[[], str]:
    def run() -> str:
        done = subprocess.run(["bash", "-c", command], capture_output=True, cwd=cwd, check=False)
        return done.stdout.decode()

    return run


def _timed(run: Callable[[], str]) -> tuple[float, str]:
    start = time.perf_counter()
    output = run()
    return (time.perf_counter() - start) * 1000.0, output


def _extra_ms(tool: Callable[[], str], reference: Callable[[], str], label: str) -> float:
    """Median of (tool - reference) over interleaved pairs, printed with both sides' medians."""
    for _ in range(_WARMUP):
        tool()
        reference()
    differences: list[float] = []
    tool_times: list[float] = []
    reference_times: list[float] = []
    for index in range(_PAIRS):
        # Alternate which side goes first, so neither always runs on a warmer machine.
        if index % 2:
            reference_ms, _ = _timed(reference)
            tool_ms, _ = _timed(tool)
        else:
            tool_ms, _ = _timed(tool)
            reference_ms, _ = _timed(reference)
        tool_times.append(tool_ms)
        reference_times.append(reference_ms)
        differences.append(tool_ms - reference_ms)
    extra = statistics.median(differences)
    quartiles = statistics.quantiles(differences, n=4)
    print(
        f"\n{label}: tool median {statistics.median(tool_times):.2f} ms, subprocess.run median "
        f"{statistics.median(reference_times):.2f} ms, paired extra median {extra:.2f} ms "
        f"(quartiles {quartiles[0]:.2f} .. {quartiles[2]:.2f} ms, n={_PAIRS})"
    )
    return extra


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
def test_extra_latency_over_subprocess_run_is_small(
    context: ToolContext, workspace: Workspace, command: str
) -> None:
    tool, reference = _tool(context, command), _reference(command, workspace.root)
    report = tool()
    assert report.startswith("exit code: 0")
    assert reference().strip() in report

    extra = _extra_ms(tool, reference, repr(command))

    assert extra < _BOUND_MS, f"{command!r}: median extra latency {extra:.2f} ms"


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


def test_shell_exit_with_a_background_child_costs_little_over_subprocess_run(
    context: ToolContext, workspace: Workspace
) -> None:
    # The figure (``pytest -s``). The bound is a sanity check with room for a busy machine:
    # the test above proves, without a clock, that the exit is heard at once.
    _skip_without_pidfd()
    # The reference's child writes elsewhere, so subprocess.run returns when the shell exits:
    # the extra is the time the tool needs to hear that exit while the pipes are still open
    # (and to kill the child). The reference's children are left running; they are ended by
    # the pids they print.
    children: list[int] = []
    run_reference = _reference("sleep 5 >/dev/null 2>&1 & echo $!", workspace.root)

    def reference() -> str:
        output = run_reference()
        children.append(int(output))
        return output

    tool = _tool(context, "sleep 5 & echo $!")
    try:
        assert "background processes" in tool()

        extra = _extra_ms(tool, reference, "shell exits, background child holds the pipes")
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    assert extra < _BACKGROUND_BOUND_MS, f"median extra latency {extra:.2f} ms"


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
