"""Sessions in Redis and on disk: names, records, the call's entry step, folders, the sweeper."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import redis

from executor import ErrorType, SessionError, Settings, ToolCall, ToolRegistry, ToolResult
from executor.contract import Workspace
from executor.wire import (
    CREATING,
    DELETING,
    READY,
    CallJob,
    Keys,
    SessionStore,
    check_session_name,
    session_scope,
)
from workers.pipeline._chain import CallState
from workers.pipeline._session import EnterSession
from workers.sessions import SessionSweeper
from workers.sessions._folders import folder_size, make_folder, remove_folder

KEYS = Keys()


@pytest.fixture
def store(client: redis.Redis) -> SessionStore:
    return SessionStore(client, KEYS)


def _ready(store: SessionStore, name: str, host: str = "h1", idle_ttl: float = 0) -> None:
    assert store.create_record(name, host=host, queue="default", idle_ttl=idle_ttl)
    assert store.move(name, [CREATING], READY) == CREATING


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../b", "a/b", ".hidden", "a b", "a:b", "a{b}", "x" * 101, "é"]
)
def test_names_that_are_no_plain_folder_name_are_refused(name: str) -> None:
    with pytest.raises(SessionError, match="Invalid session name"):
        check_session_name(name)


@pytest.mark.parametrize("name", ["s-17", "agent_3", "run.2026-11-30", "A", "x" * 100])
def test_plain_names_are_taken(name: str) -> None:
    assert check_session_name(name) == name
    assert session_scope(name) == f"session.{name}"


def test_sessions_are_counted_by_host_in_two_round_trips(
    store: SessionStore, client: redis.Redis
) -> None:
    for index in range(30):
        _ready(store, f"c{index}", host="h1" if index % 3 else "h2")
    store.forget("c1")
    calls = client.info("commandstats")
    counted = store.count_by_host()
    after = client.info("commandstats")
    assert counted == {"h1": 19, "h2": 10}
    # Oracle: the server ran one SMEMBERS and one HGET per session; the pending calls of each
    # session (ZRANGE and MGET), which a picked host does not need, are not read.
    ran = {
        name: after[name]["calls"] - calls.get(name, {"calls": 0})["calls"]
        for name in after
        if after[name]["calls"] != calls.get(name, {"calls": 0})["calls"]
    }
    assert (ran.get("cmdstat_smembers"), ran.get("cmdstat_hget")) == (1, 29)
    assert "cmdstat_zrange" not in ran
    assert "cmdstat_mget" not in ran


def test_a_name_is_created_once(store: SessionStore) -> None:
    assert store.create_record("s1", host="h1", queue="default", idle_ttl=60)
    assert not store.create_record("s1", host="h2", queue="default", idle_ttl=60)
    info = store.read("s1")
    assert info is not None
    assert (info.host, info.state, info.idle_ttl, info.calls, info.cwd) == (
        "h1",
        CREATING,
        60.0,
        0,
        ".",
    )
    assert store.names() == ["s1"]


def test_a_call_enters_only_a_ready_session_of_its_own_host(store: SessionStore) -> None:
    assert "does not exist" in store.enter("s1", "h1").problem
    store.create_record("s1", host="h1", queue="default", idle_ttl=0)
    assert "is creating, not ready" in store.enter("s1", "h1").problem
    store.move("s1", [CREATING], READY)
    assert "lives on host 'h1'" in store.enter("s1", "h2").problem
    store.save_shell("s1", "sub", {"X": "1"})
    entered = store.enter("s1", "h1")
    assert (entered.ok, entered.cwd, entered.env) == (True, "sub", {"X": "1"})
    info = store.read("s1")
    assert info is not None
    assert info.calls == 1


def test_a_state_change_conditional_on_the_last_use_fails_after_a_call(
    store: SessionStore,
) -> None:
    _ready(store, "s1")
    info = store.read("s1")
    assert info is not None
    store.enter("s1", "h1")
    assert store.move("s1", [READY], DELETING, last_used=info.last_used_raw) is None
    fresh = store.read("s1")
    assert fresh is not None
    assert store.move("s1", [READY], DELETING, last_used=fresh.last_used_raw) == READY


def test_pending_calls_are_those_without_a_result(store: SessionStore, client: redis.Redis) -> None:
    _ready(store, "s1")
    client.zadd(KEYS.session_calls("s1"), {"c1": 1.0, "c2": 2.0})
    assert store.pending_calls("s1") == ["c1", "c2"]
    client.set(KEYS.result("c1"), "{}")
    assert store.pending_calls("s1") == ["c2"]
    assert client.zrange(KEYS.session_calls("s1"), 0, -1) == [b"c2"]


def test_forget_removes_every_key_of_the_session(store: SessionStore, client: redis.Redis) -> None:
    _ready(store, "s1")
    _ready(store, "s2")
    client.zadd(KEYS.session_calls("s1"), {"c1": 1.0})
    lock = KEYS.lock(session_scope("s1"))
    client.hset(lock.epoch, "seq", 7)
    client.hset(lock.stats, "grants_exclusive", 1)
    store.forget("s1")
    assert store.names() == ["s2"]
    assert sorted(client.keys("*s1*")) == []
    # A record is not brought back by a late shell save of a call that was still finishing.
    store.save_shell("s1", ".", {})
    assert not client.exists(KEYS.session("s1"))


# -- the entry step -----------------------------------------------------------------------


def _state(tmp_path: Path, session: str | None) -> CallState:
    call = ToolCall(id="c1", name="read_file")
    return CallState(
        call=call,
        registry=ToolRegistry(),
        workspace=Workspace(tmp_path),
        settings=Settings(),
        job=CallJob(call=call, turn_id="t", index=0, session=session),
    )


def _answer(state: CallState) -> ToolResult:
    return ToolResult(
        call_id="c1", name="read_file", status="ok", content=f"{state.workspace.root}|{state.scope}"
    )


def test_the_step_moves_a_call_into_its_session(store: SessionStore, tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    (root / "s1").mkdir(parents=True)
    _ready(store, "s1")
    step = EnterSession(store, root, "h1")
    state = _state(tmp_path, "s1")
    assert step(state, _answer).content == f"{root / 's1'}|session.s1"
    assert state.shell is not None
    assert state.shell.cwd == "."


@pytest.mark.parametrize(
    ("session", "host", "root", "pool_calls", "said"),
    [
        ("nope", "h1", True, True, "does not exist"),
        ("s1", "h2", True, True, "lives on host 'h1'"),
        ("s1", "h1", False, True, "serves no sessions"),
        (None, "h1", True, False, "serves only sessions"),
        ("gone", "h1", True, True, "has no folder on host 'h1'"),
        ("../s1", "h1", True, True, "Invalid session name '../s1'"),
    ],
)
def test_a_call_that_cannot_enter_is_answered_and_runs_nothing(
    store: SessionStore,
    tmp_path: Path,
    session: str | None,
    host: str,
    root: bool,
    pool_calls: bool,
    said: str,
) -> None:
    sessions = tmp_path / "sessions"
    (sessions / "s1").mkdir(parents=True)
    _ready(store, "s1")
    _ready(store, "gone")

    def must_not_run(state: CallState) -> ToolResult:
        raise AssertionError("the call ran")

    step = EnterSession(store, sessions if root else None, host, pool_calls=pool_calls)
    result = step(_state(tmp_path, session), must_not_run)
    assert result.error_type is ErrorType.UNKNOWN_SESSION
    assert said in result.content
    assert result.content.startswith("'read_file' did not run: ")


# -- folders and the sweeper --------------------------------------------------------------


def test_a_folder_is_made_as_a_copy_of_its_template(tmp_path: Path) -> None:
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src" / "run.sh").write_text("echo hi\n")
    os.chmod(template / "src" / "run.sh", 0o750)
    os.symlink("src/run.sh", template / "link")
    root = tmp_path / "root"
    root.mkdir()
    made = make_folder(root, "s1", str(template))
    assert (made / "src" / "run.sh").read_text() == "echo hi\n"
    assert os.stat(made / "src" / "run.sh").st_mode & 0o777 == 0o750
    assert os.readlink(made / "link") == "src/run.sh"
    assert sorted(p.name for p in root.iterdir()) == ["s1"]
    assert folder_size(made) == len("echo hi\n") + len("src/run.sh")


def test_a_failed_copy_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(SessionError, match="is not a folder on this host"):
        make_folder(root, "s1", str(tmp_path / "missing"))
    (root / "s2").mkdir()
    with pytest.raises(SessionError, match="already exists"):
        make_folder(root, "s2")
    assert sorted(p.name for p in root.iterdir()) == ["s2"]
    assert remove_folder(root, "s2")
    assert not remove_folder(root, "s2")
    assert list(root.iterdir()) == []


def test_the_sweeper_expires_idle_sessions_of_its_host_only(
    store: SessionStore, client: redis.Redis, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    for name in ("idle", "busy", "fresh", "forever", "other"):
        (root / name).mkdir(parents=True)
    _ready(store, "idle", idle_ttl=0.05)
    _ready(store, "busy", idle_ttl=0.05)
    _ready(store, "fresh", idle_ttl=3600)
    _ready(store, "forever", idle_ttl=0)
    _ready(store, "other", host="h2", idle_ttl=0.05)
    client.zadd(KEYS.session_calls("busy"), {"c-running": time.time()})
    time.sleep(0.1)  # past the 0.05 s idle time; nothing waits on another process here
    sweeper = SessionSweeper(client, KEYS, root, "h1", every_s=30)
    assert sweeper.sweep() == ["idle"]
    assert store.names() == ["busy", "forever", "fresh", "other"]
    assert sorted(p.name for p in root.iterdir()) == ["busy", "forever", "fresh", "other"]
    measured = store.read("fresh")
    assert measured is not None
    assert measured.size_bytes == 0
