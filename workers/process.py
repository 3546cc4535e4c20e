"""One worker process: install the runtime, then let an RQ worker take calls."""

from __future__ import annotations

import logging
import os
import socket

from rq.serializers import JSONSerializer

from executor.jobs import call_queue
from executor.registry import ToolRegistry
from executor.settings import Settings
from workers import job
from workers.rq_worker import ToolpoolForkingWorker, ToolpoolWorker
from workers.runtime import WorkerRuntime


def worker_name(index: int | None = None) -> str:
    """A name unique on the Redis: host, pid, and the pool slot when there is one."""
    slot = f".{index}" if index is not None else ""
    return f"{socket.gethostname()}.{os.getpid()}{slot}"


def run_worker(
    redis_url: str,
    settings: Settings,
    registry: ToolRegistry,
    *,
    name: str | None = None,
    burst: bool = False,
    forking: bool = False,
    max_jobs: int | None = None,
    logging_level: str = "WARNING",
) -> bool:
    """Serve calls until stopped (SIGTERM/SIGINT: the call in flight finishes first).

    ``burst``: return once the queue is empty (tests and one-off drains). Returns whether any
    job ran. ``forking`` uses RQ's forking worker (a fresh process per call).
    """
    name = name or worker_name()
    runtime = WorkerRuntime(redis_url, settings, registry, worker_name=name)
    job.install(runtime)
    worker_class = ToolpoolForkingWorker if forking else ToolpoolWorker
    queue = call_queue(runtime.client, runtime.keys, settings.queue)
    worker = worker_class([queue], connection=runtime.client, serializer=JSONSerializer, name=name)
    worker.events = runtime.events
    logging.getLogger("rq.worker").setLevel(logging_level)
    try:
        return bool(worker.work(burst=burst, max_jobs=max_jobs, logging_level=logging_level))
    finally:
        runtime.close()
