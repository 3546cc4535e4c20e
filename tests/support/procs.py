"""Real worker processes for the distributed proofs, and the events they emit.

A worker here is a real OS process, ``python -m tests.support.procs NAME REGISTRY``, that reads
its settings from ``TOOLPOOL_*`` variables (``Settings.from_env``) and runs
``workers.pool._process.run_worker`` with the registry it names
(``tests.support.dist_tools:registry`` unless a test asks otherwise). ``Workers`` starts them,
waits until RQ knows them, and stops them by PID: SIGTERM (RQ's warm shutdown) and, past a
deadline, SIGKILL. A child finds ``tests.support`` through ``python_path_env``: the repository
root on its ``PYTHONPATH``.

Interval checks read the lock events: a call holds the lock from its ``lock_acquired`` (emitted
after the grant) to its ``lock_released`` (``released_at``: stamped before the release is
sent), so a recorded interval lies inside the hold Redis granted, and two recorded intervals
that overlap really overlapped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import redis

from executor import Settings
from executor.contract import load_registry
from executor.wire import Event, Keys, read_events
from tests.support.waiting import PATIENCE_S, wait_for
from workers.pool._pool import WorkerPool

# The repository root: on a child's PYTHONPATH, it makes ``tests.support`` importable.
ROOT = Path(__file__).resolve().parents[2]
DIST_TOOLS = "tests.support.dist_tools:registry"
_STOP_GRACE_S = 10.0


def python_path_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) with the repository root first on ``PYTHONPATH``."""
    env = dict(os.environ if env is None else env)
    path = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def child_env(settings: Settings) -> dict[str, str]:
    """The environment of a worker process: ours, the settings, the repository on PYTHONPATH."""
    env = python_path_env({k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")})
    env.update(settings.environment())
    return env


@dataclass
class WorkerProcess:
    """One worker process and the file its stderr goes to."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def child_pids(self) -> list[int]:
        """The processes this worker started (e.g. a running bash), read from /proc."""
        pids: list[int] = []
        task_dir = Path(f"/proc/{self.pid}/task")
        for task in task_dir.glob("*"):
            try:
                pids += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return pids

    def diagnosis(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"worker {self.name} (pid {self.pid}, exit {self.process.poll()}): {text[-3000:]}"


class Workers:
    """Starts worker processes for one test and makes sure none outlives it."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        assert settings.redis.url, "the workers need settings.redis.url"
        self.settings = settings
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.started: list[WorkerProcess] = []
        self._orphans: list[int] = []

    def start(self, count: int = 1, *, registry: str = DIST_TOOLS) -> list[WorkerProcess]:
        """Start ``count`` workers and wait until RQ lists each of them on the queue."""
        batch: list[WorkerProcess] = []
        for _ in range(count):
            name = f"test-worker-{len(self.started)}-{os.getpid()}-{time.monotonic_ns()}"
            log = self.folder / f"{name}.log"
            with log.open("ab") as stderr:
                process = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.procs", name, registry],
                    env=child_env(self.settings),
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=subprocess.STDOUT,
                )
            worker = WorkerProcess(name, process, log)
            self.started.append(worker)
            batch.append(worker)
        client = redis.Redis.from_url(str(self.settings.redis.url))
        try:
            for worker in batch:
                wait_for(
                    partial(self._registered, client, worker),
                    what=f"worker {worker.name} to register",
                )
        finally:
            client.close()
        return batch

    def kill(self, worker: WorkerProcess) -> list[int]:
        """SIGKILL a worker mid-call; return the processes it had started (killed at stop_all)."""
        children = worker.child_pids()
        self._orphans += children
        worker.process.kill()
        worker.process.wait(timeout=_STOP_GRACE_S)
        return children

    def stop_all(self) -> None:
        """Stop every worker this object started, by PID: SIGTERM, then SIGKILL past a grace."""
        for worker in self.started:
            if worker.alive():
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for worker in self.started:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=_STOP_GRACE_S)
        for pid in self._orphans:
            # A killed worker's bash runs in a session of its own, led by this pid.
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue

    def diagnosis(self) -> str:
        """The tail of every worker's log, for a failure message."""
        return "\n".join(w.diagnosis() for w in self.started)

    def _registered(self, client: redis.Redis, worker: WorkerProcess) -> bool:
        assert worker.alive(), worker.diagnosis()
        return bool(client.exists(f"rq:worker:{worker.name}"))


