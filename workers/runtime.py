"""What a worker process needs to run calls: lock, results, events, workspace, registry.

``WorkerRuntime.execute`` is the per-call path on a worker: it takes the call from the job,
runs it through ``executor.runner.run_call`` with a guard that holds the distributed lock
(shared for concurrency-safe tools, exclusive for the rest), keeps the full output of a
truncated result, stores the result once, and emits events. Whatever happens to the call,
a result is stored; nothing a tool does fails the RQ job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis
from pydantic import ValidationError

from executor.commit import commit_barrier
from executor.contract import Tool
from executor.errors import FenceError
from executor.events import EventLog
from executor.keys import Keys
from executor.lock import EXCLUSIVE, SHARED, Lease, LockError, LockTimeout, OwnerInfo, RWLock
from executor.models import ErrorType, ToolCall, ToolResult
from executor.registry import ToolRegistry
from executor.results import ResultStore
from executor.runner import CallEnvironment, Held, run_call
from executor.settings import Settings
from executor.truncation import truncate
from executor.turns import CallJob
from executor.workspace import Workspace

log = logging.getLogger(__name__)

# Longest string argument an event carries (the call itself keeps the whole).
_EVENT_ARGUMENT_CHARS = 2000
# How long a worker keeps trying to store a result while Redis does not answer.
_PUBLISH_PATIENCE_S = 30.0
# How often a second delivery of a job looks for the first delivery's result.
_DUPLICATE_POLL_S = 0.2


class WorkerRuntime:
    """Everything one worker process shares across the calls it runs."""

    def __init__(
        self,
        redis_url: str,
        settings: Settings,
        registry: ToolRegistry,
        *,
        worker_name: str,
        lock: RWLock | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.worker_name = worker_name
        self.keys = Keys(settings.key_prefix)
        self.workspace = Workspace(settings.workspace)
        self.client = redis.Redis.from_url(redis_url)
        self.lock = lock or RWLock.from_url(
            redis_url, settings.scope, keys=self.keys, lease_ms=settings.lock_lease_ms
        )
        self.results = ResultStore(self.client, self.keys, ttl=settings.result_ttl)
        self.events = EventLog(
            self.client, self.keys, maxlen=settings.events_maxlen, worker=worker_name
        )
        self._liveness_ms = int(settings.call_liveness_s * 1000)
        self._heartbeat = _Heartbeat(self)

    def close(self) -> None:
        """Close this runtime's connections."""
        self.lock.close()
        self.client.close()

    def execute(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run the call in ``payload`` (a ``CallJob``); return the stored result as JSON."""
        try:
            job = CallJob.model_validate(payload)
        except ValidationError as exc:
            # Only someone writing jobs by hand gets here; there is no call id to answer to.
            log.error("toolpool: refusing a malformed job payload: %s", exc)
            raise ValueError(f"Malformed toolpool job payload: {exc}") from None
        call = job.call
        current_key, running_key = (
            self.keys.worker_current(self.worker_name),
            self.keys.running(call.id),
        )
        # One round trip to start: is it answered already, claim it, is it cancelled.
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.result(call.id))
            pipe.set(current_key, job.model_dump_json(), ex=24 * 3600)
            pipe.set(running_key, self.worker_name, px=self._liveness_ms, nx=True)
            pipe.exists(self.keys.turn_cancel(job.turn_id))
            existing, _, claimed, cancel_flag = pipe.execute()
        if not claimed and existing is None:
            # A job delivered twice (RQ put it back while its first delivery still runs):
            # it must not run twice, nor end before the run does (its dependents would start).
            with contextlib.suppress(redis.RedisError):
                self.client.delete(current_key)
            return self._await_other_run(job).model_dump(mode="json")
        try:
            if existing is not None:
                # A job delivered again after it was answered: the first stored result stands.
                return ToolResult.model_validate_json(existing).model_dump(mode="json")
            cancelled = threading.Event()
            if cancel_flag:
                cancelled.set()
            with self._heartbeat.watching(job, cancelled):
                result = self._run(job, cancelled)
            if self._rerun_allowed(job, result):
                # A read-only call changed nothing, so running it again under a new lease is
                # safe and gives the model a consistent answer instead of "call it again".
                self.events.emit("call_rerun", call_id=call.id, turn_id=job.turn_id,
                                 tool=call.name, reason=result.error_type)  # fmt: skip
                cancelled = threading.Event()
                with self._heartbeat.watching(job, cancelled):
                    result = self._run(job, cancelled)
            return self._publish(job, result).model_dump(mode="json")
        finally:
            with contextlib.suppress(redis.RedisError):
                self.client.delete(current_key, running_key)

    def _await_other_run(self, job: CallJob) -> ToolResult:
        """The result of the run another worker holds; ``worker_lost`` if that worker dies."""
        call = job.call
        self.events.emit("call_duplicate", call_id=call.id, turn_id=job.turn_id, tool=call.name)
        gone_since: float | None = None
        while True:
            try:
                with self.client.pipeline(transaction=False) as pipe:
                    pipe.get(self.keys.result(call.id))
                    pipe.exists(self.keys.running(call.id))
                    stored, running = pipe.execute()
            except redis.RedisError:
                # Failing the job would start its dependents before the other run answers.
                gone_since = None
                time.sleep(_DUPLICATE_POLL_S)
                continue
            if stored is not None:
                return ToolResult.model_validate_json(stored)
            now = time.monotonic()
            gone_since = None if running else (gone_since or now)
            # The liveness key's expiry already proves a silent worker; the grace covers one
            # that just stored its result and let go of the key.
            if gone_since is not None and now - gone_since > 2 * self.settings.call_heartbeat_s:
                message = (
                    f"The worker running {call.name!r} stopped before it stored a result. The "
                    "call may have run in part; check its effects before calling it again."
                )
                lost = ToolResult.failure(call.id, call.name, ErrorType.WORKER_LOST, message)
                return self._publish(job, lost)
            time.sleep(_DUPLICATE_POLL_S)

    def _rerun_allowed(self, job: CallJob, result: ToolResult) -> bool:
        """Whether a read-only call that lost its lease may run once more (never twice)."""
        if result.error_type is not ErrorType.LOCK_LOST:
            return False
        if job.call.name not in self.registry or not self.registry.get(job.call.name).is_read_only:
            return False
        try:
            return not self.client.exists(self.keys.turn_cancel(job.turn_id))
        except redis.RedisError:
            return False  # Redis is away: the lock could not be had again anyway

    def _run(self, job: CallJob, cancelled: threading.Event) -> ToolResult:
        call = job.call
        if cancelled.is_set():
            result = _cancelled(call)
        else:
            env = CallEnvironment(
                workspace=self.workspace,
                settings=self.settings,
                cancelled=cancelled,
                keep_full_output=self._keep_full_output,
                guard=lambda tool, c: self._guard(tool, c, job.turn_id, cancelled),
            )
            result = run_call(call, self.registry, env)
        self.events.defer(
            "tool_result", call_id=call.id, turn_id=job.turn_id, tool=call.name,
            duration_ms=result.duration_ms, status=result.status.value,
            error_type=result.error_type.value if result.error_type else None,
            truncated=result.truncated,
        )  # fmt: skip
        # The events go before the result, so whoever reads the result finds them too.
        self.events.flush()
        return result

    @contextlib.contextmanager
    def _guard(
        self, tool: Tool, call: ToolCall, turn_id: str, cancelled: threading.Event
    ) -> Iterator[Held]:
        mode = SHARED if tool.is_concurrency_safe else EXCLUSIVE
        owner = OwnerInfo.current(worker=self.worker_name, call_id=call.id, tool=tool.name)
        started = time.monotonic()
        try:
            lease = self.lock.acquire(mode, timeout=0, owner=owner)
        except LockTimeout:
            self.events.emit("lock_wait", call_id=call.id, turn_id=turn_id, tool=tool.name,
                             mode=mode)  # fmt: skip
            lease = self.lock.acquire(mode, timeout=self.settings.lock_wait_timeout, owner=owner)
        try:
            # A commit of a holder whose lease just ended may still be in flight (it undoes
            # itself if so): this call must see the workspace after it, not during it.
            commit_barrier(self.workspace.root, timeout=self.settings.lock_wait_timeout)
        except BaseException:
            with contextlib.suppress(redis.RedisError, LockError):
                lease.release()
            raise
        waited_ms = round((time.monotonic() - started) * 1000, 3)

        def lost(held: Lease) -> None:
            cancelled.set()
            self.events.emit("lock_lost", call_id=call.id, turn_id=turn_id, tool=tool.name,
                             mode=mode, fence=held.fence, reason=held.lost_reason)  # fmt: skip

        lease.on_lost(lost)
        self.events.defer(
            "lock_acquired", call_id=call.id, turn_id=turn_id, tool=tool.name, mode=mode,
            fence=lease.fence, waited_ms=waited_ms,
        )  # fmt: skip
        self.events.defer("tool_execution_started", call_id=call.id, turn_id=turn_id,
                          tool=tool.name, arguments=_brief(call.arguments))  # fmt: skip
        self.events.flush()
        try:
            yield _LeaseHeld(lease)
        finally:
            released = False
            # Stamped before the release is sent: the event's ts comes after it, when the next
            # holder may already have the lock, so only this time bounds the hold from inside.
            released_at = time.time()
            try:
                released = lease.release()
            except (redis.RedisError, LockError) as exc:
                # The call has run: a release that fails must not turn its result into "did
                # not run". The lease ends by itself when it expires.
                log.warning("toolpool: could not release lease %s: %s", lease.token, exc)
            self.events.defer("lock_released", call_id=call.id, turn_id=turn_id, tool=tool.name,
                              mode=mode, fence=lease.fence, held=released,
                              released_at=released_at)  # fmt: skip

    def _keep_full_output(self, call: ToolCall, text: str) -> str | None:
        try:
            return self.results.keep_full_output(
                call.id, text, ttl=self.settings.full_output_ttl,
                max_bytes=self.settings.full_output_max_bytes,
            )  # fmt: skip
        except redis.RedisError as exc:
            log.warning("toolpool: could not keep the full output of %s: %s", call.id, exc)
            return None

    def _publish(self, job: CallJob, result: ToolResult) -> ToolResult:
        deadline = time.monotonic() + _PUBLISH_PATIENCE_S
        while True:
            try:
                if self.results.publish(job.turn_id, result):
                    return result
                stored = self.results.get(job.call.id)
                self.events.emit("result_dropped", call_id=job.call.id, turn_id=job.turn_id,
                                 tool=job.call.name)  # fmt: skip
                return stored or result
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


class _LeaseHeld:
    """The runner's view of a lease: a fence to check before side effects, and loss."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self.committed = False

    def check_fence(self) -> None:
        if self._lease.fence is not None:
            self._lease.assert_fenced()
        elif self._lease.lost:
            raise FenceError(f"The shared lock was lost ({self._lease.lost_reason}).")
        self.committed = True

    @property
    def lost(self) -> bool:
        return self._lease.lost


class _Heartbeat:
    """One thread per worker process: renew the running call's liveness, watch for cancel.

    One thread for the process rather than one per call: a thread start and join on every
    call costs more than the call itself under load. A forked work horse starts its own.
    """

    def __init__(self, runtime: WorkerRuntime) -> None:
        self._client = runtime.client
        self._keys = runtime.keys
        self._worker = runtime.worker_name
        self._interval = runtime.settings.call_heartbeat_s
        self._ttl_ms = int(runtime.settings.call_liveness_s * 1000)
        self._lock = threading.Lock()
        self._watched: tuple[CallJob, threading.Event] | None = None
        self._thread_pid: int | None = None

    @contextlib.contextmanager
    def watching(self, job: CallJob, cancelled: threading.Event) -> Iterator[None]:
        """Keep ``job`` alive and ``cancelled`` up to date while the block runs."""
        with self._lock:
            self._watched = (job, cancelled)
            if self._thread_pid != os.getpid():
                self._thread_pid = os.getpid()
                threading.Thread(target=self._loop, name="toolpool-heartbeat",
                                 daemon=True).start()  # fmt: skip
        try:
            yield
        finally:
            with self._lock:
                self._watched = None

    def _loop(self) -> None:
        while True:
            time.sleep(self._interval)
            # Under the lock, so a beat never renews a call that has just ended.
            with self._lock:
                if self._watched is not None:
                    self._beat(*self._watched)

    def _beat(self, job: CallJob, cancelled: threading.Event) -> None:
        try:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.set(self._keys.running(job.call.id), self._worker, px=self._ttl_ms)
                pipe.exists(self._keys.turn_cancel(job.turn_id))
                _, cancel = pipe.execute()
            if cancel:
                cancelled.set()
        except redis.RedisError as exc:
            log.warning("toolpool: call heartbeat failed: %s", exc)


def _brief(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments for an event: long strings cut, so a 10 MB write does not fill the stream."""
    return {
        name: truncate(value, _EVENT_ARGUMENT_CHARS).text if isinstance(value, str) else value
        for name, value in arguments.items()
    }


def _cancelled(call: ToolCall) -> ToolResult:
    message = f"{call.name!r} did not run: its turn was cancelled."
    return ToolResult.failure(call.id, call.name, ErrorType.CANCELLED, message)
