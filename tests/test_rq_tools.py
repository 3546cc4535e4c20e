"""RQ's own tools see toolpool's queues, workers and jobs: ``rq info`` and ``rq-dashboard --json``.

toolpool's jobs use RQ's JSON serializer, so the tools made for RQ read them when told to
(``--serializer json``, ``--json``). A turn waits on a real worker while they look.

rq-dashboard 0.9 has one fault here, which the test holds so that a fixed release shows: its
workers page answers 500 while a worker runs a toolpool call (it builds workers without the
serializer it was given, and unpickles the JSON job). The queues, the job lists by state, the
page of each job (a call that waits for an earlier batch too: it carries no RQ dependency) and
idle workers all show.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from executor import Executor, Settings
from tests.support.ports import free_port
from tests.support.procs import MakeWorkers, stop_process
from tests.support.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.proof  # real worker processes, rq-dashboard as a process

BIN = Path(sys.executable).parent


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=PATIENCE_S) as response:
        return json.loads(response.read())


def _answers(url: str) -> bool:
    try:
        _get(url)
    except OSError:
        return False
    return True


@pytest.fixture
def waiting_turn(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> tuple[Settings, str, list[str]]:
    """One worker running a slow read, a second call queued behind it (deferred)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    settings = Settings(redis_url=redis_url, workspace=workspace)
    [worker] = make_workers(settings).start(1)
    started = tmp_path / "started"
    with Executor(settings=settings, wait_for_workers=PATIENCE_S) as executor:
        turn = executor.submit(
            [
                {
                    "id": "slow",
                    "name": "slow_read",
                    "arguments": {"path": "a.txt", "delay_ms": 3_000, "started": str(started)},
                },
                {
                    "id": "after",
                    "name": "write_file",
                    "arguments": {"path": "b.txt", "content": "x"},
                },
            ]
        )
        wait_for(started.exists, "the slow read to run")
        queue = executor.queue.name
    return settings, queue, [worker.name, turn.plan.job_ids[0], turn.plan.job_ids[1]]


def test_rq_info_shows_the_queue_and_its_worker(
    waiting_turn: tuple[Settings, str, list[str]],
) -> None:
    settings, queue, (worker, _, _) = waiting_turn

    shown = subprocess.run(
        [str(BIN / "rq"), "info", "--url", str(settings.redis.url), "--serializer", "json"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )

    assert shown.returncode == 0, shown.stderr
    assert queue in shown.stdout
    assert worker in shown.stdout
    assert "1 workers" in shown.stdout


def test_rq_dashboard_with_json_shows_queues_workers_and_jobs(
    waiting_turn: tuple[Settings, str, list[str]], tmp_path: Path
) -> None:
    settings, queue, (worker, running, deferred) = waiting_turn
    port = free_port()
    base = f"http://127.0.0.1:{port}/0/data"
    log = tmp_path / "rq-dashboard.log"
    with log.open("ab") as output:
        dashboard = subprocess.Popen(
            [
                str(BIN / "rq-dashboard"),
                "--json",
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--redis-url",
                str(settings.redis.url),
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
        )
    try:
        wait_for(
            lambda: _answers(f"{base}/queues.json") or dashboard.poll() is not None,
            "rq-dashboard to serve",
        )
        assert dashboard.poll() is None, log.read_text()
        queues = _get(f"{base}/queues.json")["queues"]
        job = _get(f"{base}/job/{running}.json")
        waiting = _get(f"{base}/job/{deferred}.json")
        listed = {
            state: _get(f"{base}/jobs/{queue}/{state}/8/asc/1.json")["jobs"]
            for state in ("started", "deferred")
        }
        faults = {
            "a busy worker": not _answers(f"{base}/workers.json"),
        }
        # It answers while no worker runs a call: read it in such a moment (the turn's second
        # call may start right after one answer, so the page is read and kept in one go).
        workers: list[dict[str, Any]] = []

        def read_workers() -> bool:
            try:
                workers[:] = _get(f"{base}/workers.json")["workers"]
            except OSError:
                return False
            return True

        wait_for(read_workers, "the workers page to answer")
    finally:
        stop_process(dashboard, PATIENCE_S)
        print(log.read_text()[-3000:])

    assert queue in [q["name"] for q in queues]
    [ours] = [w for w in workers if w["name"] == worker]
    assert ours["state"] in ("idle", "busy")  # listed whatever it does
    assert queue in ours["queues"]
    assert job["status"] == "started"
    # The job's call is readable: the JSON serializer decoded its arguments.
    assert "slow_read" in json.dumps(job)
    assert [j["id"] for j in listed["started"]] == [running]
    assert [j["id"] for j in listed["deferred"]] == [deferred]
    assert waiting["status"] == "deferred"
    assert "write_file" in json.dumps(waiting)
    fixed = [what for what, failed in faults.items() if not failed]
    assert not fixed, f"rq-dashboard now shows {fixed}: update README and docs/watching.md"
