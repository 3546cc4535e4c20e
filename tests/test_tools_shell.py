"""The bash tool: output and exit status, time limits, process-group cleanup, capped output."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from executor import (
    ErrorType,
    FenceError,
    Settings,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    ToolStatus,
)
from executor.contract import Workspace
from tests.support.expect import tool_error
from tests.support.pids import sleep_marker, survivors
from tests.support.sandbox import settings_for_mode
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools._cgroup import find_cgroups
from workers.tools._shell_settings import BashSettings
from workers.tools.shell import bash

RunTool = Callable[..., ToolResult]


def _wait_for(condition: threading.Event | Path, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not (
        condition.is_set() if isinstance(condition, threading.Event) else condition.exists()
    ):
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.01)


def _invoke(context: ToolContext, **arguments: object) -> str:
    """Call the tool directly, without the runner's truncation, to see its whole output."""
    result = bash.invoke(context, bash.validate(arguments))
    assert isinstance(result, str)
    return result


@pytest.fixture
def context(workspace: Workspace) -> ToolContext:
    return ToolContext(workspace=workspace)


@pytest.fixture
def mode_context(workspace: Workspace, sandbox_mode: str) -> ToolContext:
    return ToolContext(workspace=workspace, settings=settings_for_mode(sandbox_mode))


@pytest.fixture(autouse=True)
def _proc_available() -> None:
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("these tests find leftover processes through /proc")


def test_stderr_redirected_into_stdout_is_captured(run_tool: RunTool) -> None:
    result = run_tool(bash, command="ls /nonexistent 2>&1")

    assert result.status is ToolStatus.OK
    assert "No such file" in result.content
    assert "exit code: 2" in result.content


def test_nonzero_exit_reports_exit_code_stdout_and_stderr(run_tool: RunTool) -> None:
    result = run_tool(bash, command="echo out-text; echo err-text >&2; exit 3")

    assert result.status is ToolStatus.OK
    assert result.content == "exit code: 3\nstdout:\nout-text\nstderr:\nerr-text"


def test_success_without_output_says_so(run_tool: RunTool) -> None:
    result = run_tool(bash, command="true")

    assert result.content == "exit code: 0\n(no output)"


def test_exit_by_signal_is_named(run_tool: RunTool, sandbox_mode: str) -> None:
    result = run_tool(
        bash, _settings=settings_for_mode(sandbox_mode), command="echo before; kill -KILL $$"
    )

    assert result.status is ToolStatus.OK
    # The sandbox reports a killed shell as a shell reports a killed command: 128 + 9.
    first = "killed by signal SIGKILL" if sandbox_mode == "off" else "exit code: 137"
    assert result.content.startswith(first)
    assert "SIGKILL" in result.content.splitlines()[0]
    assert "\nstdout:\nbefore" in result.content


def test_runs_in_the_workspace_root(run_tool: RunTool, workspace: Workspace) -> None:
    result = run_tool(bash, command="pwd; touch made-here")

    assert result.content == f"exit code: 0\nstdout:\n{workspace.root}"
    assert (workspace.root / "made-here").is_file()


def test_stdin_is_closed_so_reading_it_returns_at_once(run_tool: RunTool) -> None:
    result = run_tool(bash, command="cat; echo after-cat", timeout=20)

    assert result.status is ToolStatus.OK
    assert "after-cat" in result.content
    assert result.duration_ms < 10_000


def test_output_is_decoded_with_replacement(run_tool: RunTool) -> None:
    result = run_tool(bash, command=r"printf 'caf\xc3\xa9 \xff!'")

    assert result.content == "exit code: 0\nstdout:\ncafé \ufffd!"


