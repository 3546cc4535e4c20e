"""Background processes that fight back: fork bombs, closed terminals, ignored signals,
floods of output, memory and CPU hogs, and a flood of start calls.

On a real redis-server with real worker processes, in bash's sandbox (bubblewrap) and its
cgroups: each hostile process is stopped at its limit, named in its record, and leaves
nothing running; the worker serving it stays alive.
"""

from __future__ import annotations

import itertools
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import Executor, Sessions, Settings, ToolResult, ToolStatus
from tests.support.procs import MakeWorkers
from tests.support.sessions import call, host_settings, ok
from tests.support.waiting import wait_for
from tests.test_processes_ownership import end_daemons_under, host_folder, marked
from workers.processes import _place as place
from workers.tools._cgroup import find_cgroups
from workers.tools._shell_settings import BashSettings

pytestmark = pytest.mark.proof

_ids = itertools.count(1)
PATIENCE = 90.0
_MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def no_daemon_outlives_the_test(tmp_path: Path) -> Iterator[None]:
    """What a failed test leaves (keepers, network holders under its folder) is stopped."""
    yield
    end_daemons_under(tmp_path)


def session_of(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, workers: int = 1, **bash: Any
) -> Settings:
    """Settings of one host whose workers (started here) run bash with ``bash``'s settings
    (sandboxed unless they say otherwise), and a session "s" on it."""
    bash.setdefault("sandbox", "required")
    settings = host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(**bash)])
    make_workers(settings).start(workers)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
    return settings


def one(executor: Executor, name: str, **arguments: object) -> ToolResult:
    [result] = executor.run([call(f"{name}-{next(_ids)}", name, **arguments)], timeout=120)
    return result


def record(settings: Settings, process: str = "p1") -> dict[str, Any]:
    """The process's state.json as its keeper last wrote it."""
    data = place.read_json(host_folder(settings, "s") / process / place.STATE)
    assert data is not None, f"no state.json for {process}"
    return data


def ended(settings: Settings, process: str = "p1") -> dict[str, Any]:
    """The process's record once its keeper recorded its end."""
    found: dict[str, Any] = {}

    def done() -> bool:
        found.update(record(settings, process))
        return found["state"] not in ("starting", "running")

    wait_for(done, f"{process} to end", timeout=PATIENCE, interval=0.1)
    return found


def no_process_named(marker: str) -> None:
    # A SIGKILLed process leaves the process table a moment after the signal; one that
    # survived stays, and fails this wait.
    wait_for(lambda: not marked(marker), f"no process named {marker}", timeout=15)


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_fork_bomb_is_stopped_at_the_processes_limit_and_leaves_nothing(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, sandbox: str
) -> None:
    """A fork bomb whose command stays (a `sleep` after it) meets the pids cgroup: the keeper
    stops it, naming the processes limit, and none of its processes is left. Oracle: a
    record that names no limit, a process still running, or a bomb process left in /proc."""
    if find_cgroups().pids is None:
        pytest.skip(f"no pids cgroup is writable here: {find_cgroups().missing}")
    settings = session_of(redis_url, tmp_path, make_workers, sandbox=sandbox, max_processes=40)
    marker = uuid.uuid4().hex
    bomb = f": {marker}; :(){{ :|:& }};:; exec -a sleep-{marker} sleep 1000"
    with Executor(settings=settings, session="s") as executor:
        ok(one(executor, "process_start", command=bomb, wait=0))
        data = ended(settings)
        assert data["state"] == "stopped", data
        assert "limit of 40 processes" in data["reason"], data
        assert "TOOLPOOL_BASH_MAX_PROCESSES" in data["reason"], data
        no_process_named(marker)
        listed = ok(one(executor, "process_list"))
        assert "p1  stopped" in listed, listed
        assert "limit of 40 processes" in listed, listed


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_fork_bomb_whose_first_bash_ends_at_once_leaves_nothing(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, sandbox: str
) -> None:
    """The plain `:(){ :|:& };:` ends its own bash at once, leaving the bomb to run on: its
    end ends the bomb too (the sandbox's PID namespace, or the cgroup), recorded either as
    its exit or as the processes limit if a fork was refused first. Oracle: a bomb process
    left in /proc, a process recorded as running, or a stop naming another reason."""
    if find_cgroups().pids is None:
        pytest.skip(f"no pids cgroup is writable here: {find_cgroups().missing}")
    settings = session_of(redis_url, tmp_path, make_workers, sandbox=sandbox, max_processes=40)
    marker = uuid.uuid4().hex
    with Executor(settings=settings, session="s") as executor:
        ok(one(executor, "process_start", command=f": {marker}; :(){{ :|:& }};:", wait=0))
        data = ended(settings)
        print(f"the plain fork bomb ended: {data['state']} {data['reason'] or data['exit_code']}")
        if data["state"] == "stopped":
            assert "limit of 40 processes" in data["reason"], data
        else:
            assert data["state"] == "exited", data
        no_process_named(marker)


