"""Background processes of a session, on a real redis-server with real worker processes.

A process started by ``process_start`` belongs to its session: a later call on another worker
process reads and drives it, a server it runs is reachable from the session's later commands
on the loopback and from no other session, and it ends with its session.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import redis

from executor import Executor, Sessions, Settings, ToolResult
from tests.support.procs import MakeWorkers
from tests.support.sessions import call, host_settings, ok

pytestmark = pytest.mark.proof


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return host_settings(redis_url, tmp_path, "h1")


_ids = itertools.count(1)


def _one(executor: Executor, name: str, **arguments: object) -> ToolResult:
    [result] = executor.run([call(f"{name}-{next(_ids)}", name, **arguments)], timeout=90)
    return result


def test_a_server_started_in_the_background_serves_the_sessions_later_calls(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    workers = make_workers(settings)
    workers.start(2)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        sessions.create("other")
    with Executor(settings=settings, session="s") as executor:
        (Path(settings.worker.sessions_root or "") / "s" / "page.html").write_text("hello page\n")
        started = ok(
            _one(
                executor,
                "process_start",
                command="python3 -u -m http.server 8765 --bind 127.0.0.1",
                wait=5,
            )
        )
        assert "Started background process p1" in started, started
        fetched = ok(
            _one(executor, "bash", command="curl -s http://127.0.0.1:8765/page.html", timeout=20)
        )
        assert "hello page" in fetched, fetched
        log = ok(_one(executor, "process_output", process="p1"))
        assert "GET /page.html" in log, log
    with Executor(settings=settings, session="other") as other:
        refused = ok(
            _one(other, "bash", command="curl -sS http://127.0.0.1:8765/page.html; echo rc=$?")
        )
        assert "rc=7" in refused, refused  # connection refused: nothing listens there
    with Executor(settings=settings, session="s") as executor:
        stopped = ok(_one(executor, "process_stop", process="p1"))
        assert "stopped" in stopped, stopped
