"""Sessions on a real redis-server with real worker processes: isolation, locks, lifecycle, hosts.

Each test starts its own worker processes (``tests.support.procs.Workers``) that serve sessions
from a sessions root of their host (``tests.support.sessions.host_settings``: a folder of the
test's temporary directory stands for that host's disk). What ran where is read back from the
event stream; what a folder holds, from the folder itself (``tree``). The shell state bash
keeps between calls is proved in ``test_sessions_shell``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import (
    ErrorType,
    Executor,
    SessionError,
    Sessions,
    Settings,
    ToolCall,
    ToolResult,
    ToolStatus,
)
from executor._rq.jobs import enqueue_turn, named_queue
from executor.wire import (
    CallJob,
    Keys,
    ResultStore,
    new_turn_id,
)
from tests.support.procs import MakeWorkers, events, holds, named, wait_for_event
from tests.support.sessions import (
    call,
    host_settings,
    in_index,
    ok,
    session_keys,
    stdout_lines,
    tree,
)
from tests.support.waiting import wait_for
from workers.processes._place import HOST_STATE
from workers.tools._shell_settings import BashSettings

# A process-heavy proof (worker processes): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof


# What session B's files hold: no output of a call of session A may show it.
SECRET = "B-SECRET-7f3a9c"
# What grep looks for: it matches SECRET, and a result that echoes it does not show SECRET.
SECRET_PATTERN = r"B-SECRET-\w+"
# A command that holds its session's exclusive lock until it is cancelled.
HANG = "sleep 60"
HANG_TIMEOUT = 120.0


@pytest.fixture
def h1(redis_url: str, tmp_path: Path) -> Settings:
    """Host h1's workers: sessions in their own root; the sweeper passes every 0.2 s."""
    return host_settings(redis_url, tmp_path, "h1", session_sweep_s=0.2)


@pytest.fixture
def sessions(h1: Settings) -> Iterator[Sessions]:
    with Sessions(settings=h1) as manager:
        yield manager


def _root(settings: Settings) -> Path:
    assert settings.worker.sessions_root is not None
    return Path(os.path.realpath(settings.worker.sessions_root))


def _hang(executor: Executor, client: redis.Redis, call_id: str, session: str) -> str:
    """Submit a bash call that hangs in ``session``; return its turn id once it holds the lock."""
    turn = executor.submit(
        [call(call_id, "bash", command=HANG, timeout=HANG_TIMEOUT)], session=session
    )
    wait_for_event(client, "tool_execution_started", call_id)
    return turn.turn_id


def _holders(sessions: Sessions, name: str) -> list[str]:
    """The calls that hold session ``name``'s lock now."""
    return [holder.owner.call_id for holder in sessions.lock_status(name).holders]


# -- 1. isolation ------------------------------------------------------------------------


def _leaks(result: ToolResult, arguments: dict[str, Any]) -> list[str]:
    """What of session B a result shows: its content, or a name of it the call did not give.

    A listing of A's own folder shows where A's links point: that text is A's (a link's
    target), so a name in it is no leak.
    """
    shown = [SECRET] if SECRET in result.content else []
    if result.name == "list_directory" and arguments["path"] == ".":
        return shown
    given = json.dumps(arguments)
    shown += [
        name
        for name in ("secret-b.txt", "deep-b.txt")
        if name in result.content and name not in given
    ]
    return shown


