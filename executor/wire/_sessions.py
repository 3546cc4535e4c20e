"""Sessions in Redis: one agent's world (folder, lock scope, shell state), shared by every process.

A session's record is a hash (``Keys.session``): the host whose disk holds its folder, its
state (``creating`` -> ``ready`` -> ``deleting``), its use (calls, last use, idle TTL) and the
shell state ``bash`` carries from call to call (working directory, exported variables). The
calls sent to it are kept in a sorted set until the session is deleted: those without a stored
result are the ones that still run. The orchestrator and the workers both use this module; the
folder itself is only ever touched by a worker on the session's host.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections import Counter
from collections.abc import Iterable

import redis
from pydantic import BaseModel, ConfigDict, Field

from executor import _texts as texts
from executor._errors import SessionError
from executor.wire._keys import Keys
from executor.wire._processes import ProcessRecord
from executor.wire._results import load_lua

CREATING, READY, DELETING = "creating", "ready", "deleting"

# A session name is a folder name and part of key names: letters, digits, '.', '_', '-', and
# it starts with a letter or digit (so never '.', '..' or a hidden folder).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_session_name(name: str) -> str:
    """``name`` if it can name a session; ``SessionError`` saying why not."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SessionError(
            f"Invalid session name {name!r}: use 1 to 100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '/', no '..', no spaces)."
        )
    return name


def host_name(configured: str = "") -> str:
    """The host name a worker serves sessions under: ``configured``, or the machine's name."""
    name = configured or socket.gethostname()
    Keys().host_queue_name("check", name)  # raises ValueError naming what is wrong
    return name


def session_scope(name: str) -> str:
    """The lock scope of a session: its calls are serialized against each other only."""
    return f"session.{check_session_name(name)}"


class SessionInfo(BaseModel):
    """A session's record as stored, plus what was counted when it was read."""

    model_config = ConfigDict(extra="ignore")

    name: str
    host: str
    queue: str
    state: str
    created_at: float
    last_used: float
    #: ``last_used`` exactly as stored, for a change conditional on it.
    last_used_raw: str = ""
    calls: int = 0
    idle_ttl: float = 0.0
    template: str = ""
    cwd: str = "."
    env: dict[str, str] = Field(default_factory=dict)
    size_bytes: int | None = None
    size_at: float | None = None
    #: Calls sent to the session that have no result yet (filled in by ``SessionStore.read``).
    pending: int = 0

    @property
    def idle_s(self) -> float:
        """Seconds since the session's last call (or its creation)."""
        return max(0.0, time.time() - self.last_used)

    @property
    def expires_at(self) -> float | None:
        """When the idle TTL ends it, unless a call comes first; None if it never expires."""
        return self.last_used + self.idle_ttl if self.idle_ttl > 0 else None


class Entered(BaseModel):
    """What a call learns when it enters its session: the shell state, or why it cannot."""

    ok: bool
    problem: str = ""
    cwd: str = "."
    env: dict[str, str] = Field(default_factory=dict)