@pytest.mark.parametrize(
    "closing",
    [
        pytest.param("exec >&- 2>&-", id="stdout-and-stderr"),
        pytest.param("exec <&- >&- 2>&-", id="the-whole-terminal"),
        pytest.param("exec </dev/null >/dev/null 2>&1", id="to-dev-null"),
    ],
)
def test_a_process_that_closes_its_output_keeps_running_until_stopped(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, closing: str
) -> None:
    """A command that closes its terminal is still running: listed as such, read as such,
    and process_stop ends it. Oracle: the keeper taking the closed terminal for the end
    ('exited' or 'lost' while the sleep runs), or the stop leaving the sleep alive."""
    settings = session_of(redis_url, tmp_path, make_workers)
    marker = uuid.uuid4().hex
    with Executor(settings=settings, session="s") as executor:
        command = f"echo before-{marker}; {closing}; exec -a sleep-{marker} sleep 1000"
        started = ok(one(executor, "process_start", command=command, wait=5))
        assert f"before-{marker}" in started, started
        wait_for(lambda: marked(f"sleep-{marker}"), "the sleep to run", timeout=PATIENCE)
        listed = ok(one(executor, "process_list"))
        assert "p1  running" in listed, listed
        read = ok(one(executor, "process_output", process="p1", offset=0, wait=1))
        assert "p1 is running" in read, read
        assert f"before-{marker}" in read, read
        stopped = ok(one(executor, "process_stop", process="p1"))
        assert "p1 is stopped: stopped by process_stop (SIGTERM)" in stopped, stopped
    assert record(settings)["state"] == "stopped"
    no_process_named(marker)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("trap '' TERM; echo ready; exec -a sleep-{m} sleep 1000", id="bash-trap"),
        pytest.param(
            "python3 -u -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            ' print("ready"); time.sleep(1000)\' {m}',
            id="python",
        ),
        pytest.param(
            "trap '' TERM; setsid bash -c \"trap '' TERM; exec -a sleep-{m} sleep 1000\" & "
            "echo ready; exec -a wait-{m} sleep 1000",
            id="setsid-child",
        ),
    ],
)
@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, command: str, sandbox: str
) -> None:
    """process_stop's SIGTERM is ignored; SIGKILL follows after the grace and the process is
    'stopped', killed by SIGKILL. Oracle: a stop that returns with the process still running,
    or a process named by the marker left alive (a child in a session of its own, outside
    the process group, included)."""
    settings = session_of(redis_url, tmp_path, make_workers, sandbox=sandbox)
    marker = uuid.uuid4().hex
    with Executor(settings=settings, session="s") as executor:
        started = ok(one(executor, "process_start", command=command.format(m=marker), wait=10))
        assert "ready" in started, started
        stopped = ok(one(executor, "process_stop", process="p1"))
        assert "p1 is stopped: stopped by process_stop (SIGTERM)" in stopped, stopped
    data = record(settings)
    assert data["state"] == "stopped", data
    assert data["signal"] == "SIGKILL", data
    no_process_named(marker)


