"""Cleaning up after a pool's worker process that died: processes, lock, call, RQ record.

A worker killed mid-call cannot tidy up, and what it leaves would otherwise wait for timeouts:
a bash command it started runs on (in a session of its own, outside the worker's process
group), its lock lease holds until it expires, its call waits for the orchestrator's liveness
check, the turn's next batch for RQ's registry cleanup, and its name stays registered with RQ.
``Reaper.bury`` ends all of that at once, in an order that keeps the lock meaningful: the
leftover processes die before the lease is released.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import redis
from pydantic import ValidationError
from rq import Worker
from rq.serializers import JSONSerializer

from executor.errors import ToolpoolError
from executor.events import EventLog
from executor.jobs import end_lost_job
from executor.keys import Keys
from executor.lock import HolderStatus, RWLock, WaiterStatus
from executor.models import ErrorType, ToolResult, ToolStatus
from executor.results import ResultStore
from executor.settings import Settings
from executor.turns import CallJob, job_id

log = logging.getLogger(__name__)

# The environment variable that marks every process a pool's child starts (its value is the
# child's own token), so that the sweep finds them after the child is gone.
TOKEN_ENV = "TOOLPOOL_POOL_CHILD"


@dataclass
class DeadChild:
    """A child that has ended and is not cleaned up yet."""

    name: str
    pid: int
    token: str
    reason: str  # "was killed by signal SIGKILL", "exited with code 1"
    # Its leftover processes killed so far: their lock leases are the child's too.
    killed: set[int] = field(default_factory=set)


class Reaper:
    """Cleans up after dead children: leftover processes, lock leases, the call, RQ's record."""

    def __init__(self, redis_url: str, settings: Settings, host: str) -> None:
        self._settings = settings
        self._host = host
        self._keys = Keys(settings.key_prefix)
        self._client = redis.Redis.from_url(redis_url, socket_timeout=5.0)
        self._results = ResultStore(self._client, self._keys, ttl=settings.result_ttl)
        self._lock = RWLock.from_url(redis_url, settings.scope, keys=self._keys,
                                     lease_ms=settings.lock_lease_ms)  # fmt: skip

    def close(self) -> None:
        self._lock.close()
        self._client.close()

    def registered(self, name: str, pid: int | None) -> bool:
        """Whether RQ knows a live worker ``name`` with process id ``pid``."""
        key = Worker.redis_worker_namespace_prefix + name
        try:
            found, death = self._client.hmget(key, ["pid", "death"])
        except redis.RedisError:
            return False
        return found is not None and death is None and int(found) == pid

    def bury(self, dead: DeadChild) -> bool:
        """Clean up after ``dead``; False if Redis failed (every step may simply be redone)."""
        # First the processes: nothing the child started may run on once its lock is freed.
        dead.killed |= _sweep(dead.token)
        try:
            self._release_leases(dead)
            self._answer_call(dead)
            self._forget_worker(dead.name)
        except (redis.RedisError, ToolpoolError) as exc:
            log.warning("toolpool: cleaning up after worker %s failed, will retry: %s",
                        dead.name, exc)  # fmt: skip
            return False
        return True

    def _release_leases(self, dead: DeadChild) -> None:
        status = self._lock.status()
        entries: list[HolderStatus | WaiterStatus] = [*status.holders, *status.queue]
        for entry in entries:
            owner = entry.owner
            ours = owner.worker == dead.name and owner.host == self._host
            if (
                ours
                and (owner.pid == dead.pid or owner.pid in dead.killed)
                and self._lock.force_release(entry.token)
            ):
                log.info("toolpool: released the %s lock lease of dead worker %s",
                             entry.mode, dead.name)  # fmt: skip

    def _answer_call(self, dead: DeadChild) -> None:
        key = self._keys.worker_current(dead.name)
        raw = self._client.get(key)
        if raw is None:
            return
        try:
            job = CallJob.model_validate_json(raw)
        except ValidationError:
            log.warning("toolpool: unreadable current call of worker %s: %r", dead.name, raw)
            self._client.delete(key)
            return
        call = job.call
        if self._results.get(call.id) is None:
            message = (
                f"The worker running {call.name!r} ({dead.name}, pid {dead.pid}) {dead.reason} "
                "before it stored a result. The call may have run in part; check its effects "
                "before calling it again."
            )
            lost = ToolResult(
                call_id=call.id, name=call.name, status=ToolStatus.ERROR, content=message,
                original_chars=len(message), error_type=ErrorType.WORKER_LOST,
                error_message=message,
            )  # fmt: skip
            if self._results.publish(job.turn_id, lost):
                events = EventLog(self._client, self._keys, maxlen=self._settings.events_maxlen,
                                  worker=dead.name)  # fmt: skip
                events.emit("call_lost", call_id=call.id, turn_id=job.turn_id, tool=call.name,
                            reason=dead.reason, worker_pid=dead.pid, by="pool")  # fmt: skip
                log.warning("toolpool: call %s (%s) of worker %s answered as worker_lost",
                            call.id, call.name, dead.name)  # fmt: skip
        # Even with a stored result, RQ may not have marked the job ended: its dependents
        # would wait for RQ's own cleanup, minutes later.
        end_lost_job(self._client, job_id(job.turn_id, job.index))
        self._client.delete(key)

    def _forget_worker(self, name: str) -> None:
        """Mark RQ's record of the worker dead, or the replacement could not register."""
        worker = Worker.find_by_key(Worker.redis_worker_namespace_prefix + name,
                                    connection=self._client, serializer=JSONSerializer)  # fmt: skip
        if worker is not None:
            worker.register_death()  # type: ignore[no-untyped-call]


def _sweep(token: str) -> set[int]:
    """SIGKILL every process whose environment carries ``token``; return their pids.

    The children's descendants inherit the variable (a bash command runs in a session of its
    own, out of reach of the child's process group). A few passes catch processes forked
    during the previous one.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    needle = f"\0{TOKEN_ENV}={token}\0".encode()
    killed: set[int] = set()
    for _ in range(5):
        found = False
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = b"\0" + (entry / "environ").read_bytes()
            except OSError:
                continue  # gone, or not ours to read
            if needle in environ:
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.add(int(entry.name))
                    found = True
        if not found:
            break
    if killed:
        log.warning("toolpool: killed %d leftover processes of a dead worker: %s", len(killed),
                    sorted(killed))  # fmt: skip
    return killed