#: ``make_workers(settings)`` (the fixture in ``tests/conftest.py``): a new ``Workers`` group.
MakeWorkers = Callable[[Settings], "Workers"]


@contextmanager
def running_pool(settings: Settings, workers: int = 1, **options: Any) -> Iterator[WorkerPool]:
    """A supervised ``WorkerPool`` of the built-in tools, every child registered; stopped after."""
    pool = WorkerPool(str(settings.redis.url), settings, workers=workers, grace=10.0, **options)
    pool.start()
    try:
        pool.wait_ready()
        yield pool
    finally:
        pool.stop(grace=10.0)


# -- events ------------------------------------------------------------------------------


def events(client: redis.Redis, keys: Keys | None = None) -> list[Event]:
    """Every event in the stream, in stream order."""
    return [item for _, item in read_events(client, keys or Keys())]


def named(items: Iterable[Event], name: str, call_ids: Iterable[str] | None = None) -> list[Event]:
    """The events called ``name`` (of ``call_ids`` only, if given), in their order."""
    wanted = None if call_ids is None else set(call_ids)
    return [e for e in items if e.event == name and (wanted is None or e.call_id in wanted)]


def wait_for_event(
    client: redis.Redis, name: str, call_id: str, timeout: float = PATIENCE_S
) -> Event:
    """Wait until the stream holds event ``name`` of ``call_id``; return it."""
    found: list[Event] = []

    def seen() -> bool:
        found[:] = named(events(client), name, [call_id])
        return bool(found)

    wait_for(seen, f"{name} of {call_id}", timeout=timeout)
    return found[0]


@dataclass(frozen=True)
class Hold:
    """One call's hold of the lock, as its events recorded it (wall clock, one host)."""

    call_id: str
    tool: str
    mode: str
    worker: str
    start: float
    end: float

    def overlaps(self, other: Hold) -> bool:
        return self.start < other.end and other.start < self.end


def holds(items: Iterable[Event]) -> list[Hold]:
    """Each call's hold, from its lock_acquired to its lock_released; every hold must end."""
    acquired: dict[str, Event] = {}
    found: list[Hold] = []
    for item in items:
        if item.event == "lock_acquired":
            acquired[item.call_id] = item
        elif item.event == "lock_released":
            start = acquired.pop(item.call_id)
            end = float(item.data["released_at"])
            found.append(
                Hold(item.call_id, item.tool, str(start.data["mode"]), item.worker, start.ts, end)
            )
    assert not acquired, f"holds that never ended: {sorted(acquired)}"
    return found


def exclusive_overlaps(found: list[Hold]) -> list[tuple[Hold, Hold]]:
    """Pairs of holds that overlap while one of them is exclusive (there must be none)."""
    return [
        (a, b)
        for i, a in enumerate(found)
        for b in found[i + 1 :]
        if "exclusive" in (a.mode, b.mode) and a.overlaps(b)
    ]


def _serve(name: str, registry_spec: str) -> None:
    from workers.pool._process import run_worker

    registry = load_registry(registry_spec)
    settings = Settings.from_env(tools=registry.settings_classes())
    assert settings.redis.url
    run_worker(settings.redis.url, settings, registry, name=name)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])


def stop_process(process: subprocess.Popen[Any], grace: float = _STOP_GRACE_S) -> None:
    """Stop a process we started: SIGTERM by pid, SIGKILL past ``grace`` seconds, reaped."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
