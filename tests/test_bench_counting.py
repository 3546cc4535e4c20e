"""The benchmark's round-trip counter: one count per command or pipeline sent, per process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from benchmarks import counting


@pytest.fixture
def counted(redis_url: str) -> Iterator[redis.Redis]:
    """A client whose round trips are counted; redis-py is restored afterwards."""
    counting.install()
    client = redis.Redis.from_url(redis_url)
    client.ping()  # the connection's handshake is made here, not in the counts below
    try:
        yield client
    finally:
        client.close()
        counting.uninstall()


def _trips(action: object) -> int:
    before = counting.count()
    assert callable(action)
    action()
    return counting.count() - before


def test_a_command_a_pipeline_and_a_blocking_pop_are_one_round_trip_each(
    counted: redis.Redis,
) -> None:
    assert _trips(lambda: counted.set("k", "v")) == 1
    pipe = counted.pipeline()
    pipe.set("a", 1)
    pipe.incr("a")
    pipe.expire("a", 10)
    assert _trips(pipe.execute) == 1
    assert _trips(lambda: counted.blpop(["empty"], timeout=0.01)) == 1
    script = counted.register_script("return 1")
    # The first call finds no cached script: EVALSHA, SCRIPT LOAD, EVALSHA again.
    assert _trips(script) == 3
    assert _trips(script) == 1


def test_paused_threads_are_not_counted(counted: redis.Redis) -> None:
    with counting.paused():
        assert _trips(lambda: counted.get("k")) == 0
    assert _trips(lambda: counted.get("k")) == 1


def test_a_worker_reports_its_count_on_request(counted: redis.Redis, redis_url: str) -> None:
    reporter = counting.Reporter(redis_url, "w1")
    reporter.start()
    try:
        first = counting.snapshot(counted, ["w1"])["w1"]
        counted.set("x", 1)
        counted.get("x")
        # This process is the "worker" too: its two commands, and the snapshot is not counted.
        assert counting.snapshot(counted, ["w1"])["w1"] == first + 2
    finally:
        reporter.stop()  # its blocking read would count as a blocked client in later tests
    assert not reporter.is_alive()


def test_the_python_parser_can_be_forced_for_new_connections(
    counted: redis.Redis, redis_url: str
) -> None:
    default = redis.connection.DefaultParser.__name__
    for choice, expected in (
        (counting.PYTHON_PARSER, {"_RESP2Parser", "_RESP3Parser"}),
        (counting.DEFAULT_PARSER, {default, "_RESP3Parser"}),
    ):
        counting.use_parser(choice)
        counting.parsers_seen(reset=True)
        fresh = redis.Redis.from_url(redis_url)
        try:
            fresh.ping()
        finally:
            fresh.close()
        seen = counting.parsers_seen()
        assert len(seen) == 1
        assert seen <= expected
        if choice == counting.PYTHON_PARSER:
            assert "_HiredisParser" not in seen
