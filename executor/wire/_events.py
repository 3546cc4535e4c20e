"""Structured events (calls, approvals and the lock's) in a capped Redis stream, and JSONL.

Event names: ``tool_execution_started``, ``tool_result`` (with ``duration_ms``), ``approval``,
``lock_wait``, ``lock_acquired`` (with ``mode`` and ``fence``), ``lock_released``,
``lock_lost``, ``call_refused``, ``call_lost``, ``call_rerun`` (a read-only call run again
after its lease was lost), ``call_duplicate`` (a job delivered again while its first delivery
runs: it waits, it does not run) and ``job_requeued`` (a job a dead worker had dequeued and
never started, put back on its queue). Each carries the call id, the tool, the worker, host
and pid that emitted it, and a timestamp.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field
from redis.client import Pipeline

from executor.wire._keys import Keys

log = logging.getLogger(__name__)

_FIELD = "event"


class Event(BaseModel):
    """One thing that happened to a call, a turn or the lock."""

    model_config = ConfigDict(extra="forbid")

    event: str
    ts: float = Field(default_factory=time.time)
    call_id: str = ""
    turn_id: str = ""
    tool: str = ""
    worker: str = ""
    host: str = ""
    pid: int = 0
    data: dict[str, Any] = Field(default_factory=dict)

    def to_json_line(self) -> str:
        """The event as one line of JSON (the JSONL log format)."""
        return self.model_dump_json()


class EventLog:
    """Writes events to the capped stream.

    Emitting never fails a call: a Redis error is logged and the event is dropped, since the
    call's result matters more than its trace.
    """

    def __init__(
        self,
        client: redis.Redis | None,
        keys: Keys,
        *,
        maxlen: int = 10_000,
        worker: str = "",
    ) -> None:
        self.client = client
        self.key = keys.events
        self.maxlen = maxlen
        self.worker = worker
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: list[str] = []

    def emit(
        self, event: str, *, call_id: str = "", turn_id: str = "", tool: str = "", **data: Any
    ) -> None:
        """Record one event now."""
        self.defer(event, call_id=call_id, turn_id=turn_id, tool=tool, **data)
        self.flush()

    def defer(
        self, event: str, *, call_id: str = "", turn_id: str = "", tool: str = "", **data: Any
    ) -> None:
        """Queue one event for the next ``flush()`` (several events, one round trip).

        Written as JSON straight away, in ``Event``'s field order, without building a model:
        a worker writes several events a call, and a model each cost more than the rest.
        """
        line = json.dumps(
            {
                "event": event,
                "ts": time.time(),
                "call_id": call_id,
                "turn_id": turn_id,
                "tool": tool,
                "worker": self.worker,
                "host": self.host,
                "pid": self.pid,
                "data": data,
            },
            ensure_ascii=False,
            separators=(",", ":"),
            default=str,
        )
        with self._lock:
            self._pending.append(line)

    def flush(self) -> None:
        """Write the queued events, in order, to the stream."""
        if self.client is None:
            self.take()
            return
        try:
            with self.client.pipeline(transaction=False) as pipe:
                if self.flush_into(pipe):
                    pipe.execute()
        except redis.RedisError as exc:
            log.warning("toolpool: could not record event(s): %s", exc)

    def flush_into(self, pipe: Pipeline) -> int:
        """Queue the pending events' writes on ``pipe`` (its owner sends it); how many."""
        lines = self.take()
        for line in lines:
            pipe.xadd(self.key, {_FIELD: line}, maxlen=self.maxlen, approximate=True)
        return len(lines)

    def take(self) -> list[str]:
        """The pending events as JSON lines, taken off the queue."""
        with self._lock:
            pending, self._pending = self._pending, []
        return pending


# The most events one read of a followed stream returns.
READ_COUNT = 100


def read_events(
    client: redis.Redis, keys: Keys, *, since: str = "-", count: int | None = None
) -> list[tuple[str, Event]]:
    """Stored events from ``since`` (a stream id, ``-`` for the oldest), oldest first."""
    entries: list[tuple[Any, dict[Any, Any]]] = client.xrange(  # type: ignore[assignment]
        keys.events, min=since, max="+", count=count
    )
    return [(_decode(entry_id), _parse(fields)) for entry_id, fields in entries]


def follow_events(
    client: redis.Redis,
    keys: Keys,
    *,
    since: str = "$",
    block_ms: int = 1000,
    stop: threading.Event | None = None,
) -> Iterator[tuple[str, Event]]:
    """Events as they arrive (from ``since``; ``$`` means only new ones), forever, or until
    ``stop`` is set (seen within ``block_ms``).

    ``client`` must allow blocking reads longer than ``block_ms`` (socket_timeout=None).
    """
    for batch in follow_event_batches(client, keys, since=since, block_ms=block_ms, stop=stop):
        yield from batch


def follow_event_batches(
    client: redis.Redis,
    keys: Keys,
    *,
    since: str = "$",
    block_ms: int = 1000,
    stop: threading.Event | None = None,
) -> Iterator[list[tuple[str, Event]]]:
    """``follow_events``, a read's worth at a time (up to ``READ_COUNT`` events), for a reader
    that hands them on in bulk."""
    last = since
    while stop is None or not stop.is_set():
        reply: list[tuple[Any, list[tuple[Any, dict[Any, Any]]]]] = client.xread(  # type: ignore[assignment]
            {keys.events: last}, block=block_ms, count=READ_COUNT
        )
        for _stream, entries in reply or []:
            batch = [(_decode(entry_id), _parse(fields)) for entry_id, fields in entries]
            if batch:
                last = batch[-1][0]
                yield batch


def append_jsonl(path: Path, events: list[Event]) -> None:
    """Append events to a JSONL file (one JSON object per line)."""
    with path.open("a", encoding="utf-8") as handle:
        for item in events:
            handle.write(item.to_json_line() + "\n")


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse(fields: dict[Any, Any]) -> Event:
    raw = fields.get(_FIELD.encode()) or fields.get(_FIELD) or b"{}"
    return Event.model_validate(json.loads(_decode(raw)))
