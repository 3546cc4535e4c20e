"""The supervised worker pool, with real worker processes on a real redis-server.

Shows: a pool of two serves a turn in parallel; a worker SIGKILLed mid-call gets its call
answered by the pool at once (far sooner than the orchestrator's own liveness check), the
lock freed, its bash command killed, the turn's next batch started, and its slot refilled; a
child that keeps failing at start is restarted with a growing delay; SIGTERM stops the pool
after the call in flight, a second SIGTERM at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Worker

from executor import ErrorType, Settings, ToolCall, ToolStatus
from executor.client import Executor
from executor.contract import ToolRegistry, Workspace, load_registry
from executor.lock import RWLock
from executor.wire import Event, Keys, read_events
from tests.support.pids import ancestors, processes_with, sleep_marker, sleeping
from tests.support.waiting import gone, wait_for
from workers import builtin_registry
from workers.pool._pool import PoolChild, WorkerPool, settings_environment
from workers.tools._shell_settings import BashSettings

# A process-heavy proof (worker pools): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

# The orchestrator's own detection of a dead worker waits this long; the pool must be far
# quicker, so that a fast answer can only have come from the pool.
LIVENESS_S = 60.0
PATIENCE_S = 30.0
NAP_TOOLS = "pool_nap_tools"

_NAP_MODULE = '''
"""A concurrency-safe tool that takes a while, so that two workers visibly overlap."""

import time
from typing import Annotated

from pydantic import Field

from executor import ToolRegistry, tool


@tool(concurrency_safe=True, read_only=True)
def nap(seconds: Annotated[float, Field(ge=0, le=30, description="How long to sleep.")]) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "rested"


registry = ToolRegistry([nap])
'''


@pytest.fixture
def tools_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the nap tool's module, importable here and by the workers."""
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{NAP_TOOLS}.py").write_text(textwrap.dedent(_NAP_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def settings(redis_url: str, workspace: Workspace) -> Settings:
    return Settings(redis_url=redis_url, workspace=workspace.root, call_liveness_s=LIVENESS_S)


@pytest.fixture
def registry(tools_path: Path) -> ToolRegistry:
    """What the orchestrator knows: the built-in tools and nap."""
    return builtin_registry().merged(load_registry(f"{NAP_TOOLS}:registry"))


@pytest.fixture
def executor(settings: Settings, registry: ToolRegistry) -> Iterator[Executor]:
    with Executor(settings=settings, registry=registry) as client:
        yield client


def start_pool(settings: Settings, tools_path: Path, **options: object) -> WorkerPool:
    pool = WorkerPool(
        str(settings.redis.url),
        settings,
        tool_specs=(f"{NAP_TOOLS}:registry",),
        env={"PYTHONPATH": str(tools_path)},
        grace=10.0,
        **options,  # type: ignore[arg-type]
    )
    pool.start()
    return pool


@pytest.fixture
def pool(settings: Settings, tools_path: Path) -> Iterator[WorkerPool]:
    started = start_pool(settings, tools_path, workers=2)
    pids: set[int] = set()
    try:
        started.wait_ready()
        yield started
    finally:
        pids = {c.pid for c in started.children if c.pid is not None}
        started.stop(grace=10.0)
    assert all(gone(pid) for pid in pids)
    assert not any(c.alive for c in started.children)


def events_of(executor: Executor, name: str) -> list[Event]:
    return [e for _, e in read_events(executor.client, executor.keys) if e.event == name]


def running_child(pool: WorkerPool, client: redis.Redis, keys: Keys) -> PoolChild:
    """The child whose call is in flight (its ``worker:<name>:current`` key is set)."""

    def busy() -> list[PoolChild]:
        return [c for c in pool.children if client.exists(keys.worker_current(c.name))]

    wait_for(busy, "a worker to take the call")
    return busy()[0]


def test_two_workers_serve_a_turn_in_parallel(pool: WorkerPool, executor: Executor) -> None:
    started = time.monotonic()
    results = executor.run(
        [
            {"id": "n1", "name": "nap", "arguments": {"seconds": 1.0}},
            {"id": "n2", "name": "nap", "arguments": {"seconds": 1.0}},
        ],
        timeout=PATIENCE_S,
    )
    elapsed = time.monotonic() - started

    assert [(r.call_id, r.status, r.content) for r in results] == [
        ("n1", ToolStatus.OK, "rested"),
        ("n2", ToolStatus.OK, "rested"),
    ]
    starts = events_of(executor, "tool_execution_started")
    assert {e.worker for e in starts} == {c.name for c in pool.children}
    first_result = min(e.ts for e in events_of(executor, "tool_result"))
    assert all(e.ts < first_result for e in starts)
    assert elapsed < 1.9, f"two 1 s naps on two workers took {elapsed:.2f} s"


