"""Three worker hosts, each in a network namespace of its own; one host's link is cut mid-call.

Each host is a namespace (``tests.support.netns``) with its own sessions root and a supervised
pool (``toolpool worker --host hN``) that reaches the test's Redis over a veth pair; the test
(the orchestrator) stays in the root namespace. A session is pinned to each host and runs a
loop of short turns (write a file, read it back). h1's session then starts an exclusive long
call (``bash sleep 30``), and once it runs, h1's link is cut. The proof, with its times
printed (run with ``-s``):

- the cut-off call is answered (``worker_lost`` or ``lock_lost``) within the call liveness
  and a margin, not after its 30 s;
- h1's worker, unable to prove its lease, stops the tool within about a lease of the cut;
- h2's and h3's sessions go on during the cut, every turn answered ok and none slow;
- once the link is back, h1's session serves again.

It runs as root where the machine allows namespaces and skips, saying why, where it does not.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from executor import ErrorType, Executor, Sessions, Settings, ToolCall, ToolResult, ToolStatus
from tests.support.netns import Host, Hosts, isolated_hosts
from tests.support.pids import processes_where
from tests.support.ports import free_port
from tests.support.procs import events, python_path_env, stop_process, wait_for_event
from tests.support.waiting import gone, wait_for
from workers._embedded_redis import find_redis_server

# A process-heavy proof (three pools in three namespaces): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

HOSTS = ("h1", "h2", "h3")
WORKERS_PER_HOST = 2
LEASE_MS = 2000
LIVENESS_S = 3.0
HEARTBEAT_S = 0.5
# The cut-off call's answer: the liveness key expires, then the client's next check and its
# grace of two heartbeats; the rest is margin for a busy machine.
ANSWER_BOUND_S = LIVENESS_S + 1.0 + 2 * HEARTBEAT_S + 10.0
# No turn of another host may take this long while h1 is cut off (an idle turn takes ~0.1 s).
OTHERS_BOUND_S = 5.0
# After the link is back, h1's session must serve a turn within this.
BACK_BOUND_S = 45.0
# Turns each other host completes inside the cut, past the cut-off call's answer.
TURNS_IN_CUT = 20
# Cut off, h1's worker must stop its exclusive tool before the lease it can no longer renew
# may have ended in Redis (one lease after the cut at most), and a next holder could start;
# bash checks its fence every 0.5 s and a check fails within a third of the lease.
TOOL_STOP_BOUND_S = LEASE_MS / 1000 + 1.0
# The cut lasts at most this long past those turns if the cut-off tool runs on.
CUT_HOLD_MAX_S = 15.0
BASELINE_TURNS = 5
TURN_TIMEOUT_S = 30.0
_STOP_GRACE_S = 15.0
# Marks every process a pool of this test starts (bash drops it: its env is an allow-list).
_MARKER = "TOOLPOOL_NETNS_TEST"


def test_cut_host_is_answered_others_go_on_and_it_comes_back(tmp_path: Path) -> None:
    settings = Settings(
        lock_lease_ms=LEASE_MS, call_liveness_s=LIVENESS_S, call_heartbeat_s=HEARTBEAT_S
    )
    with ExitStack() as stack:
        hosts = stack.enter_context(isolated_hosts(HOSTS))
        port = free_port()
        stack.enter_context(_redis_server(port, ["127.0.0.1", *hosts.addresses()], tmp_path))
        settings = settings.with_changes(redis_url=f"redis://127.0.0.1:{port}/0")
        pools = {
            h.name: stack.enter_context(_host_pool(h, port, settings, tmp_path)) for h in hosts.all
        }
        sessions = stack.enter_context(Sessions(settings=settings))
        wait_for(
            lambda: sessions.hosts() == dict.fromkeys(HOSTS, WORKERS_PER_HOST),
            what=f"{WORKERS_PER_HOST} live workers on each of {HOSTS}",
        )
        for name in HOSTS:
            info = sessions.create(f"s-{name}", host=name, timeout=TURN_TIMEOUT_S)
            assert info.host == name
        report = _run_scenario(hosts, pools["h1"], settings)
        print(report.text())
        report.check()


# -- the scenario ----------------------------------------------------------------------------


@dataclass
class TurnRecord:
    """One short turn of a session loop: when it ran (monotonic) and whether it was right."""

    start: float
    end: float
    ok: bool
    detail: str = ""

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class SessionLoop:
    """A thread that runs short turns in one session until told to stop."""

    session: str
    settings: Settings
    turns: list[TurnRecord] = field(default_factory=list)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"loop-{self.session}", daemon=True)
        self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        """Stop after the turn in flight; with ``wait``, join it and raise what it met."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(timeout=TURN_TIMEOUT_S + 10)
            assert not self._thread.is_alive(), f"the loop of {self.session} did not stop"
        if wait and self.error is not None:
            raise AssertionError(f"the loop of {self.session} failed") from self.error

    def completed(self, since: float = 0.0) -> list[TurnRecord]:
        return [t for t in list(self.turns) if t.start >= since]

    def _run(self) -> None:
        try:
            with Executor(settings=self.settings, session=self.session) as executor:
                number = 0
                while not self._stop.is_set():
                    number += 1
                    self.turns.append(short_turn(executor, f"{self.session}-{number}"))
        except BaseException as exc:  # handed to the test thread by stop()
            self.error = exc


