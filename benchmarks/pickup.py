"""How soon a worker of two queues picks up a call, against a worker of one; what idle pools send.

Usage: ``python -m benchmarks.pickup [--runs 3] [--calls 300] [--warmup 20] [--workers 2]
[--settle 35] [--idle 60]``. On a private redis-server, two pools the way users run them,
each a ``toolpool worker`` (``python -m workers.cli worker``, the command's own code) of
``--workers`` processes on a queue of its own:

- one queue: ``--workspace`` alone;
- two queues: ``--workspace`` and ``--sessions-root`` (its host's session queue first, then
  the pool's), the compose file's default.

Pickup: from just before the client's ``submit`` to the worker's ``tool_execution_started``
event (one machine, one clock), of a trivial call (``calculator``), one call at a time, each
sent once every worker of its pool is idle (blocked in its wait for a job, as ``CLIENT LIST``
shows). So it is the time a call takes to reach an idle worker and get through the claim and
the lock, alike on both pools; only the wait for a job differs. Per run: p50 and p99 of
``--calls`` calls without a session on each pool, and of as many in a session on the two-queue
pool (its host's queue), the three kinds taking turns call by call (so that a busy moment of
the machine falls on all of them). Printed: min / median / max over the runs of each figure,
and of each run's difference, two queues less one.

Idle: after the calls, ``--settle`` s with nothing asked (the supervisor's look for stranded
jobs backs off to its idle interval), then ``MONITOR`` for ``--idle`` s. Each command is given
to its pool by its connection's name (``client_name`` in the pools' Redis URL) and counted by
what it is for: the heartbeat (a worker's catalog entry refreshed, RQ's worker heartbeat), the
wait for calls, the supervisor's look for stranded jobs, the session sweep, RQ's ``rq suspend``
check and maintenance, or anything else (printed by name).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from benchmarks.entry import at_least, run_bench
from benchmarks.sides import BenchError
from executor import Executor, SessionError, Sessions, Settings, ToolStatus
from executor.wire import Keys, read_events
from workers._embedded_redis import RedisServer

_ONE, _TWO = "one queue", "two queues"
_HOST = "bench-host"
_SESSION = "bench-pickup"
_CALL = {"name": "calculator", "arguments": {"expression": "6*7"}}
_START_PATIENCE_S = 60.0
_CALL_PATIENCE_S = 30.0
# The commands a worker sends while it waits for a job.
_WAITS = {"BLPOP", "BLMOVE", "BRPOPLPUSH", "LMOVE", "LPOP", "EVALSHA", "EVAL"}
_KINDS = (
    "heartbeat",
    "waiting for calls",
    "supervisor's look for stranded jobs",
    "session sweep",
    "rq suspend check, RQ maintenance",
    "a new connection's set-up",
    "other",
)
# What a new connection sends before its first command.
_SET_UP = {"HELLO", "CLIENT", "INFO", "AUTH", "SELECT"}


@dataclass
class _Pool:
    """One ``toolpool worker`` process and how to tell its connections and queues apart."""

    label: str
    client_name: str
    queue: str
    workers: int
    process: subprocess.Popen[bytes]
    log: Path

    def diagnosis(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"toolpool worker ({self.label}, pid {self.process.pid}): {text[-2000:]}"


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pickup", description=__doc__)
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (default 3)")
    parser.add_argument(
        "--calls", type=at_least(10), default=300, help="calls of each kind a run (default 300)"
    )
    parser.add_argument("--warmup", type=at_least(0), default=20, help="untimed calls first")
    parser.add_argument(
        "--workers", type=at_least(1), default=2, help="processes a pool (default 2)"
    )
    parser.add_argument(
        "--settle", type=float, default=35.0, help="seconds idle before the idle count"
    )
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of the idle count")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(RedisServer(tcp=True))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pickup-")))
        workspace, sessions_root = folder / "workspace", folder / "sessions"
        workspace.mkdir()
        sessions_root.mkdir()
        print(
            f"pickup: redis-server pid {server.pid} (workers on TCP 127.0.0.1:{server.port}, "
            f"the client on its unix socket); {args.workers} worker process(es) a pool"
        )
        pools = [
            stack.enter_context(_pool(server, folder, _ONE, args.workers, [])),
            stack.enter_context(
                _pool(
                    server,
                    folder,
                    _TWO,
                    args.workers,
                    ["--sessions-root", str(sessions_root), "--host", _HOST],
                )
            ),
        ]
        watcher = redis.Redis.from_url(server.url, socket_timeout=10)
        stack.callback(watcher.close)
        for pool in pools:
            _wait_idle(watcher, pool, _START_PATIENCE_S)
            print(f"  {pool.label}: `{_command_line(pool)}`")
        base = Settings(redis_url=server.url, workspace=workspace)
        hosted = base.with_changes(queue=pools[1].queue)  # the session lives on that pool
        with Sessions(settings=hosted) as sessions:
            sessions.create(_SESSION, host=_HOST, timeout=_CALL_PATIENCE_S)
        with ExitStack() as clients:
            executors = [
                clients.enter_context(
                    Executor(
                        settings=base.with_changes(queue=pool.queue),
                        wait_for_workers=_START_PATIENCE_S,
                    )
                )
                for pool in pools
            ]
            series = [
                _Series(pools[0], executors[0], None),
                _Series(pools[1], executors[1], None),
                _Series(pools[1], executors[1], _SESSION),
            ]
            if args.warmup:
                _pickups(watcher, series, args.warmup)
            runs = [_pickups(watcher, series, args.calls) for _ in range(args.runs)]
        _report_pickups(series, runs, args)
        for pool in pools:
            _wait_idle(watcher, pool, _CALL_PATIENCE_S)
        print(f"\nIdle: {args.settle:g} s with nothing asked, then MONITOR for {args.idle:g} s")
        time.sleep(args.settle)
        counted = _monitor(server, pools, args.idle)
        _report_idle(pools, counted, args.idle)
        with Sessions(settings=hosted) as sessions, contextlib.suppress(SessionError):
            sessions.delete(_SESSION, timeout=_CALL_PATIENCE_S)


# -- the pools -------------------------------------------------------------------------------


@contextmanager
def _pool(
    server: RedisServer, folder: Path, label: str, workers: int, extra: list[str]
) -> Iterator[_Pool]:
    """``toolpool worker`` of ``workers`` processes, on a queue of its own; stopped by its pid
    (SIGTERM, then SIGKILL) on the way out."""
    name = "pickup-one" if label == _ONE else "pickup-two"
    url = f"{server.tcp_url}/0?client_name={name}"
    queue = f"{name}-queue"
    command = [
        sys.executable,
        "-m",
        "workers.cli",
        "worker",
        "--redis",
        url,
        "--workspace",
        str(folder / "workspace"),
        "--queue",
        queue,
        "--workers",
        str(workers),
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
    log = folder / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    pool = _Pool(label, name, queue, workers, process, log)
    try:
        yield pool
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _command_line(pool: _Pool) -> str:
    shown = ["toolpool", *(str(a) for a in pool.process.args[3:])]  # type: ignore[index]
    return " ".join(shown)


def _waiting(watcher: redis.Redis, pool: _Pool) -> int:
    """How many of ``pool``'s connections block in a wait for a job now."""
    return sum(
        1
        for c in watcher.client_list()
        if c.get("name") == pool.client_name
        and "b" in c.get("flags", "")
        and c.get("cmd", "").upper() in _WAITS
    )


