"""What the processes of ``benchmarks.calls`` run: its tools, its workers, raw RQ's job.

Kept apart from the benchmark's other modules so that spawned children import only this (and
what it imports), and so that raw RQ's workers can import ``trivial`` by name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import redis
from pydantic import Field
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from benchmarks.counting import start_reporting
from executor import Settings
from executor.contract import ToolContext, ToolRegistry, tool

# The import path raw RQ's workers resolve (spawned children inherit the parent's sys.path).
TRIVIAL = "benchmarks.workers.trivial"


@tool(concurrency_safe=True, read_only=True)
def noop() -> str:
    """Answer "ok" at once: a call that costs nothing but toolpool's own path."""
    return "ok"


@tool(concurrency_safe=True, read_only=True)
def nap(
    ctx: ToolContext,
    ms: Annotated[int, Field(ge=0, le=60_000, description="Milliseconds to sleep.")],
) -> str:
    """Sleep ``ms`` milliseconds (less if the call is cancelled), like a slow read."""
    ctx.cancelled.wait(ms / 1000)
    return f"slept {ms} ms"


# What ``toolpool worker --tools`` adds to the built-in tools for the benchmark.
BENCH_TOOLS = "benchmarks.workers:bench_tools"


def bench_tools() -> ToolRegistry:
    """``noop`` and ``nap``: the tools ``toolpool worker --tools`` adds for the benchmark."""
    return ToolRegistry([noop, nap])


def bench_registry() -> ToolRegistry:
    """The built-in tools plus ``noop`` and ``nap``; workers and the Executor both use it."""
    from workers import builtin_registry

    return builtin_registry().merged(bench_tools())


def trivial() -> dict[str, bool]:
    """Raw RQ's job: the cheapest function that returns a JSON value."""
    return {"ok": True}


def run_toolpool_worker(url: str, settings: Settings, name: str, parser: str | None = None) -> None:
    """A toolpool worker process (SimpleWorker, as ``toolpool worker`` runs by default).

    ``parser`` ("default" or "python"): count its Redis round trips, report them to the
    benchmark (``counting.Reporter``) and make its connections with that reply parser.
    """
    from workers.pool._process import run_worker

    if parser is not None:
        start_reporting(url, name, parser)
    with _quiet_when_redis_is_gone():
        run_worker(url, settings, bench_registry(), name=name)


def run_raw_worker(url: str, queue_name: str, name: str, parser: str | None = None) -> None:
    """A plain RQ SimpleWorker with the JSON serializer, nothing of toolpool's around it.

    ``parser``: as for ``run_toolpool_worker``.
    """
    if parser is not None:
        start_reporting(url, name, parser)
    connection = redis.Redis.from_url(url)
    queue = Queue(queue_name, connection=connection, serializer=JSONSerializer)
    worker = SimpleWorker([queue], connection=connection, serializer=JSONSerializer, name=name)
    with _quiet_when_redis_is_gone():
        worker.work(logging_level="WARNING")


@contextmanager
def _quiet_when_redis_is_gone() -> Iterator[None]:
    # Ctrl-C stops the benchmark's redis-server along with the workers; a worker's goodbye
    # to a Redis that is gone is not worth a traceback.
    try:
        yield
    except redis.ConnectionError:
        sys.exit(0)


def serve_builtin_tools(url: str, settings: Settings, name: str) -> None:
    """A worker process serving the built-in tools (the target of a spawned process)."""
    from workers import builtin_registry
    from workers.pool._process import run_worker

    try:
        run_worker(url, settings, builtin_registry(), name=name)
    except redis.ConnectionError:
        # Ctrl-C stops our redis-server too: a goodbye to a gone Redis is no traceback.
        sys.exit(0)
