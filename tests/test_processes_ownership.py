"""Who owns a background process: its session, not the call or the worker that started it.

On a real redis-server with real worker processes (and a real ``WorkerPool``): a process
outlives the worker that started it and is driven by another; it ends, with everything it
started, when its session is deleted or idles out, or when the pool on its host stops; the
tools refuse outside a session; and one session never sees or drives another's processes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from executor import Executor, Sessions, Settings, ToolResult, ToolStatus
from executor.wire import Keys
from tests.support.procs import MakeWorkers, running_pool
from tests.support.sessions import call, host_settings, in_index, ok
from tests.support.waiting import gone, wait_for
from workers.processes import _place as place
from workers.tools._shell_settings import BashSettings

pytestmark = pytest.mark.proof

_ids = itertools.count(1)
# Long enough for a loaded machine to start a keeper and a sandbox; only a broken guarantee waits
# this long.
PATIENCE = 60.0


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox="required")])


@pytest.fixture(autouse=True)
def no_daemon_outlives_the_test(tmp_path: Path) -> Iterator[None]:
    """Whatever a failed test leaves behind (keepers, network holders under its temporary
    folder) is stopped at teardown: SIGTERM, then SIGKILL, by pid."""
    yield
    end_daemons_under(tmp_path)


def end_daemons_under(root: Path) -> list[int]:
    """Stop the keepers and session network holders whose folder lies under ``root``."""
    found = [pid for pid, argv in processes() if _daemon_under(argv, root)]
    for pid in found:
        with_pid(pid, signal.SIGTERM)
    try:
        wait_for(lambda: all(gone(pid) for pid in found), "leftover daemons", timeout=15)
    except AssertionError:
        for pid in found:
            with_pid(pid, signal.SIGKILL)
    return found


def _daemon_under(argv: list[str], root: Path) -> bool:
    ours = any(a in ("workers.tools._keeper", "workers.processes._netns") for a in argv)
    return ours and any(a.startswith(str(root)) for a in argv)


def with_pid(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def processes() -> list[tuple[int, list[str]]]:
    """Every live (not zombie) process of the machine and its argv, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not gone(int(entry.name)):
            found.append((int(entry.name), [a.decode(errors="replace") for a in argv if a]))
    return found


def marked(marker: str) -> list[tuple[int, list[str]]]:
    """The live processes whose argv names ``marker``."""
    return [(pid, argv) for pid, argv in processes() if any(marker in a for a in argv)]


def one(executor: Executor, name: str, **arguments: object) -> ToolResult:
    [result] = executor.run([call(f"{name}-{next(_ids)}", name, **arguments)], timeout=120)
    return result


def error(result: ToolResult) -> str:
    """The content of a failed result; fails the test for a success."""
    assert result.status is not ToolStatus.OK, (result.call_id, result.content)
    return result.content


def host_folder(settings: Settings, name: str) -> Path:
    return place.session_host_folder(Path(settings.worker.sessions_root or ""), name)


def family(marker: str) -> str:
    """A command that starts processes every way a command may leave some behind (in the
    background, in a session of their own, double-forked, ignoring SIGTERM and SIGHUP), each
    with ``marker`` in its argv, and then waits."""
    return (
        f"exec -a sleep-{marker}-a sleep 1000 & "
        f"exec -a sleep-{marker}-b sleep 1000 & "
        f"python3 -c 'import time; time.sleep(1000)' {marker}-py & "
        f"setsid bash -c 'sleep 1000; : {marker}-setsid' & "
        f"( ( trap '' TERM HUP; exec -a sleep-{marker}-orphan sleep 1000 ) & ) ; "
        f"echo started-{marker}; wait"
    )


def family_names(marker: str) -> list[str]:
    """The argv words naming each process ``family(marker)`` leaves running."""
    return [f"{marker}{tail}" for tail in ("-a", "-b", "-py", "-setsid", "-orphan")]


def start_family(executor: Executor, marker: str) -> str:
    """Start ``family(marker)`` as p1; return the answer once each of its processes runs."""
    started = ok(one(executor, "process_start", command=family(marker), wait=5))
    assert "Started background process p1" in started, started

    def all_there() -> bool:
        words = [a for _, argv in marked(marker) for a in argv]
        return all(any(a.endswith(name) for a in words) for name in family_names(marker))

    wait_for(all_there, f"the processes of {marker}", timeout=PATIENCE)
    return started