def _wait_idle(watcher: redis.Redis, pool: _Pool, patience: float) -> None:
    """Until every worker process of ``pool`` blocks in its wait for a job."""
    deadline = time.monotonic() + patience
    while _waiting(watcher, pool) < pool.workers:
        if pool.process.poll() is not None:
            raise BenchError(f"the pool stopped: {pool.diagnosis()}")
        if time.monotonic() > deadline:
            raise BenchError(f"the pool was not idle within {patience:g} s: {pool.diagnosis()}")
        time.sleep(0.001)


# -- pickup ----------------------------------------------------------------------------------


def _series_name(session: str | None) -> str:
    return "calls without a session" if session is None else "calls in a session"


@dataclass
class _Series:
    """Calls of one kind on one pool: without a session, or in one."""

    pool: _Pool
    executor: Executor
    session: str | None

    @property
    def name(self) -> str:
        kind = "calls without a session" if self.session is None else "calls in a session"
        return f"{self.pool.label}, {kind}"


def _pickups(watcher: redis.Redis, series: list[_Series], calls: int) -> list[list[float]]:
    """``calls`` rounds of one call of each series, in turn (the first changes round by
    round), each sent once its pool is idle; each series' pickups (ms)."""
    measured: list[list[float]] = [[] for _ in series]
    client, keys = series[0].executor.client, series[0].executor.keys
    for round_ in range(calls):
        since = _last_event_id(client, keys)
        shift = round_ % len(series)
        order = list(range(len(series)))[shift:] + list(range(len(series)))[:shift]
        sent: dict[str, tuple[int, float]] = {}
        for index in order:
            call_id, submitted = _one_call(watcher, series[index])
            sent[call_id] = (index, submitted)
        # Read between rounds, untimed: the stream is capped, a run's events may not all stay.
        for _, event in read_events(client, keys, since=since):
            if event.event == "tool_execution_started" and event.call_id in sent:
                index, submitted = sent.pop(event.call_id)
                measured[index].append((event.ts - submitted) * 1000)
        if sent:
            raise BenchError(f"{len(sent)} calls have no tool_execution_started event")
    return measured