def short_turn(executor: Executor, tag: str) -> TurnRecord:
    """Write a file and read it back in one turn; ok if both answered ok with the content."""
    path = f"turns/{tag}.txt"
    calls = [
        ToolCall(name="write_file", arguments={"path": path, "content": tag}),
        ToolCall(name="read_file", arguments={"path": path}),
    ]
    start = time.monotonic()
    results = executor.run(calls, timeout=TURN_TIMEOUT_S)
    end = time.monotonic()
    right = all(r.status is ToolStatus.OK for r in results) and tag in results[1].content
    detail = (
        "" if right else "; ".join(f"{r.name}: {r.error_type} {r.content[:200]}" for r in results)
    )
    return TurnRecord(start, end, right, detail)


@dataclass
class Report:
    """What the scenario measured, printed as one block and then checked."""

    before: dict[str, list[TurnRecord]]
    during: dict[str, list[TurnRecord]]
    all_turns: dict[str, list[TurnRecord]]
    cut_answer: ToolResult
    answer_s: float
    cut_s: float
    tool_ended_s: float | None  # when h1's `sleep 30` process ended, from the cut
    back_s: float
    back_attempts: list[TurnRecord]
    worker_events: list[str]
    worker_log: list[str]
    lock_after: str

    def text(self) -> str:
        lines = [
            "== host proof: three hosts in network namespaces; h1's link cut mid exclusive call ==",
            f"settings: lock lease {LEASE_MS / 1000:g} s, call liveness {LIVENESS_S:g} s, "
            f"heartbeat {HEARTBEAT_S:g} s, {WORKERS_PER_HOST} workers per host",
            "short turn = write_file + read_file in the host's session; latency "
            "median / max (turns)",
        ]
        for name in HOSTS:
            lines.append(f"  before the cut  s-{name}: {_latencies(self.before[name])}")
        for name in HOSTS[1:]:
            lines.append(f"  during the cut  s-{name}: {_latencies(self.during[name])}")
        lines += [
            f"h1's bash `sleep 30` (exclusive) answered {self.answer_s:.2f} s after the cut: "
            f"{self.cut_answer.status.value} / {self.cut_answer.error_type}",
            f"h1's link down for {self.cut_s:.2f} s",
            "h1's `sleep 30` process (stopped by its worker once the lease cannot be proved): "
            + (
                "still running when the link came back"
                if self.tool_ended_s is None
                else f"ended {self.tool_ended_s:.2f} s after the cut"
            ),
            f"h1's session served again {self.back_s:.2f} s after the link came back "
            f"({len(self.back_attempts)} turn(s): "
            + ", ".join(
                f"{'ok' if t.ok else 'failed'} in {t.latency:.2f} s" for t in self.back_attempts
            )
            + ")",
            "events of the cut-off call (seconds from the cut): "
            + (", ".join(self.worker_events) or "(none)"),
            f"s-h1's lock afterwards: {self.lock_after}",
            "h1's pool log (warnings):",
            *(f"  {line}" for line in self.worker_log),
        ]
        return "\n".join(lines)

    def check(self) -> None:
        assert self.cut_answer.status is ToolStatus.ERROR, self.cut_answer
        assert self.cut_answer.error_type in (ErrorType.WORKER_LOST, ErrorType.LOCK_LOST), (
            self.cut_answer
        )
        assert self.answer_s <= ANSWER_BOUND_S, f"answered after {self.answer_s:.1f} s"
        # Cut off, the worker cannot prove its lease, so it stops its tool by itself, in time.
        assert self.tool_ended_s is not None, "h1's `sleep 30` ran on through the cut"
        assert self.tool_ended_s <= TOOL_STOP_BOUND_S, (
            f"h1's exclusive `sleep 30` ran {self.tool_ended_s:.2f} s into the cut, past its "
            f"{LEASE_MS / 1000:g} s lease (bound {TOOL_STOP_BOUND_S:g} s)"
        )
        for name in HOSTS[1:]:
            failed = [t for t in self.all_turns[name] if not t.ok]
            assert not failed, f"s-{name} turns failed: {[t.detail for t in failed]}"
            assert len(self.during[name]) >= TURNS_IN_CUT
            slowest = max(t.latency for t in self.during[name])
            assert slowest <= OTHERS_BOUND_S, f"s-{name}: a turn took {slowest:.2f} s in the cut"
        assert self.back_attempts
        assert self.back_attempts[-1].ok
        assert self.back_s <= BACK_BOUND_S


