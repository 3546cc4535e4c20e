"""``benchmarks.calls --only replicas``: the setting reaches both toolpool sides, and a tiny
real run reports the three sides and stops the primary and replica it started."""

from __future__ import annotations

import os
import re

import pytest

from benchmarks import calls, replicas
from executor import Settings
from tests.support.waiting import gone

_TINY = ["--only", "replicas", "--workers", "1", "--calls", "60", "--samples", "10"]
_TINY += ["--repeat", "1"]


def test_the_part_runs_only_when_named() -> None:
    assert "replicas" not in calls._options([]).only
    assert calls._options(["--only", "replicas"]).only == ("replicas",)


def test_each_side_has_its_own_queue_and_its_replica_count_when_toolpool_has_the_setting() -> None:
    base = Settings(redis_url="redis://127.0.0.1:1/0")
    one, zero = replicas.side_settings(base, 1), replicas.side_settings(base, 0)
    assert one.client.queue != zero.client.queue
    assert replicas.replicas_supported()
    assert (one.redis.replicas, zero.redis.replicas) == (1, 0)


def test_the_workers_environment_holds_the_variable_only_while_they_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(replicas.VARIABLE, "7")
    with replicas.environment(replicas.VARIABLE, "1"):
        assert os.environ[replicas.VARIABLE] == "1"
    assert os.environ[replicas.VARIABLE] == "7"
    monkeypatch.delenv(replicas.VARIABLE)
    with replicas.environment(replicas.VARIABLE, "0"):
        assert os.environ[replicas.VARIABLE] == "0"
    assert replicas.VARIABLE not in os.environ


@pytest.mark.proof  # a primary, a replica, three workers
def test_a_tiny_run_reports_the_three_sides_and_stops_its_servers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert calls.main(_TINY) == 0

    output = capsys.readouterr().out
    for what in ("Throughput, 1 worker", "Round trip of one call"):
        assert what in output, output
    for side in ("REPLICAS=1", "REPLICAS=0", "raw RQ"):
        assert len(re.findall(rf"^  {re.escape(side)} +\d", output, re.MULTILINE)) == 2, output
    assert len(re.findall(r"^  REPLICAS=1 / REPLICAS=0 = [\d.]+ / ", output, re.MULTILINE)) == 2
    waits = re.search(
        r"WAIT commands per call .*: REPLICAS=1 ([\d.]+), REPLICAS=0 ([\d.]+)", output
    )
    assert waits is not None, output
    # The replica count reached the side that has it, and only that side.
    assert float(waits[1]) >= 1
    assert float(waits[2]) == 0
    pids = [int(pid) for pid in re.findall(r"(?:redis-server|replica) pid (\d+)", output)]
    assert len(pids) == 2
    assert all(gone(pid) for pid in pids)