def test_file_tools_of_one_session_cannot_reach_another_sessions_files(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions
) -> None:
    make_workers(h1).start(2)
    # Session B is named "AB": its path starts with A's, so a check of paths as strings
    # ("starts with A's root") would let every call below through.
    sessions.create("A")
    sessions.create("AB")
    root = _root(h1)
    a, b = root / "A", root / "AB"
    (b / "secret-b.txt").write_text(f"{SECRET}\n")
    (b / "inner").mkdir()
    (b / "inner" / "deep-b.txt").write_text(f"{SECRET} deep\n")
    (a / "mine.txt").write_text("mine\n")
    (a / "to-b").symlink_to(b)  # a link to B's folder, absolute
    (a / "rel-to-b").symlink_to(Path("..") / "AB")  # the same, relative
    (a / "to-secret").symlink_to(b / "secret-b.txt")  # a link to one of B's files
    before = tree(b)

    # (tool, arguments, refused): refused calls must fail; the others run in A and show A only.
    reads: list[tuple[str, dict[str, Any], bool]] = [
        ("read_file", {"path": "secret-b.txt"}, True),  # relative: A has no such file
        ("read_file", {"path": "../AB/secret-b.txt"}, True),
        ("read_file", {"path": str(b / "secret-b.txt")}, True),
        ("read_file", {"path": "to-b/secret-b.txt"}, True),
        ("read_file", {"path": "rel-to-b/secret-b.txt"}, True),
        ("read_file", {"path": "to-secret"}, True),
        ("list_directory", {"path": "../AB"}, True),
        ("list_directory", {"path": str(b)}, True),
        ("list_directory", {"path": "to-b"}, True),
        ("list_directory", {"path": "rel-to-b/inner"}, True),
        ("list_directory", {"path": "."}, False),
        ("grep", {"pattern": SECRET_PATTERN, "path": "../AB"}, True),
        ("grep", {"pattern": SECRET_PATTERN, "path": str(b)}, True),
        ("grep", {"pattern": SECRET_PATTERN, "path": "to-b"}, True),
        ("grep", {"pattern": SECRET_PATTERN, "path": "to-secret"}, True),
        ("grep", {"pattern": SECRET_PATTERN, "path": "."}, False),  # links are not followed
        ("glob", {"pattern": "*", "path": "../AB"}, True),
        ("glob", {"pattern": "**/*", "path": str(b)}, True),
        ("glob", {"pattern": "*", "path": "to-b"}, True),
        ("glob", {"pattern": "**/*", "path": "."}, False),
        ("glob", {"pattern": "to-b/**/*", "path": "."}, False),
        ("glob", {"pattern": "../AB/*", "path": "."}, True),
    ]
    writes: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "../AB/secret-b.txt", "content": "overwritten by A"}),
        ("write_file", {"path": str(b / "secret-b.txt"), "content": "overwritten by A"}),
        ("write_file", {"path": str(b / "new-by-a.txt"), "content": "planted by A"}),
        ("write_file", {"path": "to-b/secret-b.txt", "content": "overwritten by A"}),
        ("write_file", {"path": "to-b/inner/new-by-a.txt", "content": "planted by A"}),
        ("write_file", {"path": "rel-to-b/new-by-a.txt", "content": "planted by A"}),
        ("write_file", {"path": "to-secret", "content": "overwritten by A"}),
        ("edit_file", {"path": "../AB/secret-b.txt", "old_string": SECRET, "new_string": "A"}),
        ("edit_file", {"path": "to-secret", "old_string": SECRET, "new_string": "A"}),
    ]
    with Executor(settings=h1, session="A") as executor:
        read_results = executor.run(
            [call(f"r{i}", tool, **args) for i, (tool, args, _) in enumerate(reads)], timeout=60
        )
        write_results = executor.run(
            [call(f"w{i}", tool, **args) for i, (tool, args) in enumerate(writes)], timeout=60
        )
        own = executor.run(
            [
                call("own-w", "write_file", path="mine.txt", content="A wrote"),
                call("own-r", "read_file", path="mine.txt"),
            ],
            timeout=60,
        )

    for (tool, args, refused), result in zip(reads, read_results, strict=True):
        assert not _leaks(result, args), (tool, args, result.content)
        if refused:
            assert result.status is ToolStatus.ERROR, (tool, args, result.content)
        else:
            assert result.status is ToolStatus.OK, (tool, args, result.content)
    listing = ok(read_results[10])
    assert "mine.txt" in listing, listing  # the calls really ran in A's folder
    for (tool, args), result in zip(writes, write_results, strict=True):
        assert result.status is ToolStatus.ERROR, (tool, args, result.content)
        assert result.error_type is ErrorType.TOOL_ERROR, (tool, args, result.content)
    assert tree(b) == before, "a call of session A changed session B's folder"
    assert ok(own[1]) == "A wrote"

    # B itself reads its file: the refusals above are the session boundary, nothing else.
    with Executor(settings=h1, session="AB") as executor:
        [mine] = executor.run([call("b-own", "read_file", path="secret-b.txt")], timeout=60)
    assert SECRET in ok(mine)