def assert_all_gone(settings: Settings, client: redis.Redis, name: str, marker: str) -> None:
    """Nothing of session ``name``'s processes is left: no process, no host folder, no hash."""
    # A SIGKILLed process leaves the process table a moment after the signal; one that
    # survived stays, and fails this wait.
    wait_for(lambda: not marked(marker), f"no process named {marker}", timeout=15)
    assert not host_folder(settings, name).exists(), sorted(host_folder(settings, name).iterdir())
    assert not client.exists(Keys().session_processes(name))


def test_a_process_outlives_the_worker_that_started_it_and_another_worker_drives_it(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    """A keeper is not the worker's child: SIGKILL the worker that ran process_start, and a new
    worker (another process) types into the process and reads the answer it wrote after the
    kill. Oracle: a keeper tied to its worker (its process group, a parent-death signal, the
    worker's cgroup) dies with it; the new worker then finds it 'lost' and the input fails."""
    workers = make_workers(settings)
    [first] = workers.start(1)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
    marker = uuid.uuid4().hex
    command = f'while read line; do echo "heard-$line"; done # {marker}'
    with Executor(settings=settings, session="s") as executor:
        ok(one(executor, "process_start", command=command, wait=0))
        record = place.read_record(host_folder(settings, "s") / "p1")
        assert record is not None
        assert record[0].state == "running", record
        keeper = record[1]
        workers.kill(first)
        assert not first.alive()
        [second] = workers.start(1)
        assert second.pid != first.pid
        assert not gone(keeper), "the keeper died with the worker that started it"
        answered = ok(one(executor, "process_input", process="p1", text=f"after-kill-{marker}"))
        assert f"heard-after-kill-{marker}" in answered, answered
        assert "p1 is running" in answered, answered
        listed = ok(one(executor, "process_list"))
        assert "p1  running" in listed, listed
        read = ok(one(executor, "process_output", process="p1"))
        assert f"heard-after-kill-{marker}" in read, read
        ok(one(executor, "process_stop", process="p1"))


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_deleting_the_session_stops_the_process_and_all_it_started(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, client: redis.Redis, sandbox: str
) -> None:
    """Sessions.delete ends the process and every process it started (in the background, in
    its own session, double-forked, ignoring SIGTERM), removes the session's host folder and
    its processes' hash in Redis; in the sandbox (its PID namespace ends them) and without it
    (its cgroup finds them). Oracle: a leftover process named by the marker in /proc, the
    folder on disk, or the hash in Redis."""
    settings = host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox=sandbox)])
    make_workers(settings).start(1)
    marker = uuid.uuid4().hex
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        with Executor(settings=settings, session="s") as executor:
            start_family(executor, marker)
        assert client.exists(Keys().session_processes("s"))
        assert sessions.delete("s")
    assert_all_gone(settings, client, "s", marker)


