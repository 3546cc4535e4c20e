"""Where toolpool's time per call goes on a worker, timed in this process (no RQ around it).

Used by ``benchmarks.calls``, against the benchmark's private Redis, after its worker
processes have stopped. ``WorkerRuntime.execute`` runs noop calls with timers wrapped around
the parts it uses (the opening events' flush, sent alone only for a tool that runs over
``ANNOUNCE_AFTER_S``, so none for a noop; the lock's acquire; the store's one closing round
trip: the lease's release, the events, the result and the claim's release), so
the split is measured in the path itself; the rest of the path (the opening pipeline, argument
validation, the hand-off to the tool's thread) is what is left. Two things are also timed
alone for scale: ``run_call`` without the lock, and a hand-off to a reused tool thread.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis

from benchmarks.workers import bench_registry
from executor import Settings
from executor.client import Executor
from executor.wire import CallJob, ToolCall
from workers.pipeline._runner import CallEnvironment, run_call
from workers.pipeline._runtime import WorkerRuntime
from workers.pipeline._store import Store
from workers.pipeline._tool_threads import ToolThreads
from workers.pool._process import run_worker


class _Stopwatch:
    """Adds up the wall time spent inside wrapped methods, by label."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self.enabled = False

    def wrap(self, owner: object, method: str, label: str) -> None:
        """Replace ``owner.method`` (on this instance only) by a timed version."""
        inner: Callable[..., Any] = getattr(owner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if self.enabled:
                    self.spent[label] += time.perf_counter() - started

        setattr(owner, method, timed)


def _nothing() -> None:
    """A thread's target that does nothing, to time a thread's start and join."""


def _alone_us(action: Callable[[int], object], count: int) -> float:
    """Median over three rounds of ``action``'s microseconds per call."""
    rounds = []
    for round_index in range(3):
        started = time.perf_counter()
        for i in range(count):
            action(round_index * count + i)
        rounds.append((time.perf_counter() - started) / count * 1e6)
    return statistics.median(rounds)


def measure_parts(
    url: str, settings: Settings, count: int, tag: str, stats: redis.Redis
) -> dict[str, float]:
    """Microseconds per call of the worker path and its parts, and its Redis commands.

    ``stats`` is a client whose CONFIG RESETSTAT / INFO count the path's commands; nothing
    else may use the Redis meanwhile.
    """
    registry = bench_registry()
    runtime = WorkerRuntime(url, settings, registry, worker_name=f"bench-inproc-{tag}")
    watch = _Stopwatch()
    watch.wrap(runtime.events, "flush", "events")
    watch.wrap(runtime.lock, "acquire", "lock acquire")
    [store] = [step for step in runtime.steps if isinstance(step, Store)]
    watch.wrap(store, "_publish_once", "closing")

    def whole(i: int) -> None:
        call = ToolCall(id=f"{tag}-whole-{i}", name="noop")
        runtime.execute(CallJob(call=call, turn_id=f"{tag}-turn", index=0).model_dump(mode="json"))

    env = CallEnvironment(workspace=runtime.workspace, settings=settings)

    def runner(i: int) -> None:
        run_call(ToolCall(id=f"{tag}-run-{i}", name="noop"), registry, env)

    threads = ToolThreads()

    def thread(_: int) -> None:
        threads.start(_nothing).wait(10)

    try:
        for i in range(20):  # first-use costs (script loading, the keeper thread) stay out
            whole(-1 - i)
        stats.config_resetstat()
        watch.enabled = True
        started = time.perf_counter()
        for i in range(count):
            whole(i)
        elapsed = time.perf_counter() - started
        watch.enabled = False
        commands = redis_command_counts(stats)
        parts = {label: spent / count * 1e6 for label, spent in watch.spent.items()}
        parts["whole"] = elapsed / count * 1e6
        parts["commands"] = (
            sum(calls for name, (calls, _) in commands.items() if name not in _BOOKKEEPING) / count
        )
        parts["runner"] = _alone_us(runner, count)
        parts["thread"] = _alone_us(thread, count)
        parts["ping"] = _alone_us(lambda _: runtime.client.ping(), count)
        return parts
    finally:
        runtime.close()


_BOOKKEEPING = ("config|resetstat", "info")


def format_parts(parts: dict[str, float], rq_job_us: float | None) -> list[str]:
    """The parts as table lines; the rest of the path is what the timers did not cover."""
    named = ("events", "lock acquire", "closing")
    rest = parts["whole"] - sum(parts.get(name, 0.0) for name in named)
    rows = [
        (f"WorkerRuntime.execute, whole ({parts['commands']:.0f} Redis commands*)", parts["whole"]),
        ("  opening events alone (none: they go with the result)", parts.get("events", 0.0)),
        ("  lock acquire (Lua)", parts.get("lock acquire", 0.0)),
        (
            "  closing round trip: release (Lua), 4 x XADD, result (Lua), DEL",
            parts.get("closing", 0.0),
        ),
        ("  the rest: opening pipeline, validation, tool thread", rest),
        ("alone: run_call without lock (validate, thread)", parts["runner"]),
        ("alone: one hand-off to a reused tool thread", parts["thread"]),
        ("alone: one Redis PING round trip", parts["ping"]),
    ]
    if rq_job_us is not None:
        rows.append(("raw RQ's whole cost per job (1 worker, measured)", rq_job_us))
    lines = [f"  {label:<56}{value:8.0f} us" for label, value in rows]
    lines.append("  * as Redis counts them: the commands inside Lua scripts included")
    return lines


def profile_worker(url: str, settings: Settings, calls: int, tag: str, top: int = 18) -> str:
    """cProfile of an in-process burst worker draining ``calls`` noop calls; the top lines.

    The calls go to a queue of their own, so the benchmark's idle workers do not take them.
    """
    profiled = settings.with_changes(queue=f"profile{tag}")
    registry = bench_registry()
    executor = Executor(settings=profiled, registry=registry)
    try:
        turns = [
            executor.submit(
                [{"id": f"{tag}-prof-{i}-{j}", "name": "noop", "arguments": {}} for j in range(10)]
            )
            for i in range(max(1, calls // 10))
        ]
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        run_worker(url, profiled, registry, name=f"bench-profile-{tag}", burst=True)
        profiler.disable()
        elapsed = time.perf_counter() - started
        done = sum(len(executor.collect(turn, timeout=10)) for turn in turns)
    finally:
        executor.close()
    out = io.StringIO()
    out.write(
        f"  {done} calls in {elapsed:.2f} s under cProfile "
        f"({elapsed / max(done, 1) * 1e3:.2f} ms a call, profiler included)\n"
    )
    for key in ("tottime", "cumulative"):
        out.write(f"  -- top {top} by {key} --\n")
        stats = pstats.Stats(profiler, stream=out).strip_dirs()
        stats.sort_stats(key).print_stats(top)
    return _compact(out.getvalue())


def _compact(text: str) -> str:
    # pstats pads its report with a banner and blank lines; keep the table lines.
    keep = [line for line in text.splitlines() if line.strip() and "Ordered by" not in line]
    return "\n".join(keep)


def redis_command_counts(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Calls and server microseconds per Redis command since the last CONFIG RESETSTAT."""
    info: dict[str, Any] = client.info("commandstats")
    counts: dict[str, tuple[int, int]] = {}
    for key, value in info.items():
        name = key.removeprefix("cmdstat_")
        counts[name] = (int(value["calls"]), int(value["usec"]))
    return counts
