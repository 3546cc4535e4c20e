"""``toolpool metrics`` scraped while real workers run known calls: its numbers match them.

The exporter is a process of its own, as it would run beside Prometheus; the test scrapes
``/metrics`` over HTTP and reads it with Prometheus' own text parser.
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from executor import Executor, Settings
from tests.support.mcp import ROOT, TOOLPOOL, mcp_env
from tests.support.ports import free_port
from tests.support.procs import MakeWorkers, stop_process
from tests.support.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.proof  # an exporter process beside real worker processes

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=PATIENCE_S) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _answers(url: str) -> bool:
    try:
        _scrape(url)
    except OSError:
        return False
    return True


def test_the_metrics_match_the_calls_that_ran(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    settings = Settings(redis_url=redis_url, workspace=workspace)
    make_workers(settings).start(2)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = tmp_path / "metrics.log"
    with log.open("ab") as output:
        exporter = subprocess.Popen(
            [*TOOLPOOL, "metrics", "--port", str(port), "--redis", redis_url],
            env=mcp_env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
        )
    try:
        wait_for(lambda: _answers(url) or exporter.poll() is not None, "the exporter to serve")
        assert exporter.poll() is None, log.read_text()
        # It counts the events from its start: it is following them once it serves.
        calls = [
            *(
                {"id": f"r{i}", "name": "read_file", "arguments": {"path": "a.txt"}}
                for i in range(3)
            ),
            {"id": "missing", "name": "read_file", "arguments": {"path": "nope.txt"}},
            *(
                {"id": f"c{i}", "name": "calculator", "arguments": {"expression": "6*7"}}
                for i in range(2)
            ),
            {"id": "w", "name": "write_file", "arguments": {"path": "b.txt", "content": "x"}},
        ]
        with Executor(settings=settings, wait_for_workers=PATIENCE_S) as executor:
            executor.run(calls, timeout=PATIENCE_S)

        def all_counted() -> bool:
            samples = _scrape(url)
            return sum(v for (name, _), v in samples.items() if name == "toolpool_calls_total") >= 7

        wait_for(all_counted, "the exporter to count the seven calls")
        samples = _scrape(url)
    finally:
        stop_process(exporter, PATIENCE_S)  # SIGTERM: it stops its server and its follower
        print(log.read_text())

    assert exporter.returncode == 0
    assert "toolpool metrics: stopped" in log.read_text()
    assert _value(samples, "toolpool_calls_total", tool="read_file", status="ok") == 3
    assert _value(samples, "toolpool_calls_total", tool="read_file", status="error") == 1
    assert _value(samples, "toolpool_calls_total", tool="calculator", status="ok") == 2
    assert _value(samples, "toolpool_calls_total", tool="write_file", status="ok") == 1
    assert _value(samples, "toolpool_call_duration_seconds_count", tool="read_file") == 4
    # Reads and the calculator share the lock; the write holds it alone.
    assert _value(samples, "toolpool_lock_wait_seconds_count", mode="shared") == 6
    assert _value(samples, "toolpool_lock_wait_seconds_count", mode="exclusive") == 1
    scope = {"scope": settings.worker.scope}
    assert _value(samples, "toolpool_lock_grants_total", mode="shared", **scope) == 6
    assert _value(samples, "toolpool_lock_grants_total", mode="exclusive", **scope) == 1
    assert _value(samples, "toolpool_lock_holders", **scope) == 0
    queue = {"queue": executor.queue.name}
    assert _value(samples, "toolpool_workers", **queue) == 2
    assert _value(samples, "toolpool_queue_jobs", state="queued", **queue) == 0
    assert _value(samples, "toolpool_queue_jobs", state="failed", **queue) == 0
    # Prometheus' naming: one prefix; counters end in _total, durations are in seconds.
    names = {name for name, _ in samples}
    assert all(name.startswith("toolpool_") for name in names), names
    assert {n for n in names if n.startswith("toolpool_lock_lost")} == {
        "toolpool_lock_lost_leases_total"
    }