def test_a_flood_of_output_is_stopped_at_the_kept_output_cap_which_it_fills_exactly(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    """`yes` past a 1 MiB kept-output cap is stopped naming the output limit, and its output
    file holds exactly 1 MiB. Oracle: a file longer or shorter than the cap, a process that
    keeps running (or 'exited'), or a reason naming no limit."""
    settings = session_of(redis_url, tmp_path, make_workers, background_output_mb=1)
    marker = uuid.uuid4().hex
    with Executor(settings=settings, session="s") as executor:
        ok(one(executor, "process_start", command=f"exec -a yes-{marker} yes {marker}", wait=0))
        data = ended(settings)
        assert data["state"] == "stopped", data
        assert "kept-output limit of 1 MiB" in data["reason"], data
        assert "TOOLPOOL_BASH_BACKGROUND_OUTPUT_MB" in data["reason"], data
        output = host_folder(settings, "s") / "p1" / place.OUTPUT
        assert output.stat().st_size == _MIB
        assert data["output_bytes"] == _MIB, data
        head = output.read_bytes()[:200].decode()
        assert head.startswith(f"{marker}\r\n{marker}\r\n"), head
        no_process_named(marker)
        tail = ok(one(executor, "process_output", process="p1", offset=_MIB - 100))
        assert f"output bytes {_MIB - 100}-{_MIB} of {_MIB}" in tail, tail


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_memory_hog_is_stopped_at_the_memory_limit(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, sandbox: str
) -> None:
    """A process allocating past TOOLPOOL_BASH_MEMORY_MB is killed by the kernel in its
    memory cgroup, and its record says 'stopped' naming the memory limit. Oracle: 'exited'
    with a signal and no limit named, or a process left running past the limit."""
    found = find_cgroups()
    if found.memory is None:
        print(f"skipped: no memory cgroup is writable here: {found.missing}")
        pytest.skip(f"no memory cgroup is writable here: {found.missing}")
    settings = session_of(redis_url, tmp_path, make_workers, sandbox=sandbox, memory_mb=64)
    marker = uuid.uuid4().hex
    hog = (
        "python3 -c 'import time\n"
        "kept = []\n"
        "while True:\n"
        '    kept.append(b"x" * (1 << 20))\n'
        "    time.sleep(0.001)' " + marker
    )
    with Executor(settings=settings, session="s") as executor:
        ok(one(executor, "process_start", command=hog, wait=0))
        data = ended(settings)
        assert data["state"] == "stopped", data
        assert "memory limit of 64 MiB" in data["reason"], data
        assert "TOOLPOOL_BASH_MEMORY_MB" in data["reason"], data
        no_process_named(marker)


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_busy_loop_is_stopped_at_the_cpu_time_limit(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, sandbox: str
) -> None:
    """A busy loop past TOOLPOOL_BASH_BACKGROUND_CPU_SECONDS is stopped naming the CPU limit.
    Oracle: the loop running on (the test times out), ending as 'exited' (killed by SIGXCPU
    with no limit named), or a reason naming another limit."""
    settings = session_of(
        redis_url, tmp_path, make_workers, sandbox=sandbox, background_cpu_seconds=2
    )
    marker = uuid.uuid4().hex
    with Executor(settings=settings, session="s") as executor:
        ok(one(executor, "process_start", command=f": {marker}; while :; do :; done", wait=0))
        data = ended(settings)
        assert data["state"] == "stopped", data
        assert "CPU time limit of 2 s" in data["reason"], data
        assert "TOOLPOOL_BASH_BACKGROUND_CPU_SECONDS" in data["reason"], data
        no_process_named(marker)


def test_a_thousand_start_calls_run_exactly_the_cap_and_answer_every_other(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    """1,000 process_start calls in one session, sent in four turns: exactly
    TOOLPOOL_BASH_BACKGROUND_MAX run, every other call answers an error naming the cap, every
    call has a result, the worker stays alive, and the session's delete leaves nothing
    running. Oracle: more or fewer than the cap running, a call without a result (timeout)
    or failing for another reason, a dead worker, or a process named by the marker left."""
    settings = host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox="required")])
    [worker] = make_workers(settings).start(1)
    cap = BashSettings().background_max
    marker = uuid.uuid4().hex
    results: list[ToolResult] = []
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        with Executor(settings=settings, session="s") as executor:
            for turn in range(4):
                calls = [
                    call(
                        f"start-{turn}-{n}",
                        "process_start",
                        command=f"exec -a sleep-{marker}-{turn}-{n} sleep 1000",
                        wait=0,
                    )
                    for n in range(250)
                ]
                began = time.monotonic()
                results += executor.run(calls, timeout=600)
                print(f"turn {turn}: 250 process_start calls in {time.monotonic() - began:.1f} s")
        assert worker.alive(), worker.diagnosis()
        assert len(results) == 1000
        assert len({r.call_id for r in results}) == 1000
        started = [r for r in results if r.status is ToolStatus.OK]
        refused = [r for r in results if r.status is not ToolStatus.OK]
        assert len(started) == cap, [r.content for r in started]
        assert all("Started background process" in r.content for r in started)
        for result in refused:
            assert result.error_type == "tool_error", (result.call_id, result.content)
            assert "TOOLPOOL_BASH_BACKGROUND_MAX" in result.content, result.content
            assert f"already runs {cap} background processes" in result.content, result.content
        sleeping = [argv for _, argv in marked(marker) if argv[0].startswith(f"sleep-{marker}")]
        assert len(sleeping) == cap, sleeping
        with Executor(settings=settings, session="s") as executor:
            listed = ok(one(executor, "process_list"))
        assert f"{cap} running" in listed, listed
        assert sessions.delete("s")
    assert worker.alive(), worker.diagnosis()
    no_process_named(marker)
    assert not host_folder(settings, "s").exists()