def test_bash_cd_into_another_session_is_not_kept_for_the_next_call(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions
) -> None:
    # Unsandboxed, a command may cd into B and read there (in the sandbox B is not there at
    # all: test_sandbox.py). What a session guarantees either way is that its kept state never
    # starts the next call outside its own folder, whichever worker runs it.
    h1 = h1.with_tools(BashSettings(sandbox="off"))
    make_workers(h1).start(2)
    sessions.create("A")
    sessions.create("AB")
    root = _root(h1)
    a, b = root / "A", root / "AB"
    (b / "secret-b.txt").write_text(f"{SECRET}\n")
    outside_note = "outside the session folder; the next command starts in the session folder"
    with Executor(settings=h1, session="A") as executor:
        results = executor.run(
            [
                call("cd-rel", "bash", command="cd ../AB && pwd"),
                call("after-rel", "bash", command="pwd"),
                call("cd-abs", "bash", command=f"cd {b} && pwd"),
                call("after-abs", "bash", command="pwd"),
                call("cd-link", "bash", command="ln -s ../AB to-b && cd to-b && pwd"),
                call("after-link", "bash", command="pwd"),
                call("cd-sub", "bash", command="mkdir -p sub && cd sub && pwd"),
            ],
            timeout=60,
        )
        assert stdout_lines(results[0]) == [str(b)]
        assert outside_note in results[0].content
        assert stdout_lines(results[1]) == [str(a)]
        assert outside_note in results[2].content
        assert stdout_lines(results[3]) == [str(a)]
        assert stdout_lines(results[4]) == [str(a / "to-b")]  # bash's logical path
        assert outside_note in results[4].content
        assert stdout_lines(results[5]) == [str(a)]
        assert stdout_lines(results[6]) == [str(a / "sub")]
        assert sessions.get("A").cwd == "sub"

        # The kept folder becomes a link into B between two calls: the next call must not
        # follow it; it starts in A's root and says why.
        (a / "sub").rmdir()
        (a / "sub").symlink_to(b)
        [swapped] = executor.run([call("after-swap", "bash", command="pwd; ls")], timeout=60)
    assert stdout_lines(swapped)[0] == str(a)
    assert "secret-b.txt" not in swapped.content
    assert "is outside the session folder or gone" in swapped.content
    assert sessions.get("A").cwd == "."


# -- 2. one session's hung call delays no other session ----------------------------------


def test_a_hung_exclusive_call_delays_no_other_session(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, client: redis.Redis
) -> None:
    make_workers(h1).start(2)
    sessions.create("A")
    sessions.create("B")
    with Executor(settings=h1) as executor:
        hung = _hang(executor, client, "a-hang", "A")
        assert _holders(sessions, "A") == ["a-hang"], "the call does not hold its session's lock"

        # B's exclusive call runs to its end while A's still holds A's lock.
        [written] = executor.run(
            [call("b-write", "write_file", path="b.txt", content="B")], session="B", timeout=30
        )
        assert ok(written).startswith("Successfully wrote"), written.content
        assert not named(events(client), "lock_released", ["a-hang"])
        assert _holders(sessions, "A") == ["a-hang"]

        # The control: A's own next exclusive call does wait for A's lock.
        waiting = executor.submit(
            [call("a-write", "write_file", path="a.txt", content="A")], session="A"
        )
        wait_for_event(client, "lock_wait", "a-write")
        executor.cancel(hung)
        [hang_result] = executor.collect(hung, timeout=60)
        [a_written] = executor.collect(waiting, timeout=60)

    assert hang_result.status is ToolStatus.ERROR, hang_result.content
    assert ok(a_written).startswith("Successfully wrote")
    assert (_root(h1) / "B" / "b.txt").read_text() == "B"
    found = {h.call_id: h for h in holds(events(client))}
    assert found["b-write"].overlaps(found["a-hang"])
    assert found["a-hang"].end <= found["a-write"].start
    assert found["a-hang"].worker != found["b-write"].worker


# -- 4. lifecycle ------------------------------------------------------------------------


