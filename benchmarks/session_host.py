"""One host of sessions for ``benchmarks.many_sessions``: ``toolpool worker --sessions-root``
started as users start it, under a fresh host name, and what the benchmark reads of that host.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from rq.registry import StartedJobRegistry

from benchmarks.many_sessions_report import Holders
from benchmarks.processes import descendants, read_proc, sweep_daemons
from benchmarks.sides import BenchError, Pool
from executor import Sessions, Settings
from executor._rq.jobs import named_queue
from executor.wire import Keys
from workers._embedded_redis import RedisServer
from workers.processes import _place as place

PATIENCE_S = 120.0


@dataclass
class HostBench:
    """The private Redis, a sessions client, and the folder under which each run's host
    keeps its sessions."""

    server: RedisServer
    folder: Path
    args: argparse.Namespace
    host: str = ""
    root: Path = field(default_factory=Path)

    def __post_init__(self) -> None:
        self.url = self.server.url
        self.client = redis.Redis.from_url(self.url, socket_timeout=30)
        self.settings = Settings(redis_url=self.url)
        self.sessions = Sessions(settings=self.settings)
        self.keys = Keys(self.settings.redis.key_prefix)

    def close(self) -> None:
        self.sessions.close()
        self.client.close()

    @property
    def host_queue(self) -> str:
        return self.keys.host_queue_name(self.settings.client.queue, self.host)

    @contextmanager
    def serving(self, run: int) -> Iterator[None]:
        """``toolpool worker --workers W --sessions-root DIR --host HOST`` for a fresh host,
        serving sessions; stopped by its PID, then what its sessions left on the host."""
        self.host = f"many-r{run}"
        self.root = self.folder / self.host
        self.root.mkdir()
        pool = Pool()
        children: list[int] = []
        try:
            pool.run(self._command(), self._environment())
            pid = pool.commands[0].pid
            print(f"  toolpool worker (pid {pid}) for host {self.host}", flush=True)
            pool.wait_until(
                lambda: self.sessions.hosts().get(self.host, 0) >= self.args.workers,
                "serving sessions",
                PATIENCE_S,
            )
            children = descendants(pid)
            yield
        finally:
            pool.stop()
            _stop_left(children)
            sweep_daemons(self.root)
            shutil.rmtree(self.root, ignore_errors=True)

    def _command(self) -> list[str]:
        script = Path(sys.executable).with_name("toolpool")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "executor.cli"]
        return [
            *command,
            "worker",
            "--workers",
            str(self.args.workers),
            "--sessions-root",
            str(self.root),
            "--host",
            self.host,
        ]

    def _environment(self) -> dict[str, str]:
        """Ours without TOOLPOOL_* variables, plus the Redis URL, as a deployment sets it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
        env["TOOLPOOL_REDIS_URL"] = self.url
        return env

    def wait_idle(self) -> None:
        """Until the host's queue is empty and no job is started (RQ's bookkeeping done)."""
        queue = named_queue(self.client, self.host_queue)
        started = StartedJobRegistry(name=self.host_queue, connection=self.client)
        deadline = time.monotonic() + PATIENCE_S
        while len(queue) or started.get_job_count(cleanup=False):
            if time.monotonic() > deadline:
                raise BenchError(f"the workers of {self.host} did not go idle in time")
            time.sleep(0.01)

    def used_holders(self, names: Sequence[str]) -> Holders:
        """The live network holders of ``names`` on this host, and their summed PSS."""
        alive = pss = 0
        for name in names:
            try:
                pid = int(
                    (place.session_host_folder(self.root, name) / place.NETNS_PID).read_text()
                )
            except (OSError, ValueError):
                continue
            found = read_proc(pid)
            if found is not None:
                alive += 1
                pss += found.pss_kb
        return Holders(len(names), alive, pss)


def _stop_left(pids: Sequence[int], patience_s: float = 10.0) -> None:
    """Wait for the worker's processes (``pids``, read while it ran) to end after it did: a
    worker process may finish stopping just after its supervisor; SIGKILL the ones still
    there after ``patience_s`` (a pid reused meanwhile would be no child of theirs, but the
    window is seconds)."""
    deadline = time.monotonic() + patience_s
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if _running(pid)]
        if left:
            time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:
        print(f"  worker processes killed after {patience_s:g} s: {left}", flush=True)


def _running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