def test_killed_worker_is_answered_cleaned_up_and_replaced(
    pool: WorkerPool, executor: Executor, settings: Settings, workspace: Workspace
) -> None:
    marker = sleep_marker()
    command = f"touch started; exec sleep {marker}"
    turn = executor.submit(
        [
            {"id": "long", "name": "bash", "arguments": {"command": command}},
            {"id": "after", "name": "list_directory", "arguments": {}},
        ]
    )
    # Found by its command line: a sandboxed command's own $$ is its PID namespace's.
    wait_for(lambda: len(sleeping(marker)) == 1, "the command's sleep to start")
    victim = running_child(pool, executor.client, executor.keys)
    assert victim.pid is not None

    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    results = executor.collect(turn, timeout=PATIENCE_S)
    answered_in = time.monotonic() - killed_at

    lost, after = results
    assert lost.error_type is ErrorType.WORKER_LOST
    assert f"({victim.name}, pid {victim.pid}) was killed by signal SIGKILL" in lost.content
    assert answered_in < 3.0, f"the pool took {answered_in:.2f} s to answer the lost call"
    assert after.status is ToolStatus.OK, "the turn's next batch must start at once"
    # The lease is released before the call is answered: it is free now, not at expiry.
    lock = RWLock.from_url(str(settings.redis.url), settings.worker.scope)
    try:
        assert lock.status().holders == ()
    finally:
        lock.close()
    wait_for(lambda: not processes_with(marker), "the dead worker's command to end", timeout=5)
    (event,) = events_of(executor, "call_lost")
    assert (event.call_id, event.worker, event.data["by"]) == ("long", victim.name, "pool")

    def replaced() -> bool:
        (child,) = [c for c in pool.children if c.slot == victim.slot]
        return child.alive and child.pid != victim.pid and child.restarts == 1

    wait_for(replaced, "the slot to be refilled")
    pool.wait_ready()
    (again,) = executor.run([{"name": "bash", "arguments": {"command": "echo again"}}])
    assert again.status is ToolStatus.OK
    assert "again" in again.content


def test_forked_work_horse_of_a_killed_worker_is_killed_too(
    settings: Settings, tools_path: Path, executor: Executor, workspace: Workspace
) -> None:
    pool = start_pool(settings, tools_path, workers=1, forking=True)
    try:
        pool.wait_ready()
        marker = sleep_marker()
        command = f"exec sleep {marker}"
        turn = executor.submit([{"id": "slow", "name": "bash", "arguments": {"command": command}}])
        wait_for(lambda: len(sleeping(marker)) == 1, "the command's sleep to start")
        (bash_pid,) = sleeping(marker)
        (victim,) = pool.children
        assert victim.pid is not None
        # The work horse: the worker's child that started the command (a sandbox in between).
        chain = ancestors(bash_pid)
        assert victim.pid in chain, "the command runs under the worker"
        horse_pid = chain[chain.index(victim.pid) - 1]
        horse = Path(f"/proc/{horse_pid}/comm").read_text().strip()
        assert horse not in ("bash", "bwrap", "sh"), "the forking worker runs each call in a child"

        os.kill(victim.pid, signal.SIGKILL)
        (lost,) = executor.collect(turn, timeout=PATIENCE_S)
        assert lost.error_type is ErrorType.WORKER_LOST
        wait_for(lambda: gone(horse_pid) and gone(bash_pid), "the orphans to be killed", timeout=5)
        # The horse held the lease under its own pid; the pool released it all the same.
        lock = RWLock.from_url(str(settings.redis.url), settings.worker.scope)
        try:
            assert lock.status().holders == ()
        finally:
            lock.close()
    finally:
        pool.stop(grace=10.0)


def test_child_failing_at_start_is_restarted_with_growing_delays(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="workers.pool._pool")
    # An "interpreter" that exits at once with code 1, like a worker that cannot start.
    false = shutil.which("false")
    assert false is not None
    pool = WorkerPool(str(settings.redis.url), settings, python=false, check_interval=0.02)
    started = time.monotonic()
    pool.start()
    try:
        wait_for(lambda: pool.children[0].restarts >= 4, "four deaths")
        elapsed = time.monotonic() - started
    finally:
        pool.stop(grace=1.0)
    # Without a backoff a 0.02 s check would restart it about 50 times a second; with it the
    # first restart is immediate, the next ones wait 0.5 s and 1 s: the fourth death comes
    # after 1.5 s at the earliest.
    assert elapsed >= 1.5, f"four deaths within {elapsed:.2f} s: no backoff"
    messages = [r.getMessage() for r in caplog.records]
    assert any("exited with code 1" in m and m.endswith("replacing it") for m in messages)
    assert any("exited with code 1" in m and "replacing it in 0.5 s" in m for m in messages)
    assert any("replacing it in 1 s" in m for m in messages)