def test_create_empty_and_from_a_template_copied_like_cp_a(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, tmp_path: Path
) -> None:
    make_workers(h1).start(1)
    root = _root(h1)
    empty = sessions.create("empty")
    assert (empty.state, empty.host, empty.calls, empty.cwd) == ("ready", "h1", 0, ".")
    assert (root / "empty").is_dir()
    assert not list((root / "empty").iterdir())

    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "data.txt").write_text("hello\n")
    (template / "data.txt").chmod(0o640)
    (template / "run.sh").write_text("#!/bin/sh\necho run\n")
    (template / "run.sh").chmod(0o755)
    (template / "sub" / "nested.txt").write_text("nested\n")
    (template / "sub").chmod(0o750)
    (template / "link").symlink_to("data.txt")
    (template / "dangling").symlink_to("missing.txt")
    os.utime(template / "data.txt", (1_000_000_000, 1_000_000_000))
    original = tree(template)

    made = sessions.create("copied", template=template)
    copy = root / "copied"
    assert made.template == str(template.resolve())
    assert tree(copy) == original
    assert os.readlink(copy / "link") == "data.txt"
    assert (copy / "link").is_symlink()
    assert (copy / "data.txt").stat().st_mtime == 1_000_000_000

    # The session's own writes change its copy, never the template.
    with Executor(settings=h1, session="copied") as executor:
        results = executor.run(
            [
                call("w", "write_file", path="data.txt", content="changed"),
                call("x", "bash", command="./run.sh"),
            ],
            timeout=60,
        )
    ok(results[0])
    assert stdout_lines(results[1]) == ["run"]
    assert (copy / "data.txt").read_text() == "changed"
    assert tree(template) == original

    # A template that is no folder: refused, and the name is free again.
    with pytest.raises(SessionError, match="is not a folder on this host"):
        sessions.create("bad-template", template=tmp_path / "no-such-folder")
    with pytest.raises(SessionError):
        sessions.get("bad-template")
    assert not (root / "bad-template").exists()
    sessions.create("bad-template")


def test_create_refuses_a_taken_or_invalid_name_and_get_an_unknown_one(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions
) -> None:
    make_workers(h1).start(1)
    root = _root(h1)
    sessions.create("dup")
    (root / "dup" / "keep.txt").write_text("kept")
    with pytest.raises(SessionError, match="already exists"):
        sessions.create("dup")
    assert (root / "dup" / "keep.txt").read_text() == "kept"

    for name in ["../x", "a/b", ".hidden", "", "x" * 101, "a b", "..", "a\nb"]:
        with pytest.raises(SessionError, match="Invalid session name") as refused:
            sessions.create(name)
        assert repr(name) in str(refused.value)
    # The host's own folder (its sessions' networks, their note for bash) is no session's.
    assert sorted(p.name for p in root.iterdir() if p.name != HOST_STATE) == ["dup"]
    assert [info.name for info in sessions.list()] == ["dup"]
    sessions.create("x" * 100)  # the longest name allowed

    with pytest.raises(SessionError, match="No live worker serves sessions on host 'h9'"):
        sessions.create("elsewhere", host="h9")
    with pytest.raises(SessionError, match="No session 'elsewhere'"):
        sessions.get("elsewhere")
    with pytest.raises(SessionError, match="No session 'nope'"):
        sessions.get("nope")
    with pytest.raises(SessionError, match="No session 'nope'"):
        sessions.delete("nope")


def test_list_shows_each_sessions_calls_and_pending_calls(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, client: redis.Redis
) -> None:
    make_workers(h1).start(2)
    sessions.create("busy")
    sessions.create("quiet")
    with Executor(settings=h1, session="busy") as executor:
        ok(
            executor.run(
                [
                    call("l1", "write_file", path="f.txt", content="x"),
                    call("l2", "read_file", path="f.txt"),
                ],
                timeout=60,
            )[1]
        )
        listed = {info.name: info for info in sessions.list()}
        assert (listed["busy"].calls, listed["busy"].pending) == (2, 0)
        assert (listed["quiet"].calls, listed["quiet"].pending) == (0, 0)

        hung = _hang(executor, client, "l-hang", "busy")
        listed = {info.name: info for info in sessions.list()}
        assert (listed["busy"].calls, listed["busy"].pending) == (3, 1)
        executor.cancel(hung)
        executor.collect(hung, timeout=60)
    assert sessions.get("busy").pending == 0


