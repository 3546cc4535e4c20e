"""``toolpool status`` for a person: every worker (session workers too), waiters in words,
and the one unreachable-Redis message when Redis goes away in the middle (of `timeline` too)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from executor import Executor, Settings
from executor._pool_state import snapshot
from executor.cli import _ops as ops
from executor.cli import _timeline as timeline_cli
from executor.cli import main
from executor.cli._common import EXIT_REDIS
from executor.lock import OwnerInfo, RWLock
from executor.lock._keeper import LeaseKeeper
from executor.wire import read_events
from tests.support.procs import MakeWorkers, running_pool
from tests.support.waiting import PATIENCE_S, wait_for
from workers._embedded_redis import RedisServer


def _status(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["status", "--redis", url, *args], catch_exceptions=False)


@pytest.fixture
def keeper() -> Iterator[LeaseKeeper]:
    own = LeaseKeeper(name="test-status-keeper")
    yield own
    own.close()


def test_waiters_read_as_who_waits_for_which_mode_and_how_long(
    redis_url: str, keeper: LeaseKeeper
) -> None:
    client = redis.Redis.from_url(redis_url)
    lock = RWLock(client, keeper=keeper)
    holder = lock.acquire("exclusive", owner=OwnerInfo(worker="w-1", call_id="c-hold", tool="bash"))
    with ThreadPoolExecutor(max_workers=1) as pool:
        owner = OwnerInfo(worker="w-2", call_id="c-wait", tool="read_file")
        waiting = pool.submit(lock.acquire, "shared", 30, owner=owner)
        wait_for(lambda: len(lock.status().queue) == 1, "the read to queue")
        shown = _status(redis_url)
        holder.release()
        waiting.result(timeout=PATIENCE_S).release()
    client.close()
    assert shown.exit_code == 0, shown.output
    [line] = [line for line in shown.output.splitlines() if line.strip().startswith("waits")]
    assert "{" not in line, line
    assert "owner" not in line, line
    assert re.fullmatch(
        r"  waits shared     #1  read_file \(c-wait\) on w-2  waiting \d+ ms "
        r"\(since \d\d:\d\d:\d\d\.\d{3}\)",
        line,
    ), line


def test_redis_gone_in_the_middle_is_the_unreachable_message_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = RedisServer(tcp=True)
    server.start()

    def redis_goes_away(*args: Any, **kwargs: Any) -> dict[str, Any]:
        server.stop()  # after the command's probe, before its reads
        return snapshot(*args, **kwargs)

    monkeypatch.setattr(ops, "snapshot", redis_goes_away)
    try:
        gone = CliRunner().invoke(main, ["status", "--redis", server.tcp_url])
    finally:
        server.stop()
    assert gone.exit_code == EXIT_REDIS, gone.output
    assert "Cannot reach Redis at" in gone.output
    assert "Check the URL (--redis or TOOLPOOL_REDIS_URL)" in gone.output
    assert "Cannot read status" not in gone.output


@pytest.mark.proof  # real worker pools
def test_session_workers_are_listed_and_labelled_with_their_session(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "sessions").mkdir()
    pool = Settings(redis_url=redis_url, workspace=tmp_path / "ws")
    # Workers given only a sessions root: they take no call of the pool's queue.
    sessions_only = Settings(
        redis_url=redis_url,
        workspace=tmp_path / "sessions",
        sessions_root=tmp_path / "sessions",
        host="h1",
        serve_pool_calls=False,
    )
    make_workers(pool).start(1)
    with running_pool(sessions_only, workers=2):
        made = CliRunner().invoke(main, ["session", "create", "s1", "--redis", redis_url])
        assert made.exit_code == 0, made.output
        report = json.loads(_status(redis_url, "--json").output)
        assert len(report["workers"]) == 3
        kinds = sorted(worker["serves"] for worker in report["workers"])
        assert kinds == [
            "pool calls",
            "session worker: sessions of host h1",
            "session worker: sessions of host h1",
        ]
        shown = _status(redis_url).output
        assert "Workers: 3 (2 serve sessions)" in shown

        go = tmp_path / "sessions" / "s1" / "go"
        hold = {
            "id": "held",
            "name": "bash",
            "arguments": {"command": "until [ -e go ]; do sleep 0.05; done"},
        }
        with Executor(settings=pool, session="s1", wait_for_workers=PATIENCE_S) as executor:
            turn = executor.submit([hold])
            try:
                wait_for(
                    lambda: "running bash (held) in session s1" in _status(redis_url).output,
                    "status to show the session call on its worker",
                )
                line = next(x for x in _status(redis_url).output.splitlines() if "(held)" in x)
                assert "session worker: sessions of host h1" in line, line
            finally:
                go.touch()
            executor.collect(turn, timeout=PATIENCE_S)


def test_redis_gone_before_the_timeline_is_read_is_the_unreachable_message_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = RedisServer(tcp=True)
    server.start()

    def redis_goes_away(*args: Any, **kwargs: Any) -> Any:
        server.stop()  # after the command's probe, before its reads
        return read_events(*args, **kwargs)

    monkeypatch.setattr(timeline_cli, "read_events", redis_goes_away)
    try:
        gone = CliRunner().invoke(main, ["timeline", "t1", "--redis", server.tcp_url])
    finally:
        server.stop()
    assert gone.exit_code == EXIT_REDIS, gone.output
    assert "Cannot reach Redis at" in gone.output