def test_timeout_kills_the_whole_process_group(run_tool: RunTool, sandbox_mode: str) -> None:
    marker = sleep_marker()

    result = run_tool(
        bash,
        _settings=settings_for_mode(sandbox_mode),
        command=f"echo started; sleep {marker} & sleep {marker} & sleep {marker}",
        timeout=1,
    )

    assert result.status is ToolStatus.ERROR
    assert (
        result.error_type is ErrorType.TIMEOUT
    )  # bash's own time limit: a timeout, as the runner's is
    assert "timed out after 1 s" in result.content
    assert "started" in result.content  # the partial output is kept
    assert survivors(marker) == []


def test_process_ignoring_sigterm_still_dies_on_timeout(
    run_tool: RunTool, sandbox_mode: str
) -> None:
    marker = sleep_marker()

    result = run_tool(
        bash,
        _settings=settings_for_mode(sandbox_mode),
        command=f"trap '' TERM; sleep {marker}; echo never",
        timeout=1,
    )

    assert result.status is ToolStatus.ERROR
    assert "timed out after 1 s" in result.content
    assert "never" not in result.content
    assert survivors(marker) == []


def test_background_processes_are_killed_after_a_normal_exit(
    run_tool: RunTool, sandbox_mode: str
) -> None:
    marker = sleep_marker()
    command = f"sleep {marker} & setsid sleep {marker} & echo launched"

    result = run_tool(bash, _settings=settings_for_mode(sandbox_mode), command=command)

    assert result.status is ToolStatus.OK
    assert result.content.startswith("exit code: 0\nstdout:\nlaunched")
    if sandbox_mode == "off":
        # Unsandboxed, they are found in the group and, setsid ones, in the cgroup; the
        # sandbox's PID namespace ends them with the shell, before they can be counted.
        assert "background processes" in result.content
    assert survivors(marker) == []


def test_no_cleanup_note_when_nothing_was_left(run_tool: RunTool) -> None:
    result = run_tool(bash, command="sleep 0.01 & wait; echo done")

    assert result.content == "exit code: 0\nstdout:\ndone"


def test_flood_is_capped_keeping_head_and_tail(context: ToolContext) -> None:
    output = _invoke(context, command="head -c 3000000 /dev/zero | tr '\\0' a; echo END-MARKER")

    half = 512 * 1024
    dropped = 3_000_000 + len("END-MARKER\n") - 2 * half
    head, omitted, tail = output.split("\n", 2)[2].split("\n")[:3]
    assert head == "a" * half
    assert omitted.startswith(f"... [{dropped} bytes of stdout omitted")
    # The last half minus the newline the report strips.
    assert tail == "a" * (half - len("END-MARKER\n")) + "END-MARKER"


def test_both_streams_flooding_at_once_do_not_deadlock(context: ToolContext) -> None:
    command = (
        "(head -c 2000000 /dev/zero | tr '\\0' o) & "
        "(head -c 2000000 /dev/zero | tr '\\0' e >&2) & wait; echo OUT-END; echo ERR-END >&2"
    )

    output = _invoke(context, command=command, timeout=60)

    stdout, stderr = output.split("\nstderr:\n")
    assert stdout.endswith("OUT-END")
    assert stderr.endswith("ERR-END")
    assert "bytes of stdout omitted" in stdout
    assert "bytes of stderr omitted" in stderr


def test_small_cap_keeps_exact_halves(workspace: Workspace) -> None:
    context = ToolContext(workspace=workspace, settings=BashSettings(max_output_bytes=10))

    output = _invoke(context, command="printf 0123456789ABCDEFGHIJ")

    assert output == (
        "exit code: 0\nstdout:\n01234\n... [10 bytes of stdout omitted: the limit is 10 bytes "
        "per stream, its first and last halves kept] ...\nFGHIJ"
    )


def test_flood_through_the_runner_is_ok_and_truncated(run_tool: RunTool) -> None:
    result = run_tool(bash, command="yes | head -c 5000000; echo TAIL-MARK")

    assert result.status is ToolStatus.OK
    assert result.truncated
    assert result.content.endswith("TAIL-MARK")


