"""What a pool is doing now, read from Redis in one pass: for ``toolpool status`` and the
dashboard.

The queue (depth, calls waiting on an earlier batch, running, failed jobs), the workers of the
queue and of its hosts' session queues (host, pid, state, what each serves, the call each runs
and its session, last heartbeat), the sessions, one lock scope (holders, queue,
counters), and the recent calls and failures from the events.
"""

from __future__ import annotations

from typing import Any

import redis

from executor._errors import SessionError
from executor._rq.jobs import call_queue, named_queue
from executor._rq.state import WorkerRecord, queue_counts, workers_of_queues
from executor._settings import Settings
from executor.lock import RWLock
from executor.wire import (
    CallJob,
    Event,
    Keys,
    SessionStore,
    WorkerCatalog,
    check_session_name,
    read_entries,
    read_events,
    session_scope,
)

FAILURES = {"call_lost", "call_refused", "lock_lost"}
# Events read for the recent calls and failures (the newest of the stream).
RECENT_EVENTS = 500


def snapshot(
    client: redis.Redis,
    settings: Settings,
    *,
    session: str | None = None,
    recent: int = 10,
    events: list[Event] | None = None,
) -> dict[str, Any]:
    """The pool as JSON-ready data; with ``session``, its host's queue and its lock scope
    (``SessionError`` for a session that does not exist). ``events``: the newest events, for
    a caller that follows the stream (else the newest ``RECENT_EVENTS`` are read)."""
    keys = Keys(settings.redis.key_prefix)
    queue = call_queue(client, keys, settings.client.queue)
    scope = settings.worker.scope
    about: dict[str, Any] | None = None
    store = SessionStore(client, keys)
    if session is not None:
        info = store.read(check_session_name(session))
        if info is None:
            raise SessionError(f"No session {session!r} (never created, deleted, or expired).")
        queue = named_queue(client, keys.host_queue_name(settings.client.queue, info.host))
        scope = session_scope(session)
        about = {
            "name": info.name,
            "host": info.host,
            "state": info.state,
            "calls": info.calls,
            "pending": info.pending,
            "cwd": info.cwd,
        }
    if events is None:
        events = [item for _, item in newest_events(client, keys)]
    entries = read_entries(client, keys)
    host_queues = _host_queues(client, keys, queue.name, entries) if about is None else []
    # A worker given only a sessions root takes no call of the pool's queue, yet it runs.
    records = workers_of_queues(client, [queue.name, *host_queues])
    counts = queue_counts(queue)
    return {
        **({"session": about} if about is not None else {}),
        "queue": {
            "name": queue.name,
            "queued": counts.queued,
            "waiting_on_earlier_calls": counts.deferred,
            "running": counts.started,
            "failed_jobs": counts.failed,
        },
        "workers": _workers(client, keys, records, entries),
        "lock": RWLock(client, scope, keys=keys).status().model_dump(mode="json"),
        "recent_failures": [item.model_dump(mode="json") for item in events if _failed(item)][
            -recent:
        ],
        "recent_calls": recent_calls(events)[-recent:],
    }


def sessions(client: redis.Redis, settings: Settings) -> list[dict[str, Any]]:
    """Every session: name, host, state, calls, calls pending, idle seconds, and its lock
    scope's holders and waiters (mode and call of each)."""
    keys = Keys(settings.redis.key_prefix)
    store = SessionStore(client, keys)
    found = []
    for info in store.read_many(store.names()):
        lock = RWLock(client, session_scope(info.name), keys=keys).status()
        found.append(
            {
                "name": info.name,
                "host": info.host,
                "state": info.state,
                "calls": info.calls,
                "pending": info.pending,
                "idle_s": round(info.idle_s, 1),
                "holders": [f"{h.mode} {h.owner.tool} ({h.owner.call_id})" for h in lock.holders],
                "waiters": [f"{w.mode} {w.owner.tool} ({w.owner.call_id})" for w in lock.queue],
            }
        )
    return found