def _one_call(watcher: redis.Redis, series: _Series) -> tuple[str, float]:
    """One trivial call of ``series``, sent once its pool is idle: its id and when it was sent."""
    _wait_idle(watcher, series.pool, _CALL_PATIENCE_S)
    submitted = time.time()
    turn = series.executor.submit([_CALL], session=series.session)
    (result,) = series.executor.collect(turn, timeout=_CALL_PATIENCE_S)
    if result.status is not ToolStatus.OK:
        raise BenchError(f"a call failed on {series.pool.label}: {result.content}")
    return turn.plan.call_ids[0], submitted


def _last_event_id(client: redis.Redis, keys: Keys) -> str:
    """Just after the newest event, for XRANGE (``-``: the stream is empty)."""
    newest = client.xrevrange(keys.events, count=1)
    if not newest:
        return "-"
    raw = newest[0][0]
    return "(" + (raw.decode() if isinstance(raw, bytes) else str(raw))


def _p(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def _spread(values: list[float]) -> str:
    return " / ".join(f"{v:6.2f}" for v in (min(values), statistics.median(values), max(values)))


def _report_pickups(
    series: list[_Series], runs: list[list[list[float]]], args: argparse.Namespace
) -> None:
    print(
        f"\nPickup, submit to tool_execution_started, ms: min / median / max over {args.runs} "
        f"run(s) of {args.calls} calls of each kind, taking turns call by call"
    )
    print(f"  {'':<44}{'p50':>24}{'p99':>26}")
    for index, each in enumerate(series):
        p50 = [_p(run[index], 50) for run in runs]
        p99 = [_p(run[index], 99) for run in runs]
        print(f"  {each.name:<44}{_spread(p50):>24}{_spread(p99):>26}")
    for percent in (50, 99):
        differences = [_p(run[1], percent) - _p(run[0], percent) for run in runs]
        goal = "   (goal: <= 5 ms)" if percent == 99 else ""
        print(
            f"  p{percent}, two queues less one, calls without a session: "
            f"{_spread(differences)} ms{goal}"
        )
    worst = max(max(run[1]) for run in runs)
    print(f"  slowest pickup, two queues, calls without a session: {worst:.1f} ms")


# -- idle ------------------------------------------------------------------------------------


def _monitor(server: RedisServer, pools: list[_Pool], seconds: float) -> dict[str, Counter[str]]:
    """Every command the pools' connections send in ``seconds``, by pool: ``kind`` or
    ``other: COMMAND key``."""
    names = {pool.client_name: pool.label for pool in pools}
    listener = redis.Redis.from_url(server.url)
    seen: list[dict[str, Any]] = []
    stop = threading.Event()

    def listen() -> None:
        with (
            contextlib.suppress(redis.RedisError, OSError, ValueError),
            listener.monitor() as monitor,  # type: ignore[no-untyped-call]
        ):
            while not stop.is_set():
                seen.append(monitor.next_command())

    thread = threading.Thread(target=listen, name="pickup-monitor", daemon=True)
    addresses = _addresses(server)
    thread.start()
    time.sleep(seconds)
    stop.set()
    addresses.update(_addresses(server))
    listener.connection_pool.disconnect()  # ends the MONITOR read
    thread.join(timeout=10)
    listener.close()
    counted: dict[str, Counter[str]] = {pool.label: Counter() for pool in pools}
    for entry in seen:
        if entry.get("client_type") == "lua":
            continue  # a script's own commands: the EVALSHA that ran it is counted
        address = f"{entry.get('client_address')}:{entry.get('client_port')}"
        label = names.get(addresses.get(address, ""))
        if label is not None:
            counted[label][_kind(str(entry.get("command", "")))] += 1
    return counted


def _addresses(server: RedisServer) -> dict[str, str]:
    """Each connection's ``ip:port`` and its name."""
    client = redis.Redis.from_url(server.url)
    try:
        return {str(c.get("addr")): str(c.get("name", "")) for c in client.client_list()}
    finally:
        client.close()


def _kind(command: str) -> str:
    words = command.split(" ", 2)
    name, key = words[0].upper(), (words[1] if len(words) > 1 else "")
    keys = Keys()
    if key.startswith((keys.catalog_index, "rq:worker")):
        return "heartbeat"
    if name in _WAITS:
        return "waiting for calls"
    if key.endswith(":intermediate") or key.startswith("rq:wip:"):
        return "supervisor's look for stranded jobs"
    if key.startswith(keys.session_sweep("")) or key == keys.sessions_index:
        return "session sweep"
    if key.startswith(keys.session("")):
        return "session sweep"
    if key.startswith("rq:"):
        return "rq suspend check, RQ maintenance"
    if name in _SET_UP:
        return "a new connection's set-up"
    return f"other: {name} {key}"


def _report_idle(pools: list[_Pool], counted: dict[str, Counter[str]], seconds: float) -> None:
    print("  commands/s, by what they are for:")
    kinds = list(_KINDS[:-1]) + sorted(
        {kind for counts in counted.values() for kind in counts if kind not in _KINDS}
    )
    print(f"  {'':<40}" + "".join(f"{pool.label:>14}" for pool in pools))
    for kind in kinds:
        rates = [counted[pool.label][kind] / seconds for pool in pools]
        print(f"  {kind:<40}" + "".join(f"{rate:14.3f}" for rate in rates))
    beyond = [
        sum(n for kind, n in counted[pool.label].items() if kind != "heartbeat") / seconds
        for pool in pools
    ]
    per_worker = [
        counted[pool.label]["waiting for calls"] / seconds / pool.workers for pool in pools
    ]
    print(f"  {'beyond the heartbeat, whole pool':<40}" + "".join(f"{r:14.3f}" for r in beyond))
    print(
        f"  {'waiting for calls, per worker process':<40}"
        + "".join(f"{r:14.3f}" for r in per_worker)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when a call failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(lambda: run(args), (BenchError, SessionError))


if __name__ == "__main__":
    sys.exit(main())
