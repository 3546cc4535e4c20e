"""What a worker process needs to run calls: lock, results, events, workspace, registry.

``WorkerRuntime.execute`` is the per-call path on a worker: the job's call goes through the
worker's steps (``steps``, listed below) around the steps every run has
(``workers.pipeline._runner.CALL_STEPS``). Whatever happens to the call, a result is stored;
nothing a tool does fails the RQ job.
"""

from __future__ import annotations

from typing import Any

from executor import Settings
from executor._connect import STANDARD, connect
from executor.contract import ToolRegistry, Workspace
from executor.lock import RWLock
from executor.wire import Acks, EventLog, Keys, ResultStore, SessionStore, host_name
from workers.pipeline._barrier import CommitBarrier
from workers.pipeline._chain import CallState, Step, chain
from workers.pipeline._claim import Claim, skip_cancelled
from workers.pipeline._emit import Emit
from workers.pipeline._heartbeat import Heartbeat
from workers.pipeline._keep import FullOutputKeeper
from workers.pipeline._lock import LeaseGuard
from workers.pipeline._lock_loss import LockLoss
from workers.pipeline._run import run
from workers.pipeline._runner import CALL_STEPS
from workers.pipeline._session import EnterSession
from workers.pipeline._store import Store
from workers.pipeline._validate import parse_job


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
        self.keys = Keys(settings.redis.key_prefix)
        self.workspace = Workspace(settings.worker.workspace)
        self.host = host_name(settings.worker.host)
        self.client = connect(redis_url, role=STANDARD)
        self.acks = Acks.of(settings, self.keys).within(STANDARD.socket_timeout)
        self.lock = lock or RWLock.from_url(
            redis_url,
            settings.worker.scope,
            keys=self.keys,
            lease_ms=settings.worker.lock_lease_ms,
            acks=self.acks,
        )
        self.results = ResultStore(
            self.client, self.keys, ttl=settings.worker.result_ttl, acks=self.acks
        )
        self.events = EventLog(
            self.client, self.keys, maxlen=settings.worker.events_maxlen, worker=worker_name
        )
        self.sessions = SessionStore(self.client, self.keys)
        self.store = store = Store(self.results, self.events)
        lock_loss = LockLoss(self.client, self.keys, self.events)
        self._keep = FullOutputKeeper(self.results, settings)
        self._guard = LeaseGuard(
            self.lock,
            self.events,
            settings,
            worker_name=worker_name,
            lock_loss=lock_loss,
            barrier=CommitBarrier(timeout=settings.worker.lock_wait_timeout),
        )
        # The worker's steps, outermost first: each one's code before ``proceed`` runs in this
        # order, its code after it in reverse. So, in time: claim, validate, lock (the lease,
        # then the commit barrier), run (truncate, keep full output), lock loss restated, emit,
        # the one rerun (lock loss), store (with the events and the claim's release, one round
        # trip). The payload is validated first.
        self.steps: tuple[Step, ...] = (
            # claim: one round trip; a second delivery waits; the claim is let go at the end
            Claim(self.client, self.keys, settings, self.events, store, worker_name=worker_name),
            # store: the queued events, the answer once (the first stored result wins), the
            # claim let go: one round trip
            store,
            lock_loss.rerun,  # lock loss: a read-only call that lost its lease runs once more
            # the claim's heartbeat: keep it alive and watch for cancel while a run runs
            Heartbeat(self.client, self.keys, settings, worker_name=worker_name),
            Emit(self.events),  # emit: tool_result, queued to go in before the result
            skip_cancelled,  # claim: a call whose turn was cancelled does not start
            # session: a session's call runs in its folder, lock scope and shell state
            EnterSession(
                self.sessions,
                settings.worker.sessions_root,
                self.host,
                pool_calls=settings.worker.serve_pool_calls,
            ),
            *CALL_STEPS,  # validate, restate (lock loss), lock: the steps of every run
        )
        self._execute = chain(self.steps, run)

    def close(self) -> None:
        """Close this runtime's connections."""
        self.lock.close()
        self.client.close()

    def execute(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run the call in ``payload`` (a ``CallJob``); return the stored result as JSON."""
        job = parse_job(payload)
        state = CallState(
            call=job.call,
            registry=self.registry,
            workspace=self.workspace,
            settings=self.settings,
            job=job,
            keep_full_output=self._keep,
            guard=self._guard.hold,
        )
        return self._execute(state).model_dump(mode="json")