def _run_scenario(hosts: Hosts, h1_pool: HostPool, settings: Settings) -> Report:
    client = redis.Redis.from_url(str(settings.redis.url))
    loops = {name: SessionLoop(f"s-{name}", settings) for name in HOSTS}
    try:
        for loop in loops.values():
            loop.start()
        wait_for(
            lambda: all(
                len([t for t in lp.turns if t.ok]) >= BASELINE_TURNS for lp in loops.values()
            ),
            what=f"{BASELINE_TURNS} ok turns in every session",
        )
        # h1's loop steps aside: its session's next call is the long exclusive one.
        loops["h1"].stop()
        before = {name: loop.completed() for name, loop in loops.items()}
        others = [loops[name] for name in HOSTS[1:]]

        with Executor(settings=settings, session="s-h1") as executor:
            call = ToolCall(name="bash", arguments={"command": "sleep 30", "timeout": 60})
            turn = executor.submit([call])
            wait_for_event(client, "tool_execution_started", call.id)
            # Taken from the walk that saw it: /proc's children lists can miss a child while
            # the pool forks beside the command (sandboxes made ahead), so no second look.
            found: list[int] = []

            def sleeping() -> bool:
                found[:] = h1_pool.find("sleep 30")
                return bool(found)

            wait_for(sleeping, what="h1's `sleep 30` process")
            tool = ProcessWatch(found[0])
            hosts.cut("h1")
            cut_at = time.monotonic()
            tool.start()
            (answer,) = executor.collect(turn, timeout=60)
            answered_at = time.monotonic()
            # The cut lasts until the other hosts have shown they go on, and until the cut-off
            # worker has stopped its tool (or long enough to see that it does not).
            wait_for(
                lambda: (
                    all(len(lp.completed(cut_at)) >= TURNS_IN_CUT for lp in others)
                    and (tool.ended_at is not None or time.monotonic() - cut_at >= CUT_HOLD_MAX_S)
                ),
                what=f"{TURNS_IN_CUT} turns of h2 and h3 inside the cut",
            )
            hosts.restore("h1")
            restored_at = time.monotonic()
            cut_wall = time.time() - (restored_at - cut_at)
            during = {
                lp.session[2:]: [t for t in lp.completed(cut_at) if t.end <= restored_at]
                for lp in others
            }
            back = _until_served(settings, restored_at)
        for loop in others:
            loop.stop()
        tool.stop()
        seen = [
            e
            for e in events(client)
            if e.call_id == call.id and e.event in ("lock_lost", "call_lost", "lock_released")
        ]
        worker_events = [
            f"{e.event} at {e.ts - cut_wall:+.2f} s ({e.worker or 'orchestrator'}"
            + (f": {e.data['reason']}" if "reason" in e.data else "")
            + ")"
            for e in sorted(seen, key=lambda e: e.ts)
        ]
        status = Sessions(settings=settings)
        try:
            lock = status.lock_status("s-h1")
        finally:
            status.close()
        return Report(
            before=before,
            during=during,
            all_turns={name: loop.completed() for name, loop in loops.items()},
            cut_answer=answer,
            answer_s=answered_at - cut_at,
            cut_s=restored_at - cut_at,
            tool_ended_s=None if tool.ended_at is None else tool.ended_at - cut_at,
            back_s=back[-1].end - restored_at,
            back_attempts=back,
            worker_events=worker_events,
            worker_log=[
                line
                for line in h1_pool.log.read_text(errors="replace").splitlines()
                if "WARNING" in line
            ],
            lock_after=f"{len(lock.holders)} holder(s), {len(lock.queue)} waiting",
        )
    finally:
        for loop in loops.values():
            loop.stop(wait=False)
        if not hosts.is_up("h1"):
            hosts.restore("h1")  # so that the pools stop as they would
        client.close()


def _until_served(settings: Settings, restored_at: float) -> list[TurnRecord]:
    """Short turns in h1's session, each waited for in full, until one is answered ok."""
    back: list[TurnRecord] = []
    with Executor(settings=settings, session="s-h1", wait_for_workers=BACK_BOUND_S) as executor:
        while not (back and back[-1].ok):
            assert time.monotonic() - restored_at < BACK_BOUND_S, [t.detail for t in back]
            back.append(short_turn(executor, f"s-h1-back-{len(back)}"))
    return back