def test_delete_refuses_while_calls_run_and_force_cancels_them(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, client: redis.Redis
) -> None:
    make_workers(h1).start(2)
    sessions.create("doomed")
    folder = _root(h1) / "doomed"
    with Executor(settings=h1, session="doomed") as executor:
        hung = _hang(executor, client, "d-hang", "doomed")
        queued = executor.submit([call("d-write", "write_file", path="f.txt", content="x")])
        wait_for_event(client, "lock_wait", "d-write")

        with pytest.raises(SessionError, match=r"has 2 call\(s\) waiting or running"):
            sessions.delete("doomed")
        assert sessions.get("doomed").state == "ready"
        assert folder.is_dir()

        assert sessions.delete("doomed", force=True, timeout=60) is True
        [hang_result] = executor.collect(hung, timeout=10)
        [write_result] = executor.collect(queued, timeout=10)
        assert hang_result.status is ToolStatus.ERROR, hang_result.content
        assert write_result.call_id == "d-write"
        assert not folder.exists()
        assert session_keys(client, "doomed") == []
        assert not in_index(client, "doomed")
        with pytest.raises(SessionError, match="No session 'doomed'"):
            sessions.get("doomed")

        # This executor still knows the session's host: the worker refuses the call.
        [late] = executor.run([call("d-late", "write_file", path="f.txt", content="y")], timeout=30)
    with Executor(settings=h1, session="doomed") as fresh:
        [fresh_late] = fresh.run([call("d-fresh", "read_file", path="f.txt")], timeout=30)
    for result in (late, fresh_late):
        assert result.error_type is ErrorType.UNKNOWN_SESSION, result.content
        assert "does not exist" in result.content
    assert not folder.exists()


def test_a_call_sent_after_a_delete_leaves_no_key_of_the_session(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, client: redis.Redis
) -> None:
    make_workers(h1).start(1)
    sessions.create("gone")
    with Executor(settings=h1, session="gone") as executor:
        ok(executor.run([call("g1", "write_file", path="f.txt", content="x")], timeout=30)[0])
        assert sessions.delete("gone") is True
        assert session_keys(client, "gone") == []
        [late] = executor.run([call("g2", "read_file", path="f.txt")], timeout=30)
    assert late.error_type is ErrorType.UNKNOWN_SESSION, late.content
    assert session_keys(client, "gone") == []


def test_rq_keeps_no_record_of_a_sessions_folder_work(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, client: redis.Redis
) -> None:
    # The create and delete answer on a reply list: RQ's record of each job (1.7 KB a
    # session) goes once it ended well, as a call's does (``TOOLPOOL_RQ_RECORD_TTL``, 0).
    make_workers(h1).start(1)
    sessions.create("unrecorded")
    assert sessions.delete("unrecorded") is True
    wait_for(lambda: not list(client.scan_iter("rq:job:*")), what="RQ's records to go")
    assert [key for key in client.scan_iter("rq:finished:*") if client.zcard(key)] == []


def test_idle_sessions_are_swept_but_not_one_with_a_running_call(
    h1: Settings, make_workers: MakeWorkers, sessions: Sessions, client: redis.Redis
) -> None:
    make_workers(h1).start(2)
    root = _root(h1)

    def swept(name: str) -> bool:
        return not (root / name).exists() and not session_keys(client, name)

    sessions.create("quick", idle_ttl=1)
    # 2 s, not 1: its call must be submitted (and so pending) before it could expire.
    sessions.create("running", idle_ttl=2)
    kept = sessions.create("kept")  # the default TTL: a day
    with Executor(settings=h1) as executor:
        hung = _hang(executor, client, "i-hang", "running")
        # Created after the running call entered its session, with the same TTL: when this
        # one has expired, "running" was past its own idle time at that sweep too.
        sessions.create("idle", idle_ttl=2)
        wait_for(lambda: swept("quick"), "the sweeper to delete the idle session")
        wait_for(lambda: swept("idle"), "the sweeper to delete the later idle session")
        assert not in_index(client, "quick")
        assert not in_index(client, "idle")
        assert sessions.get("running").state == "ready"
        assert (root / "running").is_dir()
        assert sessions.get("kept").state == "ready"
        assert (root / "kept").is_dir()

        executor.cancel(hung)
        executor.collect(hung, timeout=60)
    # Nothing pending any more, idle past its TTL: it goes at the next sweep.
    wait_for(lambda: swept("running"), "the sweeper to delete the session once its call ended")
    assert sessions.get("kept").created_at == kept.created_at


