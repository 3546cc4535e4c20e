"""One worker process: ``python -m workers --name NAME [--tools MODULE:ATTR ...] [--fork]
[--read-only] [--disable-tool NAME ...]``.

This is what ``WorkerPool`` starts for each slot. Every setting (Redis URL, key prefix, queue,
lock scope, workspace, limits, the served tools' own) comes from ``TOOLPOOL_*`` variables
through ``Settings.from_env()``; the pool sets them from its own ``Settings``. To serve calls by
hand, use ``toolpool worker``, which supervises such processes.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from executor import Settings, ToolpoolError
from workers.cli._registry import build_registry
from workers.pool._process import run_worker, served_registry

log = logging.getLogger("workers")

# How often a child looks whether its supervisor still exists.
_PARENT_CHECK_S = 1.0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workers",
        description="Run one toolpool worker process (settings: TOOLPOOL_*).",
    )
    parser.add_argument("--name", default=None, help="Worker name, unique on the Redis.")
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="Add a registry of your own tools (repeatable).",
    )
    parser.add_argument("--fork", action="store_true", help="Fork a process per call.")
    parser.add_argument(
        "--read-only", action="store_true", help="Serve only the tools declared read-only."
    )
    parser.add_argument(
        "--disable-tool",
        action="append",
        default=[],
        metavar="NAME",
        help="Do not serve this tool (repeatable).",
    )
    parser.add_argument("--log-level", default="WARNING", help="Logging level.")
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="Stop (warm) once this process is no longer the parent.",
    )
    return parser.parse_args(argv)


def _watch_parent(parent_pid: int) -> None:
    """Ask this process to stop, warmly, once its supervisor is gone.

    Children run in sessions of their own, so nothing else would stop them if the supervisor
    were killed. SIGTERM is RQ's warm shutdown: the call in flight still finishes.
    """
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_CHECK_S)
    log.warning("toolpool: supervisor %d is gone; stopping after the current call", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """Run one worker until it is stopped; return the process exit code."""
    args = _parse(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )

    try:
        registry = served_registry(
            build_registry(tuple(args.tools)),
            read_only=args.read_only,
            disabled=frozenset(args.disable_tool),
        )
        # The served tools' own settings too: each tool gets its group from the run step.
        settings = Settings.from_env(tools=registry.settings_classes())
    except ToolpoolError as exc:
        print(f"toolpool worker: {exc}", file=sys.stderr)
        return 2
    if not settings.redis.url:
        print("toolpool worker: no Redis URL: set TOOLPOOL_REDIS_URL.", file=sys.stderr)
        return 2
    if args.parent_pid is not None:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid,), name="toolpool-parent", daemon=True
        ).start()
    run_worker(
        settings.redis.url,
        settings,
        registry,
        name=args.name,
        forking=args.fork,
        logging_level=args.log_level.upper(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
