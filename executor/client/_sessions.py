"""Sessions from the orchestrator's side: create, list and delete them, and pick their host.

A session's folder lives on one host's disk. ``create`` writes its record, pinned to a host
(the one asked for, or the least loaded of the live hosts that serve sessions), and sends the
folder work to that host's queue, ahead of calls; a worker there makes the folder (empty, or a
``cp -a`` of a template folder on that host) and answers. ``delete`` refuses while calls of
the session wait or run, unless forced, which cancels their turns first; then a worker of the
host removes the folder, and the session's keys go.
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor._errors import SessionError
from executor._rq.jobs import enqueue_session_op, named_queue
from executor._settings import Settings
from executor.client._outage import connect, reaching, required_url
from executor.lock import LockStatus, RWLock
from executor.wire import (
    CREATING,
    DELETING,
    READY,
    Keys,
    ProcessRecord,
    SessionInfo,
    SessionStore,
    check_session_name,
    read_entries,
    session_scope,
)

# How often a delete looks again for the session's calls to end.
_DRAIN_POLL_S = 0.1


@dataclass
class Sessions:
    """Manage the sessions of one Redis: ``create``, ``get``, ``list``, ``delete``, ``hosts``,
    and read a session's background processes (``processes``)."""

    redis_url: str | None = None
    settings: Settings = field(default_factory=Settings.from_env)

    def __post_init__(self) -> None:
        self.redis_url = required_url(self.redis_url, self.settings)
        self.keys = Keys(self.settings.redis.key_prefix)
        self.client = connect(self.redis_url)
        self.store = SessionStore(self.client, self.keys)

    def close(self) -> None:
        """Close the Redis connection."""
        self.client.close()

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def hosts(self) -> dict[str, int]:
        """The hosts with live workers serving sessions on this queue, and how many each."""
        with reaching(self.redis_url, "while reading the live workers"):
            queue = self.keys.queue_name(self.settings.client.queue)
            live = [
                e.host
                for e in read_entries(self.client, self.keys)
                if e.queue == queue and e.host_queue
            ]
        return dict(sorted(Counter(live).items()))

    def create(
        self,
        name: str,
        *,
        template: str | Path | None = None,
        host: str | None = None,
        idle_ttl: float | None = None,
        timeout: float = 600.0,
    ) -> SessionInfo:
        """Create session ``name``: its folder on ``host`` (default: the least loaded live host),
        empty or a copy of ``template`` (a folder on that host; a relative path is taken from
        this process's working directory). ``idle_ttl``: seconds without a call after which it
        is deleted (default ``settings.client.session_idle_ttl``; 0 never). Waits up to ``timeout``
        for the host to make the folder; ``SessionError`` says what went wrong."""
        check_session_name(name)
        ttl = self.settings.client.session_idle_ttl if idle_ttl is None else idle_ttl
        if ttl < 0:
            raise SessionError(f"idle_ttl must be 0 (never) or positive, got {ttl:g}.")
        source = str(Path(template).resolve()) if template is not None else ""
        with reaching(self.redis_url, f"while creating session {name}"):
            chosen = self._pick_host(host)
            if not self.store.create_record(
                name, host=chosen, queue=self.settings.client.queue, idle_ttl=ttl, template=source
            ):
                raise SessionError(f"Session {name!r} already exists; pick another name.")
            answer = self._ask(
                chosen, {"session_op": "create", "name": name, "template": source}, timeout
            )
            if answer is None:
                raise SessionError(
                    f"No worker on host {chosen!r} made session {name!r}'s folder within "
                    f"{timeout:g} s; it stays '{CREATING}' until one does (`toolpool session "
                    "delete` removes it)."
                )
            if not answer.get("ok"):
                raise SessionError(
                    f"Session {name!r} was not created on host {chosen!r}: {answer.get('error')}"
                )
            return self.get(name)

    def get(self, name: str) -> SessionInfo:
        """The session's record; ``SessionError`` if there is no such session."""
        check_session_name(name)
        with reaching(self.redis_url, f"while reading session {name}"):
            info = self.store.read(name)
        if info is None:
            raise SessionError(f"No session {name!r} (never created, deleted, or expired).")
        return info

    def list(self) -> list[SessionInfo]:
        """Every session, by name."""
        with reaching(self.redis_url, "while listing sessions"):
            return self.store.read_many(self.store.names())

    # builtins.list: in this class, ``list`` is the method above.
    def processes(self, name: str) -> builtins.list[ProcessRecord]:
        """The background processes of session ``name``, oldest first, as their keepers last
        recorded them (at their start and at their end: ``output_bytes`` is counted at the
        end). ``SessionError`` if there is no such session."""
        self.get(name)
        with reaching(self.redis_url, f"while reading session {name}'s processes"):
            return self.store.processes(name)

    def lock_status(self, name: str) -> LockStatus:
        """Who holds and who waits for the lock of session ``name``."""
        lock = RWLock(self.client, session_scope(name), keys=self.keys)
        with reaching(self.redis_url, f"while reading session {name}'s lock"):
            return lock.status()

    def delete(self, name: str, *, force: bool = False, timeout: float = 60.0) -> bool:
        """Delete session ``name``: its folder and every key of it.

        Refuses (``SessionError``) while calls of the session wait or run, unless ``force``,
        which cancels their turns first and waits up to ``timeout`` for them to end. True if
        a worker of the session's host removed the folder; False if no worker there is live,
        so only the keys were removed and the folder stays on that host's disk.
        """
        info = self.get(name)
        with reaching(self.redis_url, f"while deleting session {name}"):
            pending = self.store.pending_calls(name)
            if pending and not force:
                raise SessionError(
                    f"Session {name!r} has {len(pending)} call(s) waiting or running "
                    f"({', '.join(pending[:3])}{', ...' if len(pending) > 3 else ''}); wait for "
                    "them, or delete with force (--force) to cancel them first."
                )
            # From here on its host's workers refuse the session's calls ("unknown_session").
            if self.store.move(name, [READY, CREATING, DELETING], DELETING) is None:
                raise SessionError(f"No session {name!r} (deleted meanwhile).")
            if info.host not in self.hosts():
                self.store.forget(name)
                return False
            if pending:
                self._cancel_turns(pending)
            # Calls sent just before the move are answered (run, cancelled or refused) first.
            self._drain(name, time.monotonic() + timeout)
            answer = self._ask(info.host, {"session_op": "delete", "name": name}, timeout)
            if answer is None:
                raise SessionError(
                    f"No worker on host {info.host!r} removed session {name!r}'s folder within "
                    f"{timeout:g} s; the session stays '{DELETING}'. Delete it again later."
                )
            if not answer.get("ok"):
                raise SessionError(f"Session {name!r} was not deleted: {answer.get('error')}")
            return True

    # -- inside ----------------------------------------------------------------------------

    def _pick_host(self, wanted: str | None) -> str:
        hosts = self.hosts()
        if wanted is not None:
            if wanted not in hosts:
                raise SessionError(
                    f"No live worker serves sessions on host {wanted!r}; live hosts: "
                    f"{', '.join(hosts) or '(none)'}. Start one with `toolpool worker "
                    "--sessions-root DIR --host NAME`."
                )
            return wanted
        if not hosts:
            raise SessionError(
                "No live worker serves sessions: start one with `toolpool worker "
                "--sessions-root DIR` (or pass a host that will serve them)."
            )
        sessions = self.store.count_by_host()
        # The least loaded: fewest sessions per worker; ties go to the host named first.
        return min(hosts, key=lambda h: (sessions[h] / hosts[h], h))

    def _ask(self, host: str, payload: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send folder work to ``host``'s queue; its worker's answer, or None at ``timeout``."""
        request_id = uuid.uuid4().hex
        queue = named_queue(
            self.client, self.keys.host_queue_name(self.settings.client.queue, host)
        )
        enqueue_session_op(
            queue,
            {**payload, "request_id": request_id},
            doorbell=self.keys.doorbell(queue.name),
            record_ttl=self.settings.client.rq_record_ttl,
        )
        blocking = connect(self.redis_url or "", blocking_s=timeout)
        try:
            reply = blocking.blpop([self.keys.session_reply(request_id)], timeout=timeout)
        finally:
            blocking.close()
        if reply is None:
            return None
        answer: dict[str, Any] = json.loads(reply[1])
        return answer

    def _cancel_turns(self, call_ids: Sequence[str]) -> None:
        # Imported here: the executor imports this module for its session routing.
        from executor.client._executor import Executor

        turns = {
            raw.decode() if isinstance(raw, bytes) else str(raw)
            for raw in self.client.mget([self.keys.call_claim(c) for c in call_ids])
            if raw is not None
        }
        with Executor(self.redis_url, settings=self.settings) as executor:
            for turn_id in sorted(turns):
                executor.cancel(turn_id)

    def _drain(self, name: str, deadline: float) -> None:
        while self.store.pending_calls(name):
            if time.monotonic() >= deadline:
                raise SessionError(
                    f"Calls of session {name!r} were still running when the delete gave up "
                    "waiting; the session stays being deleted. Delete it again later."
                )
            time.sleep(_DRAIN_POLL_S)
