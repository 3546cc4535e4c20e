"""The two sides ``benchmarks.calls`` measures: toolpool's Executor and raw RQ.

``Bench`` holds the private Redis, the Executor, the raw RQ queue and the worker processes,
and runs one measurement of either side at a time; every wait in it has a deadline.

toolpool's side runs the way users run it: one ``toolpool worker --workers N`` process (its
supervised pool of N worker processes, ``--tools`` adding the benchmark's ``noop`` and
``nap``). The parts that count Redis round trips inside a worker (``parser``) start bare
worker processes with multiprocessing's "spawn" method instead, as raw RQ's side always is.
Every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import redis
from rq import Queue, Worker
from rq.registry import StartedJobRegistry
from rq.results import Result
from rq.serializers import JSONSerializer

from benchmarks.counting import paused
from benchmarks.workers import (
    BENCH_TOOLS,
    TRIVIAL,
    bench_registry,
    run_raw_worker,
    run_toolpool_worker,
    serve_builtin_tools,
)
from executor import Settings
from executor.client import Executor
from executor.wire import Keys, ToolStatus, read_catalog
from workers._embedded_redis import RedisServer

_SPAWN = multiprocessing.get_context("spawn")
_RAW_QUEUE = "bench-raw"
_START_PATIENCE_S = 90.0
_STOP_GRACE_S = 10.0
_WAIT_SLICE_S = 1  # latest_result blocks in whole seconds; redis-py's socket allows 5 s


class BenchError(RuntimeError):
    """The benchmark cannot go on (a worker died, a deadline passed)."""


@dataclass
class Pool:
    """Worker processes started here; ``stop`` ends them by their PIDs."""

    processes: list[BaseProcess] = field(default_factory=list)
    commands: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def wait_until(self, ready: Callable[[], bool], what: str, patience: float) -> None:
        """Wait until ``ready()``; ``BenchError`` if a worker process exits first or
        ``patience`` seconds pass (``what``: what the workers were to become)."""
        deadline = time.monotonic() + patience
        while not ready():
            for process in self.processes:
                if not process.is_alive():
                    raise BenchError(
                        f"worker process {process.pid} exited with code "
                        f"{process.exitcode} before it was {what}"
                    )
            for command in self.commands:
                if command.poll() is not None:
                    raise BenchError(
                        f"toolpool worker (pid {command.pid}) exited with code "
                        f"{command.returncode} before it was {what}"
                    )
            if time.monotonic() > deadline:
                raise BenchError(f"workers not {what} within {patience:g} s")
            time.sleep(0.05)

    def start(self, target: Callable[..., None], *args: Any) -> None:
        process = _SPAWN.Process(target=target, args=args, daemon=True)
        process.start()
        self.processes.append(process)

    def run(self, argv: list[str], env: dict[str, str]) -> None:
        """Start the command ``argv`` (a ``toolpool worker``) in the background."""
        self.commands.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))

    def stop(self) -> None:
        # SIGTERM: an idle pool stops at once, each worker deregistering.
        for command in self.commands:
            if command.poll() is None:
                os.kill(command.pid, signal.SIGTERM)
        for command in self.commands:
            try:
                command.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.kill(command.pid, signal.SIGKILL)
                command.wait(5.0)
        self.commands.clear()
        # SIGTERM is RQ's warm shutdown: an idle worker leaves at once and deregisters.
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGKILL)
                process.join(5.0)
        self.processes.clear()


@dataclass
class Burst:
    """One throughput run: how long enqueueing and the whole run took, and failures."""

    calls: int
    enqueue_s: float
    total_s: float
    failed: int

    @property
    def rate(self) -> float:
        return self.calls / self.total_s


@dataclass
class Bench:
    """The shared Redis, the Executor and the raw RQ queue every measurement uses.

    ``label`` keeps the worker names of two benches on one Redis apart; ``raw_queue_name``
    their raw RQ queues (toolpool's queue is ``settings.client.queue``). ``raw_result_ttl``:
    how long raw RQ keeps a job's records (None: RQ's default, 500 s).
    """

    server: RedisServer
    settings: Settings
    args: argparse.Namespace
    label: str = ""
    raw_queue_name: str = _RAW_QUEUE
    raw_result_ttl: int | None = None
    pools: list[Pool] = field(default_factory=list)
    serial: int = 0
    summary: list[str] = field(default_factory=list)
    names: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.url = self.server.url
        # Long enough for a 1 s XREAD plus slack; every wait below has its own deadline.
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.executor = Executor(settings=self.settings, registry=bench_registry())
        self.raw_queue = Queue(
            self.raw_queue_name, connection=self.client, serializer=JSONSerializer
        )
        self.tool_queue = self.executor.queue

    def close(self) -> None:
        """Stop this bench's workers and close its connections."""
        for pool in list(self.pools):
            pool.stop()
        self.executor.close()
        self.client.close()

    def tag(self) -> str:
        """A fresh prefix for call ids (a call id may be used once)."""
        self.serial += 1
        return f"b{self.label}{self.serial}"

    def out(self, line: str = "") -> None:
        """Print a line of the report now."""
        print(line, flush=True)

    @contextmanager
    def workers(
        self, count: int, *, raw: bool, tool: bool = True, parser: str | None = None
    ) -> Iterator[None]:
        """``count`` toolpool worker processes (and as many raw RQ ones), registered.

        ``parser`` ("default" or "python"): the workers count their Redis round trips and
        report them (``counting.snapshot``), with that reply parser.
        """
        pool = Pool()
        self.pools.append(pool)
        names: dict[str, set[str]] = {"tool": set(), "raw": set()}
        try:
            before = self._tool_worker_names()
            if tool and parser is None:
                pool.run(self._worker_command(count), self._worker_env())
            for index in range(count):
                if tool and parser is not None:
                    name = f"bench-tp{self.label}-{self.serial}-{index}"
                    pool.start(run_toolpool_worker, self.url, self.settings, name, parser)
                    names["tool"].add(name)
                if raw:
                    name = f"bench-raw{self.label}-{self.serial}-{index}"
                    pool.start(run_raw_worker, self.url, self.raw_queue_name, name, parser)
                    names["raw"].add(name)
            self.serial += 1
            if tool and parser is None:
                names["tool"] = self._wait_pool_registered(pool, before, count)
            self._wait_registered(pool, names)
            self.names = names
            yield
            # Stop only idle workers: a measurement's last jobs finish their bookkeeping first.
            for side in ("tool", "raw"):
                if names[side]:
                    self.wait_idle(side)
        finally:
            self.names = {}
            pool.stop()
            self.pools.remove(pool)

    def _tool_worker_names(self) -> set[str]:
        with paused():
            return {w.name for w in Worker.all(connection=self.client, queue=self.tool_queue)}

    def _worker_command(self, count: int) -> list[str]:
        """``toolpool worker --workers COUNT``, with the benchmark's tools added."""
        script = Path(sys.executable).with_name("toolpool")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "executor.cli"]
        return [*command, "worker", "--workers", str(count), "--tools", BENCH_TOOLS]

    def _worker_env(self) -> dict[str, str]:
        """Ours, without TOOLPOOL_* variables, plus this bench's settings (its Redis, queue,
        workspace, ...), as a deployment sets them."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
        env.update(self.settings.environment())
        return env

    def _wait_pool_registered(self, pool: Pool, before: set[str], count: int) -> set[str]:
        """The names of the ``count`` workers the new ``toolpool worker`` registered."""
        found: set[str] = set()

        def registered() -> bool:
            found.clear()
            found.update(self._tool_worker_names() - before)
            return len(found) >= count

        with paused():
            pool.wait_until(registered, "registered", _START_PATIENCE_S)
        return set(found)

    def _wait_registered(self, pool: Pool, names: dict[str, set[str]]) -> None:
        with paused():
            self._wait_until_registered(pool, names)

    def _wait_until_registered(self, pool: Pool, names: dict[str, set[str]]) -> None:
        def registered() -> bool:
            seen = {w.name for w in Worker.all(connection=self.client, queue=self.tool_queue)}
            seen |= {w.name for w in Worker.all(connection=self.client, queue=self.raw_queue)}
            return names["tool"] | names["raw"] <= seen

        pool.wait_until(registered, "registered", _START_PATIENCE_S)

    def wait_idle(self, side: str) -> None:
        """Wait until every worker of ``side`` has finished RQ's bookkeeping of its last job."""
        keys = [Worker.redis_worker_namespace_prefix + name for name in self.names[side]]
        # A job leaves RQ's started registry in its last pipeline: the worker's state alone
        # may read idle before that pipeline ran.
        started = StartedJobRegistry(queue=self.tool_queue if side == "tool" else self.raw_queue)
        deadline = time.monotonic() + 10.0
        with paused():  # the bench's bookkeeping: no round trip of either side
            while (
                any(self.client.hget(key, "state") != b"idle" for key in keys)
                or started.get_job_count(cleanup=False) > 0
            ):
                if time.monotonic() > deadline:
                    raise BenchError(f"the {side} workers did not go idle within 10 s")
                time.sleep(0.0005)

    # -- the two sides of each measurement ---------------------------------------------------

    def toolpool_burst(self, calls: int, turn_size: int | None = None) -> Burst:
        """``calls`` noop calls in turns of ``turn_size`` (default ``--turn-size``)."""
        tag, size = self.tag(), turn_size or self.args.turn_size
        deadline = time.monotonic() + _patience(calls)
        started = time.perf_counter()
        turns = [
            self.executor.submit(
                [
                    {"id": f"{tag}-{i}", "name": "noop", "arguments": {}}
                    for i in range(first, min(calls, first + size))
                ]
            )
            for first in range(0, calls, size)
        ]
        enqueued = time.perf_counter()
        failed = 0
        for turn in turns:
            results = self.executor.collect(turn, timeout=max(0.1, deadline - time.monotonic()))
            failed += sum(r.status is not ToolStatus.OK for r in results)
        return Burst(calls, enqueued - started, time.perf_counter() - started, failed)

    def raw_burst(self, calls: int) -> Burst:
        deadline = time.monotonic() + _patience(calls)
        started = time.perf_counter()
        jobs = [self._raw_enqueue() for _ in range(calls)]
        enqueued = time.perf_counter()
        failed = sum(not _raw_result(job, deadline) for job in jobs)
        return Burst(calls, enqueued - started, time.perf_counter() - started, failed)

    def toolpool_round_trip(self, idle: bool) -> tuple[float, float, bool]:
        """Seconds to submit one call, seconds until its result, and whether it was ok.

        ``idle``: start only once the worker is idle; otherwise right after the last result.
        """
        call = {"id": f"{self.tag()}-rt", "name": "noop", "arguments": {}}
        if idle:
            self.wait_idle("tool")
        started = time.perf_counter()
        turn = self.executor.submit([call])
        submitted = time.perf_counter()
        (result,) = self.executor.collect(turn, timeout=10)
        return submitted - started, time.perf_counter() - started, result.status is ToolStatus.OK

    def raw_round_trip(self, idle: bool) -> tuple[float, float, bool]:
        if idle:
            self.wait_idle("raw")
        started = time.perf_counter()
        job = self._raw_enqueue()
        submitted = time.perf_counter()
        ok = _raw_result(job, time.monotonic() + 10)
        return submitted - started, time.perf_counter() - started, ok

    def _raw_enqueue(self) -> Any:
        if self.raw_result_ttl is None:
            return self.raw_queue.enqueue(TRIVIAL)
        return self.raw_queue.enqueue(TRIVIAL, result_ttl=self.raw_result_ttl)

    def batch(self, count: int, nap_ms: int) -> tuple[float, int]:
        """Wall seconds of one turn of ``count`` concurrency-safe naps, and failures."""
        tag = self.tag()
        calls = [
            {"id": f"{tag}-{i}", "name": "nap", "arguments": {"ms": nap_ms}} for i in range(count)
        ]
        started = time.perf_counter()
        results = self.executor.run(calls, timeout=30)
        wall = time.perf_counter() - started
        return wall, sum(r.status is not ToolStatus.OK for r in results)


def _patience(calls: int) -> float:
    return 30.0 + calls / 20


def _raw_result(job: Any, deadline: float) -> bool:
    """Wait (until ``deadline``) for a raw RQ job's result; True if it is the expected one."""
    while time.monotonic() < deadline:
        result = job.latest_result(timeout=_WAIT_SLICE_S)
        if result is not None:
            return bool(
                result.type == Result.Type.SUCCESSFUL and result.return_value == {"ok": True}
            )
    return False


def start_builtin_workers(pool: Pool, url: str, settings: Settings, count: int, tag: str) -> None:
    """Start ``count`` workers serving the built-in tools (named ``bench-TAG-...``); return
    once all of them published their catalog, which tools/list and ``Executor.submit`` read."""
    for index in range(count):
        pool.start(serve_builtin_tools, url, settings, f"bench-{tag}-{os.getpid()}-{index}")
    keys = Keys(settings.redis.key_prefix)
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        pool.wait_until(
            lambda: (
                read_catalog(client, keys, keys.queue_name(settings.client.queue)).workers >= count
            ),
            "serving",
            _START_PATIENCE_S,
        )
    finally:
        client.close()