def test_a_session_that_idles_out_stops_its_processes(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    """A session idle past its TTL is swept with its processes, as a delete would. Oracle: the
    session is gone from the index but a process named by the marker still runs, or its host
    folder or processes' hash is left."""
    settings = host_settings(
        redis_url,
        tmp_path,
        "h1",
        tools=[BashSettings(sandbox="required")],
        session_sweep_s=0.5,
    )
    make_workers(settings).start(1)
    marker = uuid.uuid4().hex
    with Sessions(settings=settings) as sessions:
        # A TTL long enough for the start and the checks below, short for the test.
        sessions.create("s", idle_ttl=8)
        with Executor(settings=settings, session="s") as executor:
            start_family(executor, marker)
    assert in_index(client, "s")
    wait_for(lambda: not in_index(client, "s"), "the session to idle out", timeout=PATIENCE)
    assert_all_gone(settings, client, "s", marker)


def test_the_pool_stopping_stops_its_processes_and_records_why(
    settings: Settings, client: redis.Redis
) -> None:
    """A WorkerPool that stops ends the background processes its workers started: the keeper
    is gone and the process's state.json says 'stopped' for a reason naming the pool. Oracle:
    the keeper (or a process named by the marker) alive after the pool stopped, or a state
    that is not 'stopped' by the pool."""
    marker = uuid.uuid4().hex
    with running_pool(settings, workers=1):
        with Sessions(settings=settings) as sessions:
            sessions.create("s")
        with Executor(settings=settings, session="s") as executor:
            start_family(executor, marker)
        found = place.read_record(host_folder(settings, "s") / "p1")
        assert found is not None
        assert found[0].state == "running", found
        keeper = found[1]
        assert not gone(keeper)
    # An exiting process drops its command line before it leaves the process table, and the
    # pool counts it gone from then on; a keeper that outlived its pool fails this wait.
    wait_for(lambda: gone(keeper), "the keeper to be gone with its pool", timeout=15)
    wait_for(lambda: not marked(marker), f"no process named {marker}", timeout=15)
    data = place.read_json(host_folder(settings, "s") / "p1" / place.STATE)
    assert data is not None
    assert data["state"] == "stopped", data
    assert "pool" in data["reason"], data


def test_outside_a_session_each_process_tool_answers_an_error_naming_sessions(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    """The five tools need a session: outside one each answers an error that says so. Oracle:
    a success, or an error that does not name sessions (a crash, a missing folder)."""
    make_workers(settings).start(1)
    calls = {
        "process_start": {"command": "sleep 1000"},
        "process_output": {"process": "p1"},
        "process_input": {"process": "p1", "text": "hi"},
        "process_stop": {"process": "p1"},
        "process_list": {},
    }
    with Executor(settings=settings) as executor:
        for name, arguments in calls.items():
            content = error(one(executor, name, **arguments))
            assert "works only in a session" in content, (name, content)
            assert "session create" in content, (name, content)


def test_two_sessions_processes_are_apart(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    """Session B neither lists, reads, types into nor stops session A's process; its own
    process of the same id is its own. Oracle: A's marker in anything B is answered, B's call
    succeeding on A's process, or A's process no longer running after B's stop."""
    make_workers(settings).start(2)
    a_marker, b_marker = uuid.uuid4().hex, uuid.uuid4().hex
    with Sessions(settings=settings) as sessions:
        sessions.create("a")
        sessions.create("b")
    with (
        Executor(settings=settings, session="a") as a,
        Executor(settings=settings, session="b") as b,
    ):
        ok(one(a, "process_start", command=f"echo {a_marker}; sleep 1000", wait=5))
        listed = ok(one(b, "process_list"))
        assert "has no background processes" in listed, listed
        assert a_marker not in listed, listed
        for name, arguments in (
            ("process_output", {"process": "p1"}),
            ("process_input", {"process": "p1", "text": "hi"}),
            ("process_stop", {"process": "p1"}),
        ):
            content = error(one(b, name, **arguments))
            assert "No background process 'p1' in session 'b'" in content, (name, content)
            assert a_marker not in content, (name, content)
        ok(one(b, "process_start", command=f"echo {b_marker}; sleep 1000", wait=5))
        b_listed = ok(one(b, "process_list"))
        assert b_marker in b_listed, b_listed
        assert a_marker not in b_listed, b_listed
        b_read = ok(one(b, "process_output", process="p1"))
        assert b_marker in b_read, b_read
        assert a_marker not in b_read, b_read
        ok(one(b, "process_stop", process="p1"))
        a_read = ok(one(a, "process_output", process="p1"))
        assert "p1 is running" in a_read, a_read
        assert a_marker in a_read, a_read
        assert b_marker not in a_read, a_read
        ok(one(a, "process_stop", process="p1"))


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_process_whose_keeper_is_killed_dies_with_it_and_is_listed_lost(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, client: redis.Redis, sandbox: str
) -> None:
    """SIGKILL a keeper (the kernel's OOM killer, an operator): the tools list its process as
    'lost' and nothing it started is left once they did (in the sandbox it ends with its
    keeper; without it, the worker that finds it lost kills what is left in its cgroups);
    the session's delete leaves nothing. Oracle: a process named by the marker alive after
    the listing (nothing would ever stop it: no keeper to ask, no record that runs), or a
    record still 'running', on the host's disk or in Redis."""
    settings = host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox=sandbox)])
    make_workers(settings).start(1)
    marker = uuid.uuid4().hex
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        with Executor(settings=settings, session="s") as executor:
            start_family(executor, marker)
            found = place.read_record(host_folder(settings, "s") / "p1")
            assert found is not None
            with_pid(found[1], signal.SIGKILL)
            wait_for(lambda: gone(found[1]), "the keeper to die")
            listed = ok(one(executor, "process_list"))
            assert "p1  lost" in listed, listed
            wait_for(lambda: not marked(marker), f"no process named {marker}", timeout=15)
            again = ok(one(executor, "process_list"))
            assert "p1  lost" in again, again
            # What the listing found is what everyone sees: no record says "running" still.
            [record] = sessions.processes("s")
            assert (record.id, record.state) == ("p1", "lost"), record
            assert record.reason.startswith("its keeper process ended without a record")
        assert sessions.delete("s")
    assert_all_gone(settings, client, "s", marker)