# -- 5. two hosts, no shared disk --------------------------------------------------------


def test_two_hosts_without_a_shared_disk_lose_no_write(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    hosts = {name: host_settings(redis_url, tmp_path, name) for name in ("h1", "h2")}
    names = {
        host: {w.name for w in make_workers(settings).start(2)} for host, settings in hosts.items()
    }
    orchestrator = Settings(redis_url=redis_url)
    with Sessions(settings=orchestrator) as manager:
        assert manager.hosts() == {"h1": 2, "h2": 2}
        placed = {f"agent{i}": ("h1", "h2")[i % 2] for i in range(8)}
        for name, host in placed.items():
            assert manager.create(name, host=host).host == host

    def agent(name: str) -> list[str]:
        misses = []
        with Executor(settings=orchestrator, session=name) as executor:
            for turn in range(10):
                token = f"{name}-turn{turn}-{uuid.uuid4().hex}"
                results = executor.run(
                    [
                        call(f"{name}-{turn}-w", "write_file", path="f.txt", content=token),
                        call(f"{name}-{turn}-r", "read_file", path="f.txt"),
                        call(f"{name}-{turn}-g", "grep", pattern=token, path="f.txt"),
                    ],
                    timeout=60,
                )
                ok(results[0])
                if results[1].content != token:
                    misses.append(f"read {results[1].call_id}: {results[1].content!r}")
                if token not in results[2].content:
                    misses.append(f"grep {results[2].call_id}: {results[2].content!r}")
        return misses

    with ThreadPoolExecutor(len(placed)) as threads:
        missed = [m for found in threads.map(agent, placed) for m in found]
    assert missed == [], f"{len(missed)} of 160 reads missed their turn's write: {missed[:5]}"

    ran_on = {e.call_id: e.worker for e in named(events(client), "lock_acquired")}
    for name, host in placed.items():
        other = "h2" if host == "h1" else "h1"
        assert (_root(hosts[host]) / name / "f.txt").read_text().startswith(f"{name}-turn9-")
        assert not (_root(hosts[other]) / name).exists()
        mine = {ran_on[f"{name}-{turn}-{kind}"] for turn in range(10) for kind in "wrg"}
        assert mine <= names[host], f"{name}'s calls ran off host {host}: {mine - names[host]}"


def test_a_worker_refuses_a_call_of_a_session_on_another_host(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    h1 = host_settings(redis_url, tmp_path, "h1")
    h2 = host_settings(redis_url, tmp_path, "h2")
    h1_workers = {w.name for w in make_workers(h1).start(1)}
    make_workers(h2).start(1)
    with Sessions(settings=h1) as manager:
        manager.create("pinned", host="h2")
    h2_folder = _root(h2) / "pinned"
    (h2_folder / "f.txt").write_text("h2 original\n")
    # A folder of that name on h1's disk too (left over, or another team's): a worker of h1
    # that ignored the session's host would write into it.
    h1_folder = _root(h1) / "pinned"
    h1_folder.mkdir()
    before_h1, before_h2 = tree(h1_folder), tree(h2_folder)

    keys = Keys()
    job = CallJob(
        call=ToolCall(
            id="stray",
            name="write_file",
            arguments={"path": "f.txt", "content": "written on the wrong host"},
        ),
        turn_id=new_turn_id(),
        index=0,
        session="pinned",
    )
    queue = named_queue(client, keys.host_queue_name(h1.client.queue, "h1"))
    enqueue_turn(
        queue,
        [[job]],
        doorbell=keys.doorbell(queue.name),
        barrier_key=keys.turn_barrier(job.turn_id),
        barrier_ttl=600,
        result_ttl=600,
        failure_ttl=600,
    )
    results = ResultStore(client, keys)
    wait_for(lambda: results.get("stray") is not None, "the h1 worker's answer")

    answer = results.get("stray")
    assert answer is not None
    assert answer.error_type is ErrorType.UNKNOWN_SESSION, answer.content
    assert "lives on host 'h2'" in answer.content
    [answered] = named(events(client), "tool_result", ["stray"])
    assert answered.worker in h1_workers
    assert tree(h1_folder) == before_h1
    assert tree(h2_folder) == before_h2
