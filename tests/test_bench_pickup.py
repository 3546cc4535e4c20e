"""``benchmarks.pickup``: commands are told apart by what they are for, and a tiny real run
reports both pools and stops what it started."""

from __future__ import annotations

import re

import pytest

from benchmarks import pickup
from tests.support.waiting import gone


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ('SET toolpool:catalog:w1 "{}" EX 15', "heartbeat"),
        ("SADD toolpool:catalog w1", "heartbeat"),
        ("HSET rq:worker:w1 last_heartbeat x", "heartbeat"),
        (
            "BLPOP toolpool:doorbell:toolpool.q toolpool:doorbell:toolpool.q@h 405",
            "waiting for calls",
        ),
        (
            "BLMOVE rq:queue:toolpool.q rq:queue:toolpool.q:intermediate LEFT RIGHT 405",
            "waiting for calls",
        ),
        ("LRANGE rq:queue:toolpool.q:intermediate 0 -1", "supervisor's look for stranded jobs"),
        ("ZRANGE rq:wip:toolpool.q 0 -1", "supervisor's look for stranded jobs"),
        ("SET toolpool:session-sweep:h 1 NX PX 27000", "session sweep"),
        ("SMEMBERS toolpool:sessions", "session sweep"),
        ("EXISTS rq:suspended", "rq suspend check, RQ maintenance"),
        ("HELLO 3", "a new connection's set-up"),
        ("GET toolpool:something-new", "other: GET toolpool:something-new"),
    ],
)
def test_each_command_counts_for_what_it_is_for(command: str, kind: str) -> None:
    assert pickup._kind(command) == kind


@pytest.mark.proof  # two `toolpool worker` pools and a redis-server
def test_a_tiny_run_reports_both_pools_and_stops_what_it_started(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tiny = ["--runs", "1", "--calls", "10", "--warmup", "0", "--settle", "0", "--idle", "1"]
    assert pickup.main(tiny) == 0

    output = capsys.readouterr().out
    for row in (
        "one queue, calls without a session",
        "two queues, calls without a session",
        "two queues, calls in a session",
    ):
        assert re.search(rf"^  {row} +[\d.]+ /", output, re.MULTILINE), output
    assert re.search(r"^  p99, two queues less one, .*: +-?[\d.]+ /", output, re.MULTILINE)
    waiting = re.search(r"^  waiting for calls +([\d.]+) +([\d.]+)$", output, re.MULTILINE)
    assert waiting is not None, output
    server = re.search(r"redis-server pid (\d+)", output)
    assert server is not None
    assert gone(int(server.group(1)))