def recent_calls(events: list[Event]) -> list[dict[str, Any]]:
    """The calls that ended among ``events``, oldest first: tool, status, duration, lock wait,
    run time, truncated, worker. ``duration_ms`` counts the wait for the lock; ``run_ms`` is
    the duration without it (all of it for a call that took no lock)."""
    waits: dict[str, float] = {}
    calls = []
    for item in events:
        if item.event == "lock_acquired":
            waits[item.call_id] = float(item.data.get("waited_ms", 0.0))
        elif item.event == "tool_result":
            calls.append(
                {
                    "call_id": item.call_id,
                    "turn_id": item.turn_id,
                    "tool": item.tool,
                    "status": item.data.get("status"),
                    "error_type": item.data.get("error_type"),
                    "duration_ms": item.data.get("duration_ms"),
                    "lock_wait_ms": waits.get(item.call_id),
                    "run_ms": _run_ms(item.data.get("duration_ms"), waits.get(item.call_id)),
                    "truncated": item.data.get("truncated"),
                    "worker": item.worker,
                    "ts": item.ts,
                }
            )
    return calls


def _run_ms(duration_ms: Any, waited_ms: float | None) -> float | None:
    """A call's time under its lock: its duration without the wait for the lock."""
    if not isinstance(duration_ms, (int, float)):
        return None
    if waited_ms is None:
        return float(duration_ms)
    return round(max(0.0, float(duration_ms) - waited_ms), 3)


def _host_queues(
    client: redis.Redis, keys: Keys, queue: str, entries: list[WorkerCatalog]
) -> list[str]:
    """The host queues of ``queue``: those live workers publish and those of the sessions'
    hosts (a host whose workers' entries expired may still have workers RQ knows)."""
    found = {entry.host_queue for entry in entries if entry.queue == queue and entry.host_queue}
    prefix = f"{queue}@"
    store = SessionStore(client, keys)
    found.update(prefix + info.host for info in store.read_many(store.names()))
    return sorted(found)


def _workers(
    client: redis.Redis, keys: Keys, workers: list[WorkerRecord], entries: list[WorkerCatalog]
) -> list[dict[str, Any]]:
    published = {entry.worker: entry for entry in entries}
    found = []
    for worker in workers:
        raw = client.get(keys.worker_current(worker.name))
        current = CallJob.model_validate_json(raw) if raw else None
        beat = worker.last_heartbeat
        entry = published.get(worker.name)
        # Where RQ's record is all there is (the entry expired), its queues still tell.
        hosts = [name.split("@", 1)[1] for name in worker.queues if "@" in name]
        session_host = entry.host if entry is not None and entry.host_queue else None
        session_host = session_host or (hosts[0] if hosts else None)
        pool_calls = any("@" not in name for name in worker.queues)
        found.append(
            {
                "name": worker.name,
                "host": worker.hostname,
                "pid": worker.pid,
                "queues": worker.queues,
                "state": worker.state,
                "call_id": current.call.id if current else None,
                "tool": current.call.name if current else None,
                "session": current.session if current else None,
                "session_host": session_host,
                "pool_calls": pool_calls,
                "serves": _serves(pool_calls, session_host),
                "last_heartbeat": beat.timestamp() if beat is not None else None,
                "tools": [tool.name for tool in entry.tools] if entry is not None else [],
            }
        )
    return found


def _serves(pool_calls: bool, session_host: str | None) -> str:
    """What a worker takes, for a person: the pool's calls, a host's sessions', or both."""
    if session_host is None:
        return "pool calls"
    sessions = f"sessions of host {session_host}"
    return f"pool calls and {sessions}" if pool_calls else f"session worker: {sessions}"


def _failed(item: Event) -> bool:
    return item.event in FAILURES or (
        item.event == "tool_result" and item.data.get("status") == "error"
    )


def newest_events(client: redis.Redis, keys: Keys) -> list[tuple[str, Event]]:
    """The newest ``RECENT_EVENTS`` events with their stream ids, oldest first."""
    return read_events(client, keys, since=_recent_id(client, keys))


def _recent_id(client: redis.Redis, keys: Keys) -> str:
    recent: list[tuple[Any, Any]] = client.xrevrange(keys.events, count=RECENT_EVENTS)  # type: ignore[assignment]
    if not recent:
        return "-"
    entry_id = recent[-1][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
