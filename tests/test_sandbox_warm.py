"""bash's sandbox made ahead of the command (``workers.tools._shell_warm``), on real bubblewrap.

A call that finds its place's sandbox made ahead must get what a call that makes its own
gets, and nothing of any other call: no process, no ``/tmp``, no shell variable of the last
command, no other session's folder, a path hidden that appeared after the sandbox was made,
its limits, its session's network and shell state. Each test first runs a call (which asks
for the sandbox of the next one), waits for the units to be made, and checks from the units'
counts that the next call ran in the sandbox made ahead (or, where the place changed, that
it did not).
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from executor import Executor, Sessions, ToolContext, ToolError
from executor.contract import SessionPlace, ShellState, Workspace
from tests.support.pids import processes_where, processes_with, sleep_marker, survivors
from tests.support.procs import MakeWorkers
from tests.support.sandbox import require_sandbox
from tests.support.sessions import call, host_settings, ok
from tests.support.waiting import PATIENCE_S, gone, wait_for
from workers.processes._ending import end_under
from workers.processes._netns import current, join, stop_holder
from workers.processes._recent import ACTIVE, mark_ran, note, ran_lately, recent
from workers.tools import _shell_peers
from workers.tools._cgroup import find_cgroups
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_warm import MADE_IN_CALL, SANDBOX_AHEAD, units
from workers.tools.shell import bash


@pytest.fixture(autouse=True)
def _sandbox_works() -> None:
    require_sandbox()


class _Session:
    """A session as a worker of its host runs its calls, in this process."""

    def __init__(self, sessions_root: Path, name: str, settings: BashSettings) -> None:
        self.sessions_root = sessions_root
        self.folder = sessions_root / name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.host_folder = sessions_root / ".toolpool-host" / name
        self.settings = settings
        self.cwd = "."
        self.env: dict[str, str] = {}

    def run(self, command: str, **arguments: object) -> str:
        def save(cwd: str, env: dict[str, str]) -> bool:
            self.cwd, self.env = cwd, env
            return True

        context = ToolContext(
            workspace=Workspace(self.folder),
            settings=self.settings,
            shell=ShellState(cwd=self.cwd, env=dict(self.env), save=save),
            session=SessionPlace(self.folder.name, "h", self.host_folder),
            worker_folders=(self.sessions_root,),
        )
        return str(bash.invoke(context, bash.validate({"command": command, **arguments})))

    def stdout(self, command: str) -> list[str]:
        report = self.run(command)
        assert report.startswith("exit code: 0"), report
        return report.partition("stdout:\n")[2].splitlines()


@pytest.fixture
def sessions_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "sessions"
    root.mkdir()
    yield root
    # The sessions' network holders end with their host folders (as a session's deletion
    # ends them): none is started again where its folder is gone, and one a worker's watch
    # was starting meanwhile is ended here too. The units made for them are removed with the
    # test's others.
    for host in (root / ".toolpool-host").glob("*"):
        stop_holder(host)
    shutil.rmtree(root / ".toolpool-host", ignore_errors=True)
    assert units().settle(PATIENCE_S)
    end_under(root, "the test is over")


@pytest.fixture
def settings() -> BashSettings:
    return BashSettings(sandbox="required")


@pytest.fixture
def peer_settings() -> BashSettings:
    """With the sandboxes of the host's other sessions that ran bash lately made ahead too
    (``TOOLPOOL_BASH_WARM_PEERS=all``)."""
    return BashSettings(sandbox="required", warm_peers="all")


def _ahead(before: dict[str, int]) -> int:
    """How many calls since ``before`` ran in their place's sandbox made ahead."""
    assert units().settle(PATIENCE_S), "the units were not made in time"
    return units().counts().get(SANDBOX_AHEAD, 0) - before.get(SANDBOX_AHEAD, 0)


def _warmed(session: _Session) -> dict[str, int]:
    """Run two calls in ``session`` (the first may start its network, in which the second's
    sandbox is made ahead, as the next one's); the counts."""
    session.run("true")
    session.run("true")
    assert units().settle(PATIENCE_S), "the units were not made in time"
    return units().counts()


