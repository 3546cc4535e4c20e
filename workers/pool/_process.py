"""One worker process: install the runtime, publish its tools, let an RQ worker take calls.

A worker may serve fewer tools than its registry holds (``served_registry``: read-only, or
some tools disabled); it publishes only those it serves. A call that still reaches it for a
withheld tool (a client with a ``registry`` of its own) meets the worker's registry, which has
the last word: it answers ``unknown_tool`` with a message that says why the tool is not served.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Collection, Iterable, Mapping

from executor import ConfigurationError, Settings, UnknownToolError
from executor import _texts as texts
from executor._rq.jobs import call_queue, named_queue
from executor._rq.worker import ToolpoolForkingWorker, ToolpoolWorker
from executor.contract import Tool, ToolInfo, ToolRegistry
from executor.wire import WorkerCatalog
from workers.pipeline import _job as job
from workers.pipeline._runtime import WorkerRuntime
from workers.pool._catalog import CatalogPublisher
from workers.sessions import SessionSweeper


def worker_name(index: int | None = None) -> str:
    """A name unique on the Redis: host, pid, and the pool slot when there is one."""
    slot = f".{index}" if index is not None else ""
    return f"{socket.gethostname()}.{os.getpid()}{slot}"


class NotServedError(UnknownToolError):
    """A call to a tool this worker was started not to serve."""

    def __init__(self, name: str, available: Iterable[str], reason: str) -> None:
        super().__init__(name, available)
        self.reason = reason
        self.args = (texts.withheld_by_worker(name, reason, self.available),)


class ServedRegistry(ToolRegistry):
    """The tools a worker serves, and for each tool it withholds, the reason why."""

    def __init__(self, tools: Iterable[Tool], withheld: Mapping[str, str]) -> None:
        super().__init__(tools)
        self.withheld = dict(withheld)

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``NotServedError`` if it is withheld here."""
        reason = self.withheld.get(name)
        if reason is not None:
            raise NotServedError(name, self.names(), reason)
        return super().get(name)


def served_registry(
    registry: ToolRegistry, *, read_only: bool = False, disabled: Collection[str] = ()
) -> ServedRegistry:
    """The part of ``registry`` a worker serves: without ``disabled`` tools and, when
    ``read_only``, without every tool not declared ``is_read_only``.

    A disabled name that is no tool raises ``ConfigurationError``: a typo must not leave the
    tool it meant served.
    """
    unknown = sorted(set(disabled) - set(registry.names()))
    if unknown:
        raise ConfigurationError(
            f"Cannot disable {', '.join(map(repr, unknown))}: no such tool. "
            f"Tools: {', '.join(registry.names())}."
        )
    withheld: dict[str, str] = {}
    for item in registry:
        if item.name in disabled:
            withheld[item.name] = "it is disabled on the worker"
        elif read_only and not item.is_read_only:
            withheld[item.name] = (
                "the worker runs read-only and serves only tools that change nothing"
            )
    return ServedRegistry((t for t in registry if t.name not in withheld), withheld)


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
    queue = call_queue(runtime.client, runtime.keys, settings.client.queue)
    queues = [queue] if settings.worker.serve_pool_calls else []
    host_queue = ""
    if settings.worker.sessions_root is not None:
        # The host's session calls first: they can only run here, the pool's queue anywhere.
        host_queue = runtime.keys.host_queue_name(settings.client.queue, runtime.host)
        queues.insert(0, named_queue(runtime.client, host_queue))
    if not queues:
        raise ConfigurationError(
            "This worker would take no calls: give it a workspace, a sessions root, or both."
        )
    worker = worker_class(queues, connection=runtime.client, name=name, keys=runtime.keys)
    worker.events = runtime.events
    if isinstance(worker, ToolpoolWorker):
        # RQ's end of a job goes in the round trip that answers its call.
        runtime.store.take_end = worker.take_end
    logging.getLogger("rq.worker").setLevel(logging_level)
    entry = WorkerCatalog.build(
        name,
        queue.name,
        (ToolInfo.of(item) for item in registry),
        host=runtime.host,
        pid=os.getpid(),
        host_queue=host_queue,
        pool_calls=settings.worker.serve_pool_calls,
        read_only=bool(registry.names()) and all(item.is_read_only for item in registry),
        withheld=registry.withheld if isinstance(registry, ServedRegistry) else None,
    )
    publisher = CatalogPublisher(runtime.client, runtime.keys, entry)
    publisher.start()
    sweeper = None
    if settings.worker.sessions_root is not None:
        sweeper = SessionSweeper(
            runtime.client,
            runtime.keys,
            settings.worker.sessions_root,
            runtime.host,
            settings.worker.session_sweep_s,
        )
        sweeper.start()
    try:
        return bool(worker.work(burst=burst, max_jobs=max_jobs, logging_level=logging_level))
    finally:
        if sweeper is not None:
            sweeper.stop()
        publisher.stop()
        runtime.close()
