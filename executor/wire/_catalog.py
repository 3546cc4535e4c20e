"""The tool catalog: each worker publishes the tools it serves; clients read what is live.

A worker process writes its entry (queue, tools with their schemas and flags, a version) under
a key that expires unless the worker refreshes it, so a killed worker drops out by itself.
Clients read the entries of the workers still alive on their queue: a custom tool is declared
once, on the workers, and the client needs no tool code to check and plan a call.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import redis
from pydantic import BaseModel, ConfigDict

from executor._errors import NotServedOnQueue, NoWorkerError
from executor.contract._info import ToolInfo
from executor.wire._keys import Keys

# A worker refreshes its entry this often; the entry outlives three missed refreshes.
REFRESH_S = 5.0
ENTRY_TTL_S = 3 * REFRESH_S


def catalog_version(tools: Sequence[ToolInfo]) -> str:
    """A short digest of the tools' descriptions: workers that agree publish the same one."""
    text = json.dumps([t.model_dump(mode="json") for t in tools], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class WorkerCatalog(BaseModel):
    """One worker process's entry: where it takes calls from and which tools it serves."""

    model_config = ConfigDict(frozen=True)

    worker: str
    queue: str
    host: str
    pid: int
    read_only: bool = False
    tools: list[ToolInfo]
    withheld: dict[str, str] = {}
    version: str
    published_at: float
    #: Set when the worker serves sessions: the queue of its host's sessions.
    host_queue: str = ""
    #: False when the worker takes only session calls, not those of ``queue`` itself.
    pool_calls: bool = True

    @classmethod
    def build(
        cls,
        worker: str,
        queue: str,
        tools: Iterable[ToolInfo],
        *,
        host: str,
        pid: int,
        read_only: bool = False,
        withheld: dict[str, str] | None = None,
        host_queue: str = "",
        pool_calls: bool = True,
    ) -> WorkerCatalog:
        """An entry for ``tools``, stamped now, with their version; ``withheld`` maps each
        tool the worker was started not to serve to the reason."""
        listed = list(tools)
        return cls(
            worker=worker,
            queue=queue,
            host=host,
            pid=pid,
            read_only=read_only,
            tools=listed,
            withheld=dict(withheld or {}),
            version=catalog_version(listed),
            published_at=time.time(),
            host_queue=host_queue,
            pool_calls=pool_calls,
        )


@dataclass(frozen=True)
class Catalog:
    """The tools served on one queue, merged from its live workers' entries."""

    queue: str
    entries: tuple[WorkerCatalog, ...]

    @property
    def workers(self) -> int:
        """How many live worker processes serve the queue."""
        return len(self.entries)

    @property
    def versions(self) -> list[str]:
        """The distinct catalog versions on the queue (more than one: workers disagree)."""
        return sorted({entry.version for entry in self.entries})

    @cached_property
    def _by_name(self) -> dict[str, ToolInfo]:
        # Merged once per catalog read: the client looks a tool up for every call.
        by_name: dict[str, ToolInfo] = {}
        for entry in sorted(self.entries, key=lambda e: e.published_at):
            for info in entry.tools:
                by_name[info.name] = info
        return dict(sorted(by_name.items()))

    def tools(self) -> list[ToolInfo]:
        """Every tool served on the queue, by name; where workers disagree, the newest entry's."""
        return list(self._by_name.values())

    def serving(self, name: str) -> int:
        """How many live workers serve ``name``."""
        return sum(1 for entry in self.entries if any(t.name == name for t in entry.tools))

    def get(self, name: str) -> ToolInfo:
        """The tool called ``name``; ``NoWorkerError`` if no worker is live on the queue,
        ``NotServedOnQueue`` (an ``UnknownToolError`` listing the tools) if none serves it."""
        tools = self._by_name
        if name in tools:
            return tools[name]
        if not self.entries:
            raise NoWorkerError(self.queue)
        reasons = sorted({e.withheld[name] for e in self.entries if name in e.withheld})
        raise NotServedOnQueue(name, tools, self.queue, "; ".join(reasons) or None)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name


def publish_catalog(client: redis.Redis, keys: Keys, entry: WorkerCatalog) -> None:
    """Write (or refresh) one worker's entry; it expires unless refreshed within the TTL."""
    with client.pipeline(transaction=False) as pipe:
        pipe.set(keys.catalog(entry.worker), entry.model_dump_json(), ex=int(ENTRY_TTL_S))
        pipe.sadd(keys.catalog_index, entry.worker)
        pipe.execute()


def withdraw_catalog(client: redis.Redis, keys: Keys, worker: str) -> None:
    """Remove one worker's entry (it stops serving)."""
    with client.pipeline(transaction=False) as pipe:
        pipe.delete(keys.catalog(worker))
        pipe.srem(keys.catalog_index, worker)
        pipe.execute()


def read_entries(client: redis.Redis, keys: Keys) -> list[WorkerCatalog]:
    """Every live worker's entry, on every queue; names whose entry expired are dropped."""
    names = sorted(
        n.decode() if isinstance(n, bytes) else str(n) for n in client.smembers(keys.catalog_index)
    )
    if not names:
        return []
    raw = client.mget([keys.catalog(name) for name in names])
    entries: list[WorkerCatalog] = []
    expired: list[str] = []
    for name, value in zip(names, raw, strict=True):
        if value is None:
            expired.append(name)
        else:
            entries.append(WorkerCatalog.model_validate_json(value))
    if expired:
        client.srem(keys.catalog_index, *expired)
    return entries


def read_catalog(client: redis.Redis, keys: Keys, queue: str) -> Catalog:
    """The tools served on ``queue`` (an RQ queue name, ``Keys.queue_name``, or a host's
    session queue, ``Keys.host_queue_name``) by live workers."""
    entries = [
        entry
        for entry in read_entries(client, keys)
        if (entry.queue == queue and entry.pool_calls) or entry.host_queue == queue
    ]
    return Catalog(queue=queue, entries=tuple(entries))