def test_settings_reach_the_workers_unchanged(settings: Settings, tmp_path: Path) -> None:
    special = settings.with_changes(
        key_prefix="tp2",
        queue="q7",
        scope="s9",
        workspace=tmp_path,
        lock_lease_ms=1234,
        call_heartbeat_s=0.25,
        full_output_max_bytes=77,
        tools=[BashSettings(max_timeout=42.5)],
    )
    assert Settings.from_env(settings_environment(special), tools=[BashSettings]) == special


def test_a_tools_own_settings_reach_the_workers(
    settings: Settings, tools_path: Path, executor: Executor
) -> None:
    pool = start_pool(settings.with_tools(BashSettings(max_timeout=7.0)), tools_path, workers=1)
    try:
        pool.wait_ready()
        (result,) = executor.run(
            [ToolCall(id="own", name="bash", arguments={"command": "true", "timeout": 8})]
        )
    finally:
        pool.stop(grace=10.0)

    assert result.error_type is ErrorType.TOOL_ERROR
    assert "above the maximum of 7 s" in result.content


# -- the pool as a process: signals ------------------------------------------------------------

_POOL_SCRIPT = """
import json, sys
from executor import Settings
from workers.pool._pool import WorkerPool

pool = WorkerPool(sys.argv[1], Settings.from_env(), workers=2, grace=float(sys.argv[2]))
code = pool.run(
    on_start=lambda children: print(json.dumps({c.name: c.pid for c in children}), flush=True)
)
sys.exit(code)
"""


def start_pool_process(
    settings: Settings, grace: float
) -> tuple[subprocess.Popen[str], dict[str, int]]:
    """The pool in a process of its own (``WorkerPool.run``); its children's names and pids."""
    env = {**os.environ, **settings_environment(settings)}
    process = subprocess.Popen(
        [sys.executable, "-c", _POOL_SCRIPT, str(settings.redis.url), str(grace)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    # A watchdog, so that a pool that never prints cannot hang the test.
    watchdog = threading.Timer(PATIENCE_S, process.kill)
    watchdog.start()
    try:
        line = process.stdout.readline()
    finally:
        watchdog.cancel()
    assert line, "the pool process ended before starting its workers"
    children: dict[str, int] = json.loads(line)
    return process, children


def end(process: subprocess.Popen[str]) -> None:
    """Make sure the process is gone and its pipe closed, whatever the test did."""
    if process.poll() is None:
        process.kill()
    process.communicate()


def test_sigterm_lets_the_call_in_flight_finish(settings: Settings, executor: Executor) -> None:
    process, children = start_pool_process(settings, grace=20.0)
    try:
        turn = executor.submit(
            [{"id": "slow", "name": "bash", "arguments": {"command": "sleep 1.5; echo finished"}}]
        )
        wait_for(lambda: events_of(executor, "tool_execution_started"), "the call to start")
        process.send_signal(signal.SIGTERM)
        (result,) = executor.collect(turn, timeout=PATIENCE_S)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        end(process)
    assert result.status is ToolStatus.OK
    assert "finished" in result.content
    assert all(gone(pid) for pid in children.values())


def test_second_sigterm_stops_at_once_and_answers_the_call(
    settings: Settings, executor: Executor
) -> None:
    process, children = start_pool_process(settings, grace=60.0)
    try:
        turn = executor.submit(
            [{"id": "stuck", "name": "bash", "arguments": {"command": "sleep 30"}}]
        )
        wait_for(lambda: events_of(executor, "tool_execution_started"), "the call to start")
        process.send_signal(signal.SIGTERM)
        # Two signals sent at once could merge into one; the second must come once the pool
        # has acted on the first: when it has told its busy worker to stop after the call.
        wait_for(
            lambda: any(
                executor.client.hexists(
                    Worker.redis_worker_namespace_prefix + name, "shutdown_requested_date"
                )
                for name in children
            ),
            "the warm shutdown to begin",
        )
        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PATIENCE_S) == 0
        stopped_in = time.monotonic() - stopping
        (result,) = executor.collect(turn, timeout=5.0)
    finally:
        end(process)
    assert stopped_in < 5.0, f"a second SIGTERM took {stopped_in:.2f} s to stop the pool"
    assert result.error_type is ErrorType.WORKER_LOST
    assert all(gone(pid) for pid in children.values())
