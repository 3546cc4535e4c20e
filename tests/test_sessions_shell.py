"""bash's shell state in a session, on a real redis-server with real worker processes.

A session's working directory and exported variables are kept in Redis between calls, so the
next call continues them on whichever worker runs it. Which worker ran a call is read from the
``worker`` field of its ``lock_acquired`` event. A cd out of the session folder is proved not
kept in ``test_sessions``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from executor import Executor, Sessions, Settings, ToolStatus
from tests.support.procs import MakeWorkers, Workers
from tests.support.sessions import call, host_settings, stdout_lines, worker_of

# A process-heavy proof (worker processes): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

NewWorkers = Callable[[], Workers]


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return host_settings(redis_url, tmp_path, "h1")


@pytest.fixture
def new_workers(settings: Settings, make_workers: MakeWorkers) -> NewWorkers:
    """``new_workers()``: a group of workers of host h1, all stopped at the end."""
    return lambda: make_workers(settings)


def _folder(settings: Settings) -> Path:
    """Session "s"'s folder, as bash names it (links resolved)."""
    assert settings.worker.sessions_root is not None
    return Path(os.path.realpath(settings.worker.sessions_root / "s"))


def test_cd_and_export_carry_over_to_a_call_on_another_worker(
    settings: Settings, new_workers: NewWorkers, client: redis.Redis
) -> None:
    first_group = new_workers()
    [first] = first_group.start(1)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
    folder = _folder(settings)
    with Executor(settings=settings, session="s") as executor:
        [began] = executor.run(
            [call("c1", "bash", command="mkdir sub && cd sub && export X=1")], timeout=60
        )
        assert began.status is ToolStatus.OK, began.content
        assert worker_of(client, "c1") == first.name

        # The first worker is gone: only a new one can run the next call.
        first_group.stop_all()
        [second] = new_workers().start(1)
        [went_on] = executor.run([call("c2", "bash", command='pwd; echo "X=$X"')], timeout=60)
    assert worker_of(client, "c2") == second.name
    assert stdout_lines(went_on) == [str(folder / "sub"), "X=1"]


def test_unset_drops_a_kept_variable(new_workers: NewWorkers, settings: Settings) -> None:
    new_workers().start(2)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        with Executor(settings=settings, session="s") as executor:
            results = executor.run(
                [
                    call("set", "bash", command="export X=1 Y=2"),
                    call("seen", "bash", command='echo "[${X-unset}] [${Y-unset}]"'),
                    call("unset", "bash", command="unset X"),
                    call("gone", "bash", command='echo "[${X-unset}] [${Y-unset}]"'),
                ],
                timeout=60,
            )
        assert stdout_lines(results[1]) == ["[1] [2]"]
        assert stdout_lines(results[3]) == ["[unset] [2]"]
        assert sessions.get("s").env == {"Y": "2"}


def test_a_nonzero_exit_keeps_the_cd_and_exports_before_it(
    new_workers: NewWorkers, settings: Settings
) -> None:
    new_workers().start(2)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        folder = _folder(settings)
        with Executor(settings=settings, session="s") as executor:
            results = executor.run(
                [
                    call("cd", "bash", command="mkdir -p d && cd d && export Y=2 && exit 3"),
                    call("after", "bash", command='pwd; echo "Y=$Y"; false'),
                    call("again", "bash", command="pwd"),
                ],
                timeout=60,
            )
    assert results[0].content.startswith("exit code: 3"), results[0].content
    assert stdout_lines(results[1]) == [str(folder / "d"), "Y=2"]
    assert results[1].content.startswith("exit code: 1"), results[1].content
    assert stdout_lines(results[2]) == [str(folder / "d")]


def test_a_timed_out_command_keeps_the_state_before_it(
    new_workers: NewWorkers, settings: Settings
) -> None:
    new_workers().start(2)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        folder = _folder(settings)
        with Executor(settings=settings, session="s") as executor:
            results = executor.run(
                [
                    call("before", "bash", command="mkdir -p d e && cd d && export Z=old"),
                    call("killed", "bash", command="cd ../e; export Z=new; sleep 30", timeout=1),
                    call("after", "bash", command='pwd; echo "Z=$Z"'),
                ],
                timeout=60,
            )
        assert results[1].status is ToolStatus.ERROR
        assert "timed out" in results[1].content
        assert stdout_lines(results[2]) == [str(folder / "d"), "Z=old"]
        assert (sessions.get("s").cwd, sessions.get("s").env) == ("d", {"Z": "old"})