def test_the_next_call_runs_in_the_sandbox_made_ahead_and_finds_nothing_of_the_last(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", settings)
    before = _warmed(session)
    marker = sleep_marker()

    # "[3]00..." finds the sleep's command line, not grep's own.
    pattern = f"[{marker[0]}]{marker[1:]}"
    first = session.stdout(
        f"echo left > /tmp/left; LOCAL=1; (setsid sleep {marker} >/dev/null 2>&1 &); "
        f"until grep -qs '{pattern}' /proc/[0-9]*/cmdline; do sleep 0.01; done; echo $$"
    )

    assert _ahead(before) == 1
    if find_cgroups().pids is not None:
        # Killed before the call answered (found in its cgroup), not a moment later.
        assert processes_with(marker) == []
    assert survivors(marker) == []
    second = session.stdout(
        "ls -A /tmp; echo local=${LOCAL-unset}; "
        f"grep -qs '{pattern}' /proc/[0-9]*/cmdline || echo no-daemon; echo $$"
    )
    assert _ahead(before) == 2
    assert "left" not in second
    assert "local=unset" in second
    assert "no-daemon" in second
    # Each call its own PID namespace: the shell is its namespace's second process again.
    assert first[-1] == second[-1] == "2"


def test_the_sandbox_made_ahead_keeps_the_session_state_and_the_limits(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", settings)
    (session.folder / "sub").mkdir()
    before = _warmed(session)

    session.run("cd sub && export MODE=test && f() { echo from-f; } && export -f f")
    # Made at a lower CPU priority, the command runs at the worker's.
    lines = session.stdout('pwd; echo "$MODE"; f; ulimit -f; ulimit -t; echo "$HOME"; nice')

    assert _ahead(before) == 2
    assert session.cwd == "sub"
    assert lines[:3] == [str(session.folder / "sub"), "test", "from-f"]
    assert lines[3:] == [
        str(settings.file_size_mb * 1024),  # bash counts KiB
        str(int(settings.cpu_seconds)),
        "/tmp/home",
        str(os.getpriority(os.PRIO_PROCESS, 0)),
    ]


def test_a_session_never_gets_another_sessions_sandbox(
    sessions_root: Path, settings: BashSettings
) -> None:
    first, second = _Session(sessions_root, "a", settings), _Session(sessions_root, "b", settings)
    (first.folder / "mine").write_text("a's\n")
    before = _warmed(first)

    report = second.run(f"ls {first.folder}; pwd; touch {first.folder}/planted")

    assert _ahead(before) == 0
    assert "No such file or directory" in report
    assert str(second.folder) in report
    assert sorted(p.name for p in first.folder.iterdir()) == ["mine"]
    first.run("true")
    assert _ahead(before) == 1


def test_a_session_made_anew_does_not_get_the_sandbox_of_the_one_before(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", settings)
    before = _warmed(session)
    shutil.rmtree(session.folder)
    session.folder.mkdir()
    (session.folder / "new").write_text("made anew\n")

    lines = session.stdout("cat new; touch written")

    assert lines == ["made anew"]
    assert (session.folder / "written").exists()
    assert _ahead(before) == 0


def test_a_path_to_hide_that_appears_after_the_sandbox_was_made_is_hidden(
    sessions_root: Path, settings: BashSettings
) -> None:
    # In the workspace, which the sandbox shows: only a mount of its own hides it.
    later = sessions_root / "a" / "appears-later"
    session = _Session(sessions_root, "a", replace(settings, hide=f"{settings.hide} {later}"))
    before = _warmed(session)
    later.mkdir()
    (later / "secret").write_text("s3cret\n")

    report = session.run("cat appears-later/secret")

    assert "s3cret" not in report
    assert "No such file or directory" in report
    assert _ahead(before) == 0


def test_a_timeout_in_the_sandbox_made_ahead_ends_everything_it_started(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", settings)
    before = _warmed(session)
    marker = sleep_marker()

    with pytest.raises(ToolError, match="timed out"):
        session.run(f"setsid sleep {marker} & sleep {marker}", timeout=1)

    assert _ahead(before) == 1
    assert survivors(marker) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a session's own network needs a root worker")
def test_the_sandbox_made_ahead_is_in_the_sessions_own_network(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", settings)
    before = _warmed(session)
    holder = int((session.host_folder / "netns.pid").read_text())
    own = os.stat(f"/proc/{holder}/ns/net").st_ino

    lines = session.stdout("readlink /proc/self/ns/net")

    assert lines == [f"net:[{own}]"]
    assert _ahead(before) == 1
    # Its network made anew (the holder ended): the next sandbox is made in the new one.
    stop_holder(session.host_folder)
    assert survivors(str(session.host_folder)) == []
    assert session.stdout("readlink /proc/self/ns/net") != lines
    assert _ahead(before) == 1


def test_with_no_sandbox_kept_ahead_every_call_makes_its_own(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", replace(settings, warm=0))
    session.run("true")
    before = units().counts()

    assert session.stdout("echo $$") == ["2"]

    assert _ahead(before) == 0
    assert units().counts().get(MADE_IN_CALL, 0) == before.get(MADE_IN_CALL, 0) + 1
    assert not [p for p in units().kept() if p.workspace == session.folder]


def test_only_the_last_places_keep_a_sandbox(sessions_root: Path, settings: BashSettings) -> None:
    kept = replace(settings, warm=2)
    sessions = [_Session(sessions_root, name, kept) for name in ("a", "b", "c")]

    for session in sessions:
        session.run("true")
        session.run("true")

    assert units().settle(PATIENCE_S)
    places = [p.workspace for p in units().kept() if p.settings == kept and p.workspace]
    assert places == [sessions[1].folder, sessions[2].folder]


def _descendants(pid: int) -> set[int]:
    """``pid``'s children, theirs, and so on, read from /proc."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found |= {child, *_descendants(child)}
    return found


@pytest.mark.proof  # Redis and a worker process
def test_a_killed_workers_launches_made_ahead_end_with_it(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    # No pool here to sweep what a dead worker left: its units must end by themselves.
    settings = host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox="required")])
    [worker] = make_workers(settings).start(1)
    with Sessions(settings=settings) as admin:
        admin.create("a")
    with Executor(settings=settings, session="a") as executor:
        for index in range(2):  # from the second, the session's sandbox is made ahead
            ok(executor.run([call(f"warm-{index}", "bash", command="true")])[0])
    # Its outside unit (a shell) and the session's sandbox (bubblewrap, its init, a shell).
    wait_for(lambda: len(_descendants(worker.pid)) >= 4, "the worker's units to be made")
    made = _descendants(worker.pid)

    worker.process.kill()
    worker.process.wait(PATIENCE_S)

    wait_for(lambda: all(gone(pid) for pid in made), "the killed worker's units to end")


def test_a_forked_worker_makes_its_own_launches_and_leaves_its_parents_alone(
    sessions_root: Path, settings: BashSettings
) -> None:
    # As RQ's forking worker runs each call: in a child forked from the worker.
    first, second = _Session(sessions_root, "a", settings), _Session(sessions_root, "b", settings)
    (second.folder / "sub").mkdir()
    before = _warmed(first)
    kept = units().kept()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() beside threads, 3.12+
        child = os.fork()
    if child == 0:
        ran = first.stdout("echo $$") == ["2"]
        made = units().counts() == {MADE_IN_CALL: 1} and units().kept() == []
        os._exit(0 if ran and made else 1)
    _, status = os.waitpid(child, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert units().kept() == kept
    # The parent's launches made ahead still serve: a's sandbox, and for b (no sandbox made
    # ahead yet) the outside unit, whose shell files the child's end must not have removed.
    assert first.stdout("echo $$") == ["2"]
    assert _ahead(before) == 1
    second.run("cd sub")
    assert second.cwd == "sub"


def test_a_sandbox_is_made_ahead_from_a_places_first_call(
    sessions_root: Path, settings: BashSettings
) -> None:
    session = _Session(sessions_root, "a", settings)

    def kept() -> bool:
        current(session.host_folder)  # its network, if it was starting here, has started
        assert units().settle(PATIENCE_S)
        return any(place.workspace == session.folder for place in units().kept())

    session.run("true")
    assert kept()
    before = units().counts()
    session.run("true")
    assert _ahead(before) == 1


def _ran_by_another_worker(root: Path, settings: BashSettings) -> tuple[_Session, _Session]:
    """Sessions a and b of one host, with what another worker leaves of a's calls there: its
    network, and its note."""
    first, second = _Session(root, "a", settings), _Session(root, "b", settings)
    first.host_folder.mkdir(parents=True)
    join(first.host_folder)
    _shell_peers.Peers().note(first.host_folder.parent, "a")
    return first, second


def test_a_session_another_worker_ran_finds_its_sandbox_made_ahead_here(
    sessions_root: Path, peer_settings: BashSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shell_peers, "_READ_EVERY_S", 0.0)
    first, second = _ran_by_another_worker(sessions_root, peer_settings)

    second.run("true")

    wait_for(
        lambda: any(place.workspace == first.folder for place in units().kept()),
        "a's sandbox made ahead on this worker",
    )
    before = units().counts()
    assert first.stdout("echo $$") == ["2"]
    assert _ahead(before) == 1


def test_by_default_no_sandbox_is_made_for_a_session_another_worker_ran(
    sessions_root: Path, settings: BashSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On speculation they cost a busy host of many sessions a third of its calls/s; only
    # sessions just made are made ahead by default.
    monkeypatch.setattr(_shell_peers, "_READ_EVERY_S", 0.0)
    first, second = _ran_by_another_worker(sessions_root, settings)

    second.run("true")
    second.run("true")

    assert units().settle(PATIENCE_S)
    assert [place for place in units().kept() if place.workspace == first.folder] == []


def test_a_session_just_made_on_the_host_finds_its_network_and_sandbox_made_ahead(
    sessions_root: Path, settings: BashSettings
) -> None:
    assert settings.warm_peers == "new"  # the default
    settings = replace(settings, warm_peers_idle=0.0)  # a busy test machine acts all the same
    first, second = _Session(sessions_root, "a", settings), _Session(sessions_root, "b", settings)
    first.run("true")  # this worker runs bash in the host's sessions: it watches them from now
    assert current(second.host_folder) is None

    # As the worker that made b's folder does.
    second.host_folder.mkdir(parents=True)
    note(second.host_folder.parent, "b")

    wait_for(
        lambda: any(place.workspace == second.folder for place in units().kept()),
        "b's sandbox made ahead on this worker",
    )
    assert current(second.host_folder), "b's network was not started ahead of its first call"
    before = units().counts()
    assert second.stdout("echo $$") == ["2"]
    assert _ahead(before) == 1


def test_with_peers_off_a_session_just_made_gets_nothing_ahead_here(
    sessions_root: Path, settings: BashSettings
) -> None:
    off = replace(settings, warm_peers="off")
    first, second = _Session(sessions_root, "a", off), _Session(sessions_root, "b", off)
    second.host_folder.mkdir(parents=True)
    note(second.host_folder.parent, "b")

    first.run("true")
    first.run("true")

    # Not even a watch of the host's file: no session of it is ever acted on here.
    assert second.host_folder.parent not in _shell_peers.peers()._watched
    assert units().settle(PATIENCE_S)
    assert [place for place in units().kept() if place.workspace == second.folder] == []
    assert current(second.host_folder) is None


def _watch_answers(monkeypatch: pytest.MonkeyPatch) -> queue.SimpleQueue[bool]:
    """What the host's watch finds each time it looks whether it may act (0.3 s at most)."""
    monkeypatch.setattr(_shell_peers, "_QUIET_WAIT_S", 0.3)
    answers: queue.SimpleQueue[bool] = queue.SimpleQueue()
    quiet_soon = _shell_peers._quiet_soon

    def told(idle: float, host_root: Path) -> bool:
        answer = quiet_soon(idle, host_root)
        answers.put(answer)
        return answer

    monkeypatch.setattr(_shell_peers, "_quiet_soon", told)
    return answers


def _assert_left_to_its_first_call(
    sessions_root: Path, settings: BashSettings, answers: queue.SimpleQueue[bool]
) -> None:
    """a runs bash (the watch starts and looks once), b is made: every look finds it may not
    act, and nothing of b (sandbox, network) is made ahead."""
    first, second = _Session(sessions_root, "a", settings), _Session(sessions_root, "b", settings)
    first.run("true")
    assert answers.get(timeout=PATIENCE_S) is False  # the watch's first look
    second.host_folder.mkdir(parents=True)
    note(second.host_folder.parent, "b")

    assert answers.get(timeout=PATIENCE_S) is False
    assert units().settle(PATIENCE_S)
    assert [place for place in units().kept() if place.workspace == second.folder] == []
    assert current(second.host_folder) is None


def test_without_cpu_to_spare_a_session_just_made_is_left_to_its_first_call(
    sessions_root: Path, settings: BashSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asked for half the CPU idle, on a machine whose CPUs never idle: the worker gives up.
    settings = replace(settings, warm_peers_idle=0.5)
    ticks = itertools.count(step=100)
    monkeypatch.setattr(_shell_peers, "_cpu_times", lambda: (0, next(ticks)))
    answers = _watch_answers(monkeypatch)
    _assert_left_to_its_first_call(sessions_root, settings, answers)


@pytest.mark.parametrize(
    ("idle_ticks", "wanted", "answer"),
    [(50, 0.5, True), (40, 0.5, False), (0, 0.0, True), (None, 0.9, True)],
)
def test_cpu_to_spare_is_the_idle_share_over_the_last_tenth_of_a_second(
    idle_ticks: int | None,
    wanted: float,
    answer: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 100 ticks a look, idle_ticks of them idle (None: no /proc/stat to read).
    looks = itertools.count()

    def cpu_times() -> tuple[int, int] | None:
        look = next(looks)
        return None if idle_ticks is None else (look * idle_ticks, look * 100)

    monkeypatch.setattr(_shell_peers, "_cpu_times", cpu_times)
    monkeypatch.setattr(_shell_peers, "_QUIET_WAIT_S", 0.3)
    assert units().settle(PATIENCE_S)

    assert _shell_peers._quiet_soon(wanted, tmp_path) is answer


def test_a_host_running_bash_back_to_back_leaves_a_session_just_made_to_its_first_call(
    sessions_root: Path, settings: BashSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings.warm_peers_idle == 0.0  # the default: the machine's load aside
    answers = _watch_answers(monkeypatch)
    # Another worker of the host starts bash all the time (what bash-active says; a thread
    # touching it could be held back longer than 0.1 s on a busy machine).
    monkeypatch.setattr(_shell_peers, "ran_lately", lambda host_root, seconds: True)
    _assert_left_to_its_first_call(sessions_root, settings, answers)


def test_a_bash_call_of_the_host_is_seen_for_a_tenth_of_a_second(tmp_path: Path) -> None:
    assert not ran_lately(tmp_path, 0.1)  # never marked
    mark_ran(tmp_path)
    assert ran_lately(tmp_path, 0.1)
    earlier = time.time() - 1.0
    os.utime(tmp_path / ACTIVE, (earlier, earlier))
    assert not ran_lately(tmp_path, 0.1)
    mark_ran(tmp_path)
    assert ran_lately(tmp_path, 0.1)


def test_the_host_file_tells_sessions_made_from_sessions_run_in(sessions_root: Path) -> None:
    host_root = sessions_root / ".toolpool-host"
    note(host_root, "a")
    note(host_root, "b", ran=True)
    note(host_root, "c")
    note(host_root, "a", ran=True)

    assert recent(host_root, 8) == ["a", "c", "b"]
    assert recent(host_root, 8, ran=False) == ["c", "a"]
    assert recent(host_root, 1, ran=False) == ["c"]


def test_a_session_network_started_anew_is_the_one_joined(sessions_root: Path) -> None:
    folder = sessions_root / ".toolpool-host" / "a"
    folder.mkdir(parents=True)
    old, _ = join(folder)
    assert current(folder) == old
    old_pid = int((folder / "netns.pid").read_text())
    stop_holder(folder)
    wait_for(lambda: gone(old_pid), "the old holder to end")
    assert current(folder) is None

    new, _ = join(folder)

    assert new != old
    assert current(folder) == new


@pytest.mark.proof  # Redis and a worker process
def test_a_session_made_on_the_host_has_its_network_and_sandbox_before_its_first_call(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    # warm_peers "new", the default; acted on however busy the test machine is.
    bash_settings = BashSettings(sandbox="required", warm_peers_idle=0.0)
    settings = host_settings(redis_url, tmp_path, "h1", tools=[bash_settings])
    make_workers(settings).start(1)
    assert settings.worker.sessions_root is not None
    root = Path(os.path.realpath(settings.worker.sessions_root))
    with Sessions(settings=settings) as admin:
        admin.create("a")
        with Executor(settings=settings, session="a") as executor:
            ok(executor.run([call("first", "bash", command="true")])[0])

        admin.create("b")

        assert "b" in recent(root / ".toolpool-host", 8)
        bind = f"\0--bind\0{root / 'b'}\0{root / 'b'}\0".encode()
        wait_for(
            lambda: bool(processes_where("cmdline", lambda cmdline: bind in cmdline)),
            "b's sandbox made ahead, before any call of b",
        )
        assert current(root / ".toolpool-host" / "b"), "b's network did not start"
        with Executor(settings=settings, session="b") as executor:
            assert ok(executor.run([call("b-first", "bash", command="echo $$")])[0]).endswith(
                "stdout:\n2"
            )
