"""The pool's metrics for Prometheus, named and labelled after its conventions.

Two sources:

- read at each scrape, from Redis (``PoolCollector``): the queue's jobs by state, the live
  workers, and the lock's own counters (grants by mode, expiries, lost leases: kept by the lock
  in Redis, so they are true counters across exporter restarts) and its holders and waiters;
- counted from the events stream as it grows (``EventCounts``): calls by tool and status, call
  duration and lock wait histograms, calls lost. These count from the exporter's start, as a
  counter does; Prometheus' ``rate()`` takes a restart in its stride.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from executor._rq.jobs import call_queue
from executor._rq.state import queue_counts
from executor._settings import Settings
from executor.lock import RWLock
from executor.wire import Event, Keys, follow_events, read_catalog

log = logging.getLogger(__name__)

# Seconds: tool calls run from a millisecond (a read) to minutes (a build under bash).
_DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class PoolCollector(Collector):
    """What Redis says of one pool queue and its lock scope, read at each scrape."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self._client = client
        self._settings = settings
        self._keys = Keys(settings.redis.key_prefix)

    def collect(self) -> Iterator[Metric]:
        queue = call_queue(self._client, self._keys, self._settings.client.queue)
        labels = [queue.name]
        jobs = GaugeMetricFamily(
            "toolpool_queue_jobs", "Jobs of the queue, by state.", labels=["queue", "state"]
        )
        counts = queue_counts(queue)
        for state, count in (
            ("queued", counts.queued),
            ("deferred", counts.deferred),
            ("started", counts.started),
            ("failed", counts.failed),
        ):
            jobs.add_metric([*labels, state], count)
        yield jobs
        catalog = read_catalog(self._client, self._keys, queue.name)
        workers = GaugeMetricFamily(
            "toolpool_workers", "Live workers serving the queue.", labels=["queue"]
        )
        workers.add_metric(labels, catalog.workers)
        yield workers
        yield from self._lock()

    def _lock(self) -> Iterator[Metric]:
        status = RWLock(self._client, self._settings.worker.scope, keys=self._keys).status()
        scope = [status.scope]
        counters = status.counters
        grants = CounterMetricFamily(
            "toolpool_lock_grants", "Lock grants, by mode.", labels=["scope", "mode"]
        )
        grants.add_metric([*scope, "shared"], counters.grants_shared)
        grants.add_metric([*scope, "exclusive"], counters.grants_exclusive)
        yield grants
        for name, value, text in (
            (
                "toolpool_lock_expired_holders",
                counters.expired_holders,
                "Holders whose lease expired (their worker stopped renewing it).",
            ),
            (
                "toolpool_lock_expired_waiters",
                counters.expired_waiters,
                "Waiters dropped from the queue when their wait expired.",
            ),
            (
                "toolpool_lock_lost_leases",
                counters.lost_leases,
                "Leases found lost by their holder (it stopped its call).",
            ),
        ):
            family = CounterMetricFamily(name, text, labels=["scope"])
            family.add_metric(scope, value)
            yield family
        holders = GaugeMetricFamily(
            "toolpool_lock_holders", "Holders of the lock now.", labels=["scope"]
        )
        holders.add_metric(scope, len(status.holders))
        yield holders
        waiters = GaugeMetricFamily(
            "toolpool_lock_waiters", "Waiters queued for the lock now.", labels=["scope"]
        )
        waiters.add_metric(scope, len(status.queue))
        yield waiters


class EventCounts:
    """Counters and histograms fed from the events stream by a thread of their own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "toolpool_calls",
            "Tool calls that ended, by tool and status.",
            ["tool", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "toolpool_call_duration_seconds",
            "How long tool calls ran on a worker.",
            ["tool"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.lock_wait = Histogram(
            "toolpool_lock_wait_seconds",
            "How long calls waited for the lock, by mode.",
            ["mode"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.lost = Counter(
            "toolpool_calls_lost",
            "Calls whose worker died before it stored a result.",
            ["tool"],
            registry=registry,
        )
        self.seen = 0  # events counted, for a reader to wait on

    def count(self, event: Event) -> None:
        """Count one event (those that are no call's end, grant or loss are passed over)."""
        if event.event == "tool_result":
            self.calls.labels(event.tool, str(event.data.get("status", ""))).inc()
            self.duration.labels(event.tool).observe(float(event.data.get("duration_ms", 0)) / 1000)
        elif event.event == "lock_acquired":
            wait = float(event.data.get("waited_ms", 0)) / 1000
            self.lock_wait.labels(str(event.data.get("mode", ""))).observe(wait)
        elif event.event == "call_lost":
            self.lost.labels(event.tool).inc()
        self.seen += 1

    def follow(self, client: redis.Redis, keys: Keys, stop: threading.Event) -> None:
        """Count new events until ``stop``; ride out Redis going away (counting resumes
        where it stopped, from the stream)."""
        since = "$"
        while not stop.is_set():
            try:
                for entry_id, event in follow_events(
                    client, keys, since=since, block_ms=500, stop=stop
                ):
                    since = entry_id
                    self.count(event)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("toolpool metrics: events unreadable, retrying: %s", exc)
                stop.wait(1.0)


def pool_registry(client: redis.Redis, settings: Settings) -> tuple[CollectorRegistry, EventCounts]:
    """A registry with the pool's metrics; start ``EventCounts.follow`` to feed its counts."""
    registry = CollectorRegistry()
    registry.register(PoolCollector(client, settings))
    return registry, EventCounts(registry)