class SessionStore:
    """Reads and writes session records; every change of state is one script, so it is atomic."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._create = client.register_script(load_lua("session_create"))
        self._enter = client.register_script(load_lua("session_enter"))
        self._move = client.register_script(load_lua("session_state"))
        self._update = client.register_script(load_lua("session_update"))
        self._add_calls = client.register_script(load_lua("session_calls_add"))
        self._set_process = client.register_script(load_lua("session_process_set"))

    def create_record(
        self, name: str, *, host: str, queue: str, idle_ttl: float, template: str = ""
    ) -> bool:
        """Write a new record in state ``creating``; False if the name is taken."""
        check_session_name(name)
        created = self._create(
            keys=[self.keys.session(name), self.keys.sessions_index],
            args=[name, host, queue, repr(time.time()), repr(float(idle_ttl)), template],
        )
        return bool(created)

    def move(
        self, name: str, from_states: Iterable[str], to_state: str, *, last_used: str = ""
    ) -> str | None:
        """Move the session to ``to_state`` if it is in one of ``from_states`` (and, given
        ``last_used``, still has that last use, as stored); return the old state."""
        args = [",".join(from_states), to_state, *([last_used] if last_used else [])]
        old = self._move(keys=[self.keys.session(name)], args=args)
        return _text(old) if old else None

    def add_calls(
        self, name: str, call_ids: Iterable[str], *, pipe: redis.client.Pipeline | None = None
    ) -> object:
        """List calls as the session's, only while it is ready (1 if listed, else 0); with
        ``pipe``, queued on it, and its reply is that pipeline's."""
        return self._add_calls(
            keys=[self.keys.session(name), self.keys.session_calls(name)],
            args=[repr(time.time()), *call_ids],
            client=pipe,
        )

    def locate(self, name: str) -> tuple[str, str] | None:
        """The session's state and host (one round trip), or None if there is no session."""
        state, host = self.client.hmget(self.keys.session(name), ["state", "host"])
        if state is None or host is None:
            return None
        return _text(state), _text(host)

    def enter(self, name: str, host: str) -> Entered:
        """Count a call into the session, if it is ready and lives on ``host`` (one round trip)."""
        reply = [
            _text(part)
            for part in self._enter(keys=[self.keys.session(name)], args=[host, repr(time.time())])
        ]
        if reply[0] == "ok":
            return Entered(ok=True, cwd=reply[1], env=json.loads(reply[2] or "{}"))
        if reply[0] == "missing":
            problem = texts.session_missing(name)
        elif reply[0] == "state":
            problem = texts.session_not_ready(name, reply[1] or "in no known state")
        else:
            problem = texts.session_on_other_host(name, reply[1])
        return Entered(ok=False, problem=problem)

    def save_shell(self, name: str, cwd: str, env: dict[str, str]) -> None:
        """Keep ``bash``'s working directory and exported variables for the next call."""
        self._update(keys=[self.keys.session(name)], args=["cwd", cwd, "env", json.dumps(env)])

    def set_size(self, name: str, size_bytes: int) -> None:
        """Record the folder's size, measured now."""
        self._update(
            keys=[self.keys.session(name)],
            args=["size_bytes", size_bytes, "size_at", repr(time.time())],
        )

    def set_process(self, record: ProcessRecord) -> bool:
        """Record a background process of its session; False if the session is gone."""
        return self.set_process_json(record.session, record.id, record.model_dump_json())

    def set_process_json(self, name: str, process_id: str, record_json: str) -> bool:
        """``set_process`` of a record already in JSON (a ``ProcessRecord``'s)."""
        keys = [self.keys.session(name), self.keys.session_processes(name)]
        return bool(self._set_process(keys=keys, args=[process_id, record_json]))

    def processes(self, name: str) -> list[ProcessRecord]:
        """The session's background processes as their keepers last recorded them, by start."""
        raw = self.client.hgetall(self.keys.session_processes(name))
        records = [ProcessRecord.model_validate_json(value) for value in raw.values()]
        return sorted(records, key=lambda record: (record.started_at, record.id))

    def read(self, name: str) -> SessionInfo | None:
        """The session's record with its pending calls counted, or None if there is none."""
        found = self.read_many([name])
        return found[0] if found else None

    def names(self) -> list[str]:
        """Every session's name, sorted."""
        return sorted(_text(raw) for raw in self.client.smembers(self.keys.sessions_index))

    def count_by_host(self) -> Counter[str]:
        """How many sessions each host holds: two round trips, whatever their number (the
        sessions' names, then their hosts in one pipeline)."""
        names = list(self.client.smembers(self.keys.sessions_index))
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hget(self.keys.session(_text(name)), "host")
            hosts = pipe.execute()
        return Counter(_text(host) for host in hosts if host is not None)

    def read_many(self, names: list[str]) -> list[SessionInfo]:
        """The records of ``names`` that exist (pending calls counted), in that order."""
        with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self.keys.session(name))
            records = pipe.execute()
        infos = []
        for record in records:
            if not record:
                continue
            fields = {_text(k): _text(v) for k, v in record.items()}
            fields["env"] = json.loads(fields.get("env") or "{}")
            fields["last_used_raw"] = fields.get("last_used", "")
            info = SessionInfo.model_validate(fields)
            info.pending = len(self.pending_calls(info.name))
            infos.append(info)
        return infos

    def pending_calls(self, name: str) -> list[str]:
        """The session's calls that have no result yet (queued or running), oldest first."""
        call_ids = [_text(raw) for raw in self.client.zrange(self.keys.session_calls(name), 0, -1)]
        if not call_ids:
            return []
        stored = self.client.mget([self.keys.result(call_id) for call_id in call_ids])
        answered = [c for c, raw in zip(call_ids, stored, strict=True) if raw is not None]
        if answered:
            self.client.zrem(self.keys.session_calls(name), *answered)
        return [c for c, raw in zip(call_ids, stored, strict=True) if raw is None]

    def forget(self, name: str) -> None:
        """Remove every key of the session: record, calls, its lock scope; and its name."""
        lock = self.keys.lock(session_scope(name))
        with self.client.pipeline(transaction=False) as pipe:
            pipe.delete(
                self.keys.session(name),
                self.keys.session_calls(name),
                self.keys.session_processes(name),
            )
            pipe.delete(*lock.script_keys())
            pipe.srem(self.keys.sessions_index, name)
            pipe.execute()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
