"""Session create and delete on this host, asked for through the host's queue.

The orchestrator writes the session's record and sends the folder work as a job at the front of
the host's queue (``executor.client._sessions``); a worker of the host runs it here and answers
on the request's reply list. Only a worker on the session's host ever touches its folder.
A session made is noted for the host's workers (``workers.processes._recent``); those that ran
bash in the host's sessions make its network and sandbox ahead of its first calls, unless
``TOOLPOOL_BASH_WARM_PEERS`` is off.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import redis

from executor import SessionError
from executor.wire import CREATING, DELETING, READY, Keys, SessionStore
from workers.processes._ending import end_session
from workers.processes._place import session_host_folder
from workers.processes._recent import note
from workers.sessions._folders import make_folder, remove_folder

log = logging.getLogger(__name__)

# How long a reply waits for the orchestrator that asked.
_REPLY_TTL_S = 600


class SessionAdmin:
    """Runs the folder side of session create and delete for one worker process."""

    def __init__(
        self, client: redis.Redis, keys: Keys, sessions_root: Path | None, host: str
    ) -> None:
        self._client = client
        self._keys = keys
        self._store = SessionStore(client, keys)
        self._root = sessions_root
        self._host = host

    def handle(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one request (``{"session_op", "name", "request_id", ...}``); answer and return."""
        request_id = str(payload.get("request_id", ""))
        try:
            answer = self._run(payload)
        except SessionError as exc:
            answer = {"ok": False, "error": str(exc)}
        except OSError as exc:
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if request_id:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.lpush(self._keys.session_reply(request_id), json.dumps(answer))
                pipe.expire(self._keys.session_reply(request_id), _REPLY_TTL_S)
                pipe.execute()
        return answer

    def _run(self, payload: dict[str, Any]) -> dict[str, Any]:
        op, name = payload.get("session_op"), str(payload.get("name", ""))
        info = self._store.read(name)
        if info is None:
            raise SessionError(f"Session {name!r} has no record: nothing to {op}.")
        if info.host != self._host:
            raise SessionError(f"Session {name!r} lives on host {info.host!r}, not {self._host!r}.")
        root = self._root
        if root is None:
            raise SessionError(f"The worker on host {self._host!r} serves no sessions.")
        if op == "create":
            if info.state != CREATING:
                raise SessionError(f"Session {name!r} is {info.state}, not being created.")
            try:
                make_folder(root, name, str(payload.get("template") or ""))
            except BaseException:
                self._store.forget(name)
                raise
            self._store.move(name, [CREATING], READY)
            # The host's workers make its network and sandbox ahead of its first bash call (in
            # its host folder, made here: one missing is a session deleted).
            with contextlib.suppress(OSError):
                host_folder = session_host_folder(root, name)
                host_folder.mkdir(parents=True, exist_ok=True)
                note(host_folder.parent, name)
            return {"ok": True}
        if op == "delete":
            if info.state != DELETING:
                raise SessionError(f"Session {name!r} is {info.state}, not being deleted.")
            remove(self._store, root, name)
            return {"ok": True}
        raise SessionError(f"Unknown session request {op!r}.")


def remove(store: SessionStore, root: Path, name: str, why: str = "deleted") -> None:
    """Remove a session that is being deleted: its background processes, its folder, then
    every key of it."""
    stopped = end_session(root, name, f"its session was {why}")
    if stopped:
        log.info("toolpool: session %s: %d background processes stopped", name, stopped)
    removed = remove_folder(root, name)
    store.forget(name)
    log.info("toolpool: session %s removed (folder %s)", name, "removed" if removed else "absent")