def _preload_library(settings: Settings, flag: Path) -> None:
    """Put a library in the session's folder that appends a line to ``flag`` in every process
    that loads it; ``flag`` lies outside the sandbox's sight (its /tmp is its own), so the
    line appears only where the library ran outside the sandbox."""
    source = (
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void escaped(void) {\n"
        f'  FILE *out = fopen("{flag}", "a");\n'
        '  if (out) { fprintf(out, "pid %d\\n", (int)getpid()); fclose(out); }\n'
        "}\n"
    )
    (Path(settings.worker.sessions_root or "") / "s" / "escape.c").write_text(source)


def _export_preload(executor: Executor) -> None:
    """Build the library in the sandbox and export LD_PRELOAD, kept as the session's state."""
    built = ok(
        one(
            executor,
            "bash",
            command="gcc -shared -fPIC -o escape.so escape.c && export LD_PRELOAD=$PWD/escape.so",
        )
    )
    assert "exit code: 0" in built, built


def test_a_preload_exported_in_the_session_never_runs_outside_the_sandbox(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    """A session exports LD_PRELOAD naming a library of its folder; process_start then runs
    the launcher, nsenter and bubblewrap (outside the sandbox, as the worker: root here)
    without it, and the command inside still gets it. Oracle: a line in the flag file (the
    library ran outside the sandbox: a sandbox escape), or the variable missing inside."""
    if shutil.which("gcc") is None:
        print("skipped: no gcc to build the preloaded library")
        pytest.skip("no gcc to build the preloaded library")
    settings = session_of(redis_url, tmp_path, make_workers)
    flag = tmp_path / "escaped"
    _preload_library(settings, flag)
    with Executor(settings=settings, session="s") as executor:
        _export_preload(executor)
        started = ok(
            one(executor, "process_start", command='echo "inside=$LD_PRELOAD"; sleep 1', wait=5)
        )
        assert "inside=/" in started, started
        assert "escape.so" in started, started
        ended(settings)
    assert not flag.exists(), f"the session's library ran outside the sandbox: {flag.read_text()}"


def test_a_preload_exported_in_the_session_never_runs_outside_bashs_sandbox(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    """As above, for the session's next bash command. Oracle: a line in the flag file."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the preloaded library")
    settings = session_of(redis_url, tmp_path, make_workers)
    flag = tmp_path / "escaped"
    _preload_library(settings, flag)
    with Executor(settings=settings, session="s") as executor:
        _export_preload(executor)
        ok(one(executor, "bash", command="true"))
    assert not flag.exists(), f"the session's library ran outside the sandbox: {flag.read_text()}"