class ProcessWatch:
    """Stamps (monotonic) when a process ends, from a thread that polls /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ended_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{pid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            if gone(self.pid):
                self.ended_at = time.monotonic()
                return
            self._stop.wait(0.01)


def _latencies(turns: list[TurnRecord]) -> str:
    if not turns:
        return "(no turns)"
    times = [t.latency * 1000 for t in turns]
    return f"{statistics.median(times):.0f} / {max(times):.0f} ms ({len(times)})"


# -- processes -------------------------------------------------------------------------------


@contextmanager
def _redis_server(port: int, addresses: list[str], folder: Path) -> Iterator[None]:
    """A redis-server of this test on ``port``, listening on ``addresses``; stopped by pid."""
    data = folder / "redis"
    data.mkdir()
    args = [
        find_redis_server(),
        "--port",
        str(port),
        "--bind",
        *addresses,
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--dir",
        str(data),
        "--daemonize",
        "no",
        "--logfile",
        str(data / "redis.log"),
    ]
    with (data / "redis.out").open("ab") as output:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        probe = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0)
        try:

            def answers() -> bool:
                assert process.poll() is None, (data / "redis.log").read_text(errors="replace")
                try:
                    return bool(probe.ping())
                except redis.ConnectionError:
                    return False

            wait_for(answers, what=f"redis-server on port {port}")
        finally:
            probe.close()
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=_STOP_GRACE_S)


@dataclass
class HostPool:
    """One host's ``toolpool worker`` (the supervisor's process) and what it started."""

    host: Host
    process: subprocess.Popen[bytes]
    log: Path

    def find(self, text: str) -> list[int]:
        """The pool's processes whose command line is ``text`` (arguments joined by spaces)."""
        found: list[int] = []
        for pid in _descendants(self.process.pid):
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace") == text:
                found.append(pid)
        return found


@contextmanager
def _host_pool(host: Host, port: int, settings: Settings, folder: Path) -> Iterator[HostPool]:
    """``toolpool worker`` for ``host``, inside its namespace; stopped by pid, children too."""
    root = folder / f"sessions-{host.name}"
    root.mkdir()
    env = python_path_env({k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")})
    marker = f"{os.getpid()}-{host.name}"
    env.update(
        {
            "TOOLPOOL_LOCK_LEASE_MS": str(settings.worker.lock_lease_ms),
            "TOOLPOOL_CALL_LIVENESS_S": str(settings.client.call_liveness_s),
            "TOOLPOOL_CALL_HEARTBEAT_S": str(settings.client.call_heartbeat_s),
            _MARKER: marker,
        }
    )
    argv = [
        sys.executable,
        "-m",
        "workers.cli",
        "worker",
        "--redis",
        f"redis://{host.outer_address}:{port}/0",
        "--sessions-root",
        str(root),
        "--host",
        host.name,
        "-n",
        str(WORKERS_PER_HOST),
        "--grace",
        "5",
    ]
    log = folder / f"pool-{host.name}.log"
    with log.open("ab") as output:
        # `ip netns exec` execs the command: the pid is the pool's supervisor.
        process = subprocess.Popen(
            host.command(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        yield HostPool(host, process, log)
    finally:
        left = _stop_pool(process, marker)
        assert not left, (
            f"processes of {host.name}'s pool outlived it (killed): {left}\n"
            + (log.read_text(errors="replace")[-3000:])
        )


def _stop_pool(process: subprocess.Popen[bytes], marker: str) -> list[int]:
    """SIGTERM the supervisor (SIGKILL past a grace), then kill what it left behind.

    Returns the processes that outlived the supervisor by more than a grace: a pool must not
    leave any (they are killed here all the same).
    """
    family = _descendants(process.pid)
    stop_process(process, _STOP_GRACE_S)
    rest = sorted((set(family) | set(_marked(marker))) - {process.pid})
    # A child notices its supervisor is gone within a second and stops by itself.
    deadline = time.monotonic() + _STOP_GRACE_S
    while time.monotonic() < deadline and not all(gone(pid) for pid in rest):
        time.sleep(0.05)
    left = [pid for pid in rest if not gone(pid)]
    for pid in left:
        # A worker's bash leads a process group of its own.
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: all(gone(pid) for pid in left),
        what="the pool's leftovers to die",
        timeout=_STOP_GRACE_S,
    )
    return left


def _descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, and so on, read from /proc."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _marked(marker: str) -> list[int]:
    """The processes whose environment carries this pool's marker."""
    needle = f"{_MARKER}={marker}".encode()
    return processes_where("environ", lambda environ: needle in environ.split(b"\0"))
