"""Session: a call that names a session runs in that session's folder, lock scope and shell.

The step enters the session (one script: it must exist, be ready and live on this worker's
host; the call is counted and the session's last use stamped) and points the call at the
session: its folder under the worker's sessions root as the workspace, the session's lock
scope, and the shell state ``bash`` continues. A call that cannot enter is answered
``unknown_session`` and runs nothing; a call without a session passes through unchanged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import redis

from executor import SessionError
from executor import _texts as texts
from executor._patience import patiently
from executor.contract import SessionPlace, ShellState, Workspace
from executor.wire import ErrorType, SessionStore, ToolResult, check_session_name, session_scope
from workers.pipeline._chain import CallState, Proceed
from workers.processes._place import session_host_folder

log = logging.getLogger(__name__)


class EnterSession:
    """Step: move a session's call into its session; ``unknown_session`` if it cannot be."""

    def __init__(
        self,
        store: SessionStore,
        sessions_root: Path | None,
        host: str,
        *,
        pool_calls: bool = True,
    ) -> None:
        self._store = store
        self._root = Path(os.path.realpath(sessions_root)) if sessions_root else None
        self._host = host
        self._pool_calls = pool_calls
        self._redis: dict[str, str] | None = None

    def _redis_env(self, state: CallState) -> dict[str, str]:
        if self._redis is None:
            self._redis = state.settings.redis.environment()
        return self._redis

    def __call__(self, state: CallState, proceed: Proceed) -> ToolResult:
        name = state.the_job().session
        if name is None:
            if self._pool_calls:
                return proceed(state)
            return _refuse(state, texts.sessions_only())
        try:
            check_session_name(name)  # the client checks it too; a job may come from elsewhere
        except SessionError as exc:
            return _refuse(state, str(exc).rstrip("."))
        if self._root is None:
            return _refuse(state, texts.no_sessions(name))
        # Tried again while Redis is away: a lost reply only counts the call twice.
        entered = patiently(lambda: self._store.enter(name, self._host))
        if not entered.ok:
            return _refuse(state, entered.problem)
        folder = self._root / name
        if not folder.is_dir():
            return _refuse(state, texts.session_folder_missing(name, self._host, str(folder)))
        state.workspace = Workspace(folder)
        state.scope = session_scope(name)

        def save(cwd: str, env: dict[str, str]) -> bool:
            # The command has run: a state that cannot be kept must not change its answer.
            try:
                self._store.save_shell(name, cwd, env)
            except redis.RedisError as exc:
                log.warning("toolpool: could not keep session %s's shell state: %s", name, exc)
                return False
            return True

        state.shell = ShellState(cwd=entered.cwd, env=entered.env, save=save)

        def publish(process_id: str, record_json: str) -> bool:
            try:
                return self._store.set_process_json(name, process_id, record_json)
            except redis.RedisError as exc:
                log.warning("toolpool: could not record session %s's process: %s", name, exc)
                return False

        state.session = SessionPlace(
            name,
            self._host,
            session_host_folder(self._root, name),
            self._redis_env(state),
            publish,
        )
        return proceed(state)


def _refuse(state: CallState, problem: str) -> ToolResult:
    call = state.call
    message = texts.session_refused(call.name, problem)
    return ToolResult.failure(call.id, call.name, ErrorType.UNKNOWN_SESSION, message)
