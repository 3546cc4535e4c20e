"""Starting a daemon of ours that outlives the worker: detached, reaped, and heard once ready.

A keeper or a network holder must survive the worker process that starts it, so it leaves
the worker's process group and session, and it must not be killed with the worker: it does
not carry the pool child's mark (``workers.pool._reaper.TOKEN_ENV``), which the pool uses to
sweep a dead worker's processes. It carries the pool's own mark instead
(``POOL_MARK``), so the pool that stops on this host stops it too.

The daemon forks once more at start and its first process exits at once, so the worker reaps
it at once and no zombie waits for a worker that may be gone; the daemon says ``ready PID``
(or ``error MESSAGE``) on its standard output when it has set itself up.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping

from executor import ToolError

# Marks every process a pool's child starts (its value is the child's own token), so that the
# pool's sweep finds them after the child is gone.
TOKEN_ENV = "TOOLPOOL_POOL_CHILD"
# Names the pool whose workers started a daemon: "POOL_ID" (the first part of the token).
POOL_MARK = "TOOLPOOL_POOL_PROCESSES"
# Names the process folder a keeper keeps (a network holder has none).
KEEPER_OF = "TOOLPOOL_KEEPER_OF"
# Names the session host folder whose network a holder keeps.
NETNS_OF = "TOOLPOOL_NETNS_OF"


def daemon_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A daemon's environment: a PATH, this worker's import path, ``extra``, and the pool's
    mark (from the worker's token, which the daemon does not carry)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        # The daemon imports toolpool as this worker does (a checkout on sys.path included).
        "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
        **(extra or {}),
    }
    token = os.environ.get(TOKEN_ENV, "")
    if token:
        env[POOL_MARK] = token.split(".", 1)[0]
    return env


def start_daemon(argv: list[str], env: dict[str, str], what: str, wait_s: float = 30.0) -> int:
    """Start ``argv`` (a module of ours that calls ``detach``); the daemon's pid once ready."""
    try:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolError(f"Could not start {what}: {exc}; nothing ran. Try again later.") from None
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + wait_s
    try:
        fd = process.stdout.fileno()
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise ToolError(f"{what} did not start within {wait_s:g} s. Try again later.")
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            line += chunk
    finally:
        process.stdout.close()
        process.wait()
    word, _, rest = line.decode(errors="replace").strip().partition(" ")
    if word == "ready" and rest.isdigit():
        return int(rest)
    raise ToolError(rest if word == "error" and rest else f"{what} could not start; nothing ran.")


def detach() -> None:
    """In the daemon, first thing: fork, the first process exiting, so the starter reaps it."""
    if os.fork():
        os._exit(0)


def ready(pid: int | None = None) -> None:
    """Say ``ready PID`` to the starter and stop writing to its pipe."""
    _say(f"ready {pid or os.getpid()}")


def failed(message: str) -> None:
    """Say why the daemon could not start, as one line the starter raises as the error."""
    _say("error " + " ".join(message.split()))


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
