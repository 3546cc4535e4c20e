"""What the session proofs share: worker settings for a host, calls, and what a folder holds.

``host_settings`` gives the settings of one host's workers (its own sessions root on "its"
disk, a folder of the test's temporary directory); ``tree`` is a folder's full content
(kinds, modes, bytes, link targets), so a test can prove a folder unchanged; ``session_keys``
lists every key left of a session, its lock scope's included.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import redis

from executor import Settings, ToolResult, ToolStatus
from executor.wire import Keys, session_scope
from tests.support.procs import events, named


def host_settings(redis_url: str, base: Path, host: str, **changes: Any) -> Settings:
    """The settings of host ``host``'s workers: sessions in ``base/<host>/sessions``."""
    sessions_root = base / host / "sessions"
    workspace = base / host / "workspace"
    sessions_root.mkdir(parents=True, exist_ok=True)
    workspace.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"lock_lease_ms": 3000, **changes}
    return Settings(
        redis_url=redis_url, workspace=workspace, sessions_root=sessions_root, host=host, **options
    )


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call as a model sends it."""
    return {"id": call_id, "name": name, "arguments": arguments}


def ok(result: ToolResult) -> str:
    """The content of a successful result; fails the test, saying why, for any other."""
    assert result.status is ToolStatus.OK, (result.call_id, result.error_type, result.content)
    return result.content


def stdout_lines(result: ToolResult) -> list[str]:
    """The lines bash printed on stdout (its report's ``stdout:`` section), notes excluded."""
    content = ok(result)
    _, found, rest = content.partition("stdout:\n")
    assert found, f"no stdout in {content!r}"
    return [line for line in rest.split("\n") if line and not line.startswith(("note:", "stderr:"))]


def worker_of(client: redis.Redis, call_id: str) -> str:
    """The worker that ran ``call_id``, as its ``lock_acquired`` event names it."""
    found = named(events(client), "lock_acquired", [call_id])
    assert len(found) == 1, f"{len(found)} lock_acquired events for {call_id}"
    return found[0].worker


def tree(folder: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``folder`` (links not followed): kind, permission bits, and the
    bytes of a file or the target of a link."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for path, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            entry = Path(path, name)
            info = entry.lstat()
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                found[str(entry.relative_to(folder))] = ("link", mode, os.readlink(entry).encode())
            elif stat.S_ISDIR(info.st_mode):
                found[str(entry.relative_to(folder))] = ("dir", mode, b"")
            else:
                found[str(entry.relative_to(folder))] = ("file", mode, entry.read_bytes())
    return found


def session_keys(client: redis.Redis, name: str, keys: Keys | None = None) -> list[str]:
    """Every key left of session ``name``: its record and calls, and its lock scope's keys."""
    keys = keys or Keys()
    lock_tag = keys.lock(session_scope(name)).tag
    patterns = [keys.session(name), keys.session(name) + ":*", _glob_escaped(lock_tag) + "*"]
    found = {raw.decode() for pattern in patterns for raw in client.scan_iter(match=pattern)}
    return sorted(found)


def in_index(client: redis.Redis, name: str, keys: Keys | None = None) -> bool:
    """Whether ``name`` is still listed among the sessions."""
    return bool(client.sismember((keys or Keys()).sessions_index, name))


def _glob_escaped(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern (the lock tag holds braces)."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
