"""The fault run: the short version, and proof that its checks can fail.

The short run starts a private Redis with AOF, six workers in three pools (two of them behind
loopback proxies), two orchestrators and ~300 calls, and injects one fault of each kind:
SIGKILL of a worker and of an exclusive holder, SIGSTOP of a holder beyond its lease, a
proxied worker cut off beyond its lease, one Redis restart. Every check must find nothing.
Its sessions variant spreads ~300 calls of four orchestrators over three sessions and the
workspace, under the same faults; holds are checked per lock scope, files per folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest
import redis

from executor._connect import RedisSettings
from executor.wire import Event
from tests.support.fault.checks import (
    EDIT_LOG,
    EDIT_LOG_START,
    CallRecord,
    CheckResult,
    EndState,
    Fault,
    Sighting,
    check_end,
    check_files,
    check_folders,
    check_holds,
    check_results,
    edit_ids,
    payload,
    payload_writer,
    recovery_times,
)
from tests.support.fault.failover import (
    COUNTER,
    FAILOVER_KINDS,
    Answers,
    check_after_answer,
    check_counter,
    check_fences,
    check_recollect,
)
from tests.support.fault.observe import Observer
from tests.support.fault.proxy import TcpProxy
from tests.support.fault.run import Config, Harness
from tests.support.waiting import PATIENCE_S, wait_for
from workers._embedded_redis import RedisServer


@contextlib.contextmanager
def _run_folder(harness: Harness) -> Iterator[None]:
    """Remove the run's folder when the run and its assertions pass; keep it (and say where)
    when they fail, or always with TOOLPOOL_FAULT_KEEP=1: it holds run.json, the pools' log
    and, in the failover mode, every Redis node's append-only file and log."""
    try:
        yield
    except BaseException:
        print(f"run folder kept: {harness.tmp}")
        raise
    if os.environ.get("TOOLPOOL_FAULT_KEEP") == "1":
        print(f"run folder kept: {harness.tmp}")
    else:
        shutil.rmtree(harness.tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.proof
def test_short_fault_run_finds_no_violation() -> None:
    config = Config(calls=300, workers=6, orchestrators=2, max_faults=5, seed=7, turn_timeout=20)
    harness = Harness(config)
    with _run_folder(harness):
        outcome = harness.run()
        print(outcome.text)
        kinds = {f.kind for f in harness.faults}
        assert {"kill_random", "redis_restart"} <= kinds, outcome.text
        # A fault aimed at a lock holder needs a holder at that instant, so the short run cannot
        # promise one; the long run (python -m tests.support.fault.run) injects dozens.
        assert outcome.figures["calls"] >= 250, outcome.text
        # Known faults (checks.KNOWN_FAULTS) are printed; anything else fails the test.
        assert outcome.unexpected == [], outcome.text


@pytest.mark.slow
@pytest.mark.proof
def test_short_fault_run_with_sessions_finds_no_violation() -> None:
    config = Config(
        calls=300, workers=6, orchestrators=4, max_faults=5, seed=7, turn_timeout=20, sessions=3
    )
    harness = Harness(config)
    with _run_folder(harness):
        outcome = harness.run()
        print(outcome.text)
        assert {"kill_random", "redis_restart"} <= {f.kind for f in harness.faults}, outcome.text
        assert outcome.figures["calls"] >= 250, outcome.text
        # Turns went to every session, and the fourth orchestrator's to the workspace.
        assert {r.session for r in harness.records.values()} == {"", "s0", "s1", "s2"}
        assert "1c exclusive holds overlapping within a session" in outcome.text
        assert outcome.unexpected == [], outcome.text


@pytest.mark.slow
@pytest.mark.proof
def test_short_failover_run_with_a_replica_finds_no_violation() -> None:
    # A primary and a replica under three Sentinels, every process waiting for one replica
    # (TOOLPOOL_REDIS_REPLICAS=1): each of the four failovers, none of the checks finds a thing.
    if "sentinels" not in {f.name for f in fields(RedisSettings)}:
        pytest.skip("this toolpool reads no Sentinel URLs yet")
    config = Config(
        calls=600,
        workers=6,
        orchestrators=2,
        seed=7,
        turn_timeout=60,
        failover=True,
        replicas=1,
        worker_faults=False,
    )
    harness = Harness(config)
    with _run_folder(harness):
        outcome = harness.run()
        print(outcome.text)
        assert set(FAILOVER_KINDS) <= {f.kind for f in harness.faults}, outcome.text
        assert outcome.figures["calls"] >= 500, outcome.text
        for check in ("6 counter never goes back", "7 fences rise", "9 stored results kept"):
            assert check in outcome.text
        assert outcome.unexpected == [], outcome.text


def _grant(call_id: str, ts: float, fence: int, held: bool = True) -> list[Event]:
    data = {"mode": "exclusive", "fence": fence}
    return [
        Event(event="lock_acquired", ts=ts, call_id=call_id, tool="bash", pid=1, data=data),
        Event(event="lock_released", ts=ts + 0.1, call_id=call_id, data={"held": held}),
    ]


def test_the_failover_checks_can_fail() -> None:
    seen = [Sighting(COUNTER, f"n{v:07d}-x", 1.0, float(v)) for v in (1, 2, 3)]
    assert not check_counter(seen, payload("n0000003-x", 1)).violations
    back = [*seen, Sighting(COUNTER, "n0000002-x", 4.0, 4.0)]
    assert check_counter(back, None).violations == [f"{COUNTER} went back from 3 to 2 at 4.000"]
    assert check_counter(seen, payload("n0000001-x", 1)).violations

    epoch = 1 << 32
    rising = _grant("a", 1.0, 5) + _grant("b", 2.0, epoch + 1)
    assert not check_fences(rising, {}).violations
    assert check_fences(_grant("a", 1.0, epoch + 5) + _grant("b", 2.0, 6), {}).violations
    # A lost lease's grant may be stamped late: not held against the order.
    assert not check_fences(_grant("a", 1.0, 9, held=False) + _grant("b", 2.0, 6), {}).violations

    answered = {"r": CallRecord("r", "bash", status="ok", answered_at=5.0)}
    again = [Event(event="tool_execution_started", ts=6.0, call_id="r")]
    assert check_after_answer(answered, again).violations
    assert not check_after_answer(answered, [again[0].model_copy(update={"ts": 4.0})]).violations

    first: dict[str, Answers] = {"t": {"c": ("ok", None, "x")}}
    assert not check_recollect(first, {"t": {"c": ("ok", None, "x")}}).violations
    assert check_recollect(first, {"t": {"c": ("error", "timeout", "")}}).violations
    assert check_recollect(first, {"t": "TurnError('unknown')"}).violations
    assert check_recollect(first, {}).violations


def test_payload_detects_torn_and_mixed_content() -> None:
    whole = payload("c1", 50)
    assert payload_writer(whole) == "c1"
    assert payload_writer(whole[: len(whole) // 2]) is None
    other = payload("c2", 50)
    mixed = other[: len(other) // 2] + whole[len(whole) // 2 :]
    assert payload_writer(mixed) is None
    assert edit_ids("edits:\ne=a\ne=b\nEND\n") == ["a", "b"]
    assert edit_ids("edits:\ne=a\nEN") is None


def _hold(call_id: str, start: float, end: float, held: bool) -> list[Event]:
    tool = "write_file"
    return [
        Event(
            event="lock_acquired",
            ts=start,
            call_id=call_id,
            tool=tool,
            pid=1,
            data={"mode": "exclusive"},
        ),
        Event(
            event="lock_released",
            ts=end,
            call_id=call_id,
            tool=tool,
            pid=1,
            data={"released_at": end, "held": held},
        ),
    ]


def test_overlap_of_two_valid_holds_is_a_violation() -> None:
    events = _hold("a", 10.0, 12.0, True) + _hold("b", 11.0, 13.0, True)
    valid, fenced = check_holds(events, {}, [], [])
    assert valid.violations
    assert not fenced.violations
    # A later hold whose lease was lost may have been stamped after it ended (its holder was
    # paused right after the grant): its writes are judged instead (1b).
    ghost = _hold("a", 10.0, 12.0, True) + _hold("g", 11.0, 11.5, False)
    assert not _violations(check_holds(ghost, {}, [], []))


def test_lost_holder_is_excused_unless_its_write_landed_after_the_next_grant() -> None:
    events = _hold("a", 10.0, 14.0, False) + _hold("b", 11.0, 12.0, True)
    records = {"a": CallRecord("a", "write_file", status="error", error_type="lock_lost")}
    assert not _violations(check_holds(events, records, [], []))
    late = [Sighting("f0.txt", "a", before=11.5, seen=11.6)]
    assert check_holds(events, records, [], late)[1].violations
    killed = _hold("c", 20.0, 30.0, True)[:1] + _hold("d", 21.0, 22.0, True)
    kill = [Fault("kill_holder", 25.0, 25.0, pid=1)]
    assert not _violations(check_holds(killed, {}, kill, []))
    assert check_holds(killed, {}, kill, [Sighting("f1.txt", "c", 23.0, 23.1)])[1].violations
    refused = {
        "a": CallRecord(
            "a",
            "write_file",
            status="error",
            error_type="lock_lost",
            message="The write was not committed: ...",
        )
    }
    landed = [Sighting("f0.txt", "a", before=9.0, seen=9.5)]
    assert check_holds(events, refused, [], landed)[1].violations


def _violations(results: list[CheckResult]) -> list[str]:
    return [v for result in results for v in result.violations]


def test_holds_overlap_across_sessions_but_not_within_one() -> None:
    events = _hold("a", 10.0, 12.0, True) + _hold("b", 11.0, 13.0, True)
    records = {
        "a": CallRecord("a", "write_file", session="s0"),
        "b": CallRecord("b", "write_file", session="s1"),
    }
    valid, within, fenced = check_holds(events, records, [], [], sessions=True)
    assert not valid.violations + within.violations + fenced.violations
    assert "exclusive holds of two sessions at once (allowed): 1" in within.notes
    # Without sessions every hold is of the one scope: the same overlap is a violation.
    assert check_holds(events, records, [], [])[0].violations
    events += _hold("c", 11.5, 12.5, True)
    records["c"] = CallRecord("c", "write_file", session="s0")
    valid, within, _ = check_holds(events, records, [], [], sessions=True)
    assert not valid.violations
    assert within.violations == [
        "both leases valid: write_file a [10.000..12.000] vs write_file c from 11.500"
    ]
    # Two calls without a session share the workers' own scope (1a), a session's call not.
    events = _hold("d", 20.0, 22.0, True) + _hold("e", 21.0, 23.0, True)
    events += _hold("f", 21.0, 23.0, True)
    records = {
        "d": CallRecord("d", "bash"),
        "e": CallRecord("e", "bash"),
        "f": CallRecord("f", "bash", session="s0"),
    }
    valid, within, _ = check_holds(events, records, [], [], sessions=True)
    assert [v.split(" [")[0] for v in valid.violations] == ["both leases valid: write_file d"]
    assert not within.violations


def test_file_checks_run_per_folder() -> None:
    init = payload("init", 1)
    records = {
        "x": CallRecord("x", "edit_file", status="ok", session="s0"),
        "w": CallRecord("w", "write_file", status="ok", session="s0"),
        "b": CallRecord("b", "bash", status="ok", session="s0"),
    }
    finals = {
        "": {"f0.txt": init, EDIT_LOG: EDIT_LOG_START},
        "s0": {"f0.txt": payload("w", 2), EDIT_LOG: "edits:\ne=x\nEND\n"},
    }
    seen = [Sighting("f0.txt", "w", 1.0, 1.1, folder="s0")]
    assert not check_folders(finals, seen, records, {"s0": ["b"]}).violations
    # The edit in the workspace's log instead of its session's: lost there, misplaced here.
    moved = {
        "": {**finals[""], EDIT_LOG: "edits:\ne=x\nEND\n"},
        "s0": {**finals["s0"], EDIT_LOG: EDIT_LOG_START},
    }
    found = check_folders(moved, seen, records, {}).violations
    assert any("session s0: edit x succeeded but is not in edits.log" in v for v in found)
    assert any("edit_file x of session s0 is in the workspace's edits.log" in v for v in found)
    elsewhere = [Sighting("f0.txt", "w", 1.0, 1.1, folder="s1")]
    found = check_folders(finals, elsewhere, records, {"s1": ["b"]}).violations
    assert any("write_file w of session s0 landed in session s1's f0.txt" in v for v in found)
    assert any("bash b of session s0 is in session s1's ran.log" in v for v in found)
    torn = [Sighting("f1.txt", "TORN", 1.0, 1.1, folder="s0")]
    assert check_folders(finals, torn, records, {}).violations == [
        "session s0: observer saw f1.txt torn at 1.100"
    ]


def test_recovery_waits_for_the_next_grant_of_the_holders_scope() -> None:
    events = [
        Event(event="lock_acquired", ts=10.1, call_id="b", pid=2),
        Event(event="lock_acquired", ts=10.5, call_id="c", pid=3),
    ]
    kill = [Fault("kill_holder", 10.0, 10.0, pid=1, call_id="a")]
    assert recovery_times(events, kill)["kill_holder: next grant"] == pytest.approx([0.1])
    scope_of = {"a": "s0", "b": "s1", "c": "s0"}
    times = recovery_times(events, kill, scope_of)
    assert times["kill_holder: next grant"] == pytest.approx([0.5])


def test_a_read_run_again_is_allowed_a_write_run_again_is_not() -> None:
    records = {
        "r": CallRecord("r", "read_file", status="ok", stored=("ok", None)),
        "w": CallRecord("w", "write_file", status="ok", stored=("ok", None)),
    }
    started = [Event(event="tool_execution_started", call_id=c) for c in ("r", "r", "w", "w")]
    rerun = [Event(event="call_rerun", call_id=c) for c in ("r", "w")]
    found = check_results(records, started + rerun, [], []).violations
    assert found == ["write_file w has side effects and was run again"]
    assert check_results(records, started, [], []).violations  # no rerun event: twice


def test_results_check_finds_lost_doubled_and_misreported_calls() -> None:
    records = {
        "a": CallRecord("a", "bash"),
        "b": CallRecord("b", "bash", status="ok", stored=("ok", None)),
        "c": CallRecord(
            "c",
            "bash",
            status="error",
            error_type="lock_unavailable",
            stored=("error", "lock_unavailable"),
        ),
    }
    started = [Event(event="tool_execution_started", call_id="b") for _ in range(2)]
    found = check_results(records, started, [], ["c"]).violations
    assert any("no result for a" in v for v in found)
    assert any("b started 2 times" in v for v in found)
    assert any("c answered lock_unavailable" in v for v in found)


def test_files_and_end_checks_can_fail() -> None:
    records = {"e1": CallRecord("e1", "edit_file", status="ok")}
    assert check_files({"edits.log": "edits:\nEND\n"}, [], records).violations
    assert check_files({"f0.txt": "writer=x;\n"}, [], {}).violations
    assert check_end(EndState(lock_holders=1)).violations
    assert not check_end(EndState()).violations


def test_proxy_cut_blackholes_and_restore_reconnects() -> None:
    with RedisServer(tcp=True) as server:
        assert server.port is not None
        proxy = TcpProxy("127.0.0.1", server.port).start()
        client = redis.Redis.from_url(proxy.url, socket_timeout=0.3)
        try:
            assert client.ping()
            proxy.cut()
            with pytest.raises(redis.TimeoutError):
                client.ping()
            proxy.restore()
            deadline = time.monotonic() + PATIENCE_S
            while True:
                try:
                    assert client.ping()
                    break
                except redis.ConnectionError:
                    assert time.monotonic() < deadline
        finally:
            client.close()
            proxy.stop()


def _commit(workspace: Path, name: str, text: str) -> None:
    """A write as toolpool commits it: a temporary file renamed over the target."""
    temporary = workspace / f".{name}.tmp"
    temporary.write_text(text)
    os.replace(temporary, workspace / name)


def _shared_waiter_blocked(directory: Path) -> bool:
    """True while some process waits for a shared flock on ``directory`` (/proc/locks)."""
    inode = os.stat(directory).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        waiting = "->" in fields and "FLOCK" in fields and "READ" in fields
        if waiting and fields[-3].endswith(f":{inode}"):
            return True
    return False


def test_observer_never_sees_a_write_undone_under_the_commit_barrier(tmp_path: Path) -> None:
    _commit(tmp_path, "f0.txt", payload("init", 1))
    _commit(tmp_path, EDIT_LOG, EDIT_LOG_START)
    sightings: list[Sighting] = []
    done = threading.Event()
    fds_before = len(os.listdir("/proc/self/fd"))
    thread = threading.Thread(target=Observer(tmp_path, ["f0.txt"], sightings).run, args=(done,))
    thread.start()
    writer = os.open(tmp_path, os.O_RDONLY)
    try:
        wait_for(lambda: any(s.writer == "init" for s in sightings), "the first sighting")
        # A writer whose post-rename fence re-check fails rolls the rename back under LOCK_EX:
        # the observer waits on the barrier meanwhile, and never sees the undone write.
        fcntl.flock(writer, fcntl.LOCK_EX)
        _commit(tmp_path, "f0.txt", payload("undone", 2))
        wait_for(lambda: _shared_waiter_blocked(tmp_path), "the observer to wait on the barrier")
        _commit(tmp_path, "f0.txt", payload("init", 1))
        fcntl.flock(writer, fcntl.LOCK_UN)
        fcntl.flock(writer, fcntl.LOCK_EX)
        _commit(tmp_path, "f0.txt", payload("kept", 3))
        fcntl.flock(writer, fcntl.LOCK_UN)
        wait_for(lambda: any(s.writer == "kept" for s in sightings), "the kept write's sighting")
        # Between rounds the observer holds nothing: a writer gets LOCK_EX without waiting,
        # again and again, while the observer keeps reading.
        taken = [0]

        def try_exclusive() -> bool:
            try:
                fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(writer, fcntl.LOCK_UN)
            taken[0] += 1
            return taken[0] >= 20

        wait_for(try_exclusive, "20 non-blocking exclusive grants", timeout=10.0, interval=0.005)
    finally:
        done.set()
        thread.join(timeout=10.0)
        os.close(writer)
    assert not thread.is_alive()
    assert len(os.listdir("/proc/self/fd")) == fds_before  # the observer closed its fd
    assert [s.writer for s in sightings if s.path == "f0.txt"] == ["init", "kept"], sightings