def test_timeout_above_the_maximum_is_refused(run_tool: RunTool) -> None:
    result = run_tool(bash, command="echo never", timeout=601)

    assert result.error_type is ErrorType.TOOL_ERROR
    assert "maximum of 600 s" in result.content


def test_non_positive_timeout_is_invalid(run_tool: RunTool) -> None:
    result = run_tool(bash, command="echo never", timeout=0)

    assert result.error_type is ErrorType.INVALID_ARGUMENTS
    assert "timeout" in result.content


def test_default_timeout_comes_from_the_settings(run_tool: RunTool) -> None:
    marker = sleep_marker()

    result = run_tool(bash, _settings=BashSettings(default_timeout=0.5), command=f"sleep {marker}")

    assert result.error_type is ErrorType.TIMEOUT
    assert "timed out after 0.5 s" in result.content
    assert survivors(marker) == []


def test_missing_bash_is_a_clear_error(
    run_tool: RunTool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-dir"))

    result = run_tool(bash, command="echo hi")

    assert result.error_type is ErrorType.TOOL_ERROR
    assert "bash is not available" in result.content


def test_cancel_kills_the_command_promptly(mode_context: ToolContext, workspace: Workspace) -> None:
    context = mode_context
    marker = sleep_marker()
    outcome: list[BaseException | str] = []

    def call() -> None:
        try:
            outcome.append(_invoke(context, command=f"touch started; sleep {marker}"))
        except ToolError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    _wait_for(workspace.root / "started")
    context.cancelled.set()
    thread.join(10)

    assert not thread.is_alive()
    assert isinstance(outcome[0], ToolError)
    assert "cancelled" in str(outcome[0])
    assert survivors(marker) == []


def test_lost_lock_kills_the_command(workspace: Workspace, sandbox_mode: str) -> None:
    marker = sleep_marker()
    lost = threading.Event()
    started = workspace.root / "started"

    def fence() -> None:
        if started.exists():
            lost.set()
            raise FenceError("The exclusive lock was lost.")

    env = CallEnvironment(
        workspace=workspace, fence=fence, settings=Settings(tools=[settings_for_mode(sandbox_mode)])
    )
    call = ToolCall(name="bash", arguments={"command": f"touch started; sleep {marker}"})

    result = run_call(call, ToolRegistry([bash]), env)

    assert lost.is_set()
    assert result.error_type is ErrorType.LOCK_LOST
    assert "were killed" in result.content
    assert survivors(marker) == []


def test_stops_before_the_runner_deadline_to_report(workspace: Workspace) -> None:
    marker = sleep_marker()
    context = ToolContext(workspace=workspace, deadline=time.monotonic() + 5.0)

    with pytest.raises(ToolError, match="timed out after"):
        _invoke(context, command=f"echo partial; sleep {marker}")

    assert time.monotonic() < context.deadline
    assert survivors(marker) == []


def test_a_nul_byte_in_the_command_is_a_clear_error(run_tool: RunTool) -> None:
    # Found by the fuzz run: it used to surface as "failed unexpectedly: embedded null byte".
    message = tool_error(run_tool(bash, command="echo '\x00'"))
    assert message.startswith("command contains a NUL character")
    assert "nothing ran" in message


def test_a_timeout_names_the_limit_that_held_the_command(run_tool: RunTool) -> None:
    if find_cgroups().pids is None:
        pytest.skip("no writable pids cgroup here: the processes limit is not enforced")
    marker = sleep_marker()
    settings = BashSettings(max_processes=5)

    # The refused forks make bash retry (it waits up to half a minute) into the time limit.
    result = run_tool(
        bash, _settings=settings, command=f"for i in $(seq 20); do sleep {marker} & done", timeout=2
    )

    assert result.error_type is ErrorType.TIMEOUT
    assert "timed out after 2 s" in result.content
    assert "It had reached the limit of 5 processes" in result.content
    assert survivors(marker) == []
