"""Claim: take the call for this worker in one round trip, and let it go once it is answered.

The start of every job is one pipeline: is the call answered already, mark it this worker's
current job, claim it (a liveness key only one delivery can set; ``workers.pipeline._heartbeat``
renews it), and is its turn cancelled. The store step lets the claim go in the round trip that
stores the result (``CallState.claim_keys``); if it cannot, the claim does it here. A job
delivered again after it was answered gets the stored result; one delivered while its first
delivery still runs waits for that run's result; a call whose turn was cancelled before it
started does not run (``skip_cancelled``).

A failover can drop a claim and put its job back on the queue, so two deliveries may both
have claimed the call. The lock guard settles it under the grant (``CallState.confirm_claim``):
only the delivery whose claim holds runs the tool; the other answers as a second delivery.
"""

from __future__ import annotations

import contextlib
import time

import redis
from redis.client import Pipeline

from executor import Settings
from executor import _texts as texts
from executor._patience import patiently
from executor.wire import CallClaims, CallJob, ClaimHold, ErrorType, EventLog, Keys, ToolResult
from workers.pipeline._chain import CallState, ClaimLost, Proceed
from workers.pipeline._store import Store

# How often a second delivery of a job looks for the first delivery's result.
_DUPLICATE_POLL_S = 0.2
# How long the worker's current-job key lives if the worker dies holding it.
_CURRENT_TTL_S = 24 * 3600


class Claim:
    """Step: claim the call, answer a second delivery, release the claim at the end."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings: Settings,
        events: EventLog,
        store: Store,
        *,
        worker_name: str,
    ) -> None:
        self._client = client
        self._keys = keys
        self._events = events
        self._store = store
        self._worker = worker_name
        self._liveness_ms = int(settings.client.call_liveness_s * 1000)
        self._heartbeat_s = settings.client.call_heartbeat_s
        self._claims = CallClaims(client, keys)

    def __call__(self, state: CallState, proceed: Proceed) -> ToolResult:
        job = state.the_job()
        call = job.call
        current_key = self._keys.worker_current(self._worker)
        running_key = self._keys.running(call.id)
        # One round trip to start: is it answered already, claim it, is it cancelled. With
        # acknowledged writes the claim needs no WAIT of its own: nothing runs before the
        # call's lock grant, whose WAIT covers every write made before it, this claim and RQ's
        # dequeue included.
        existing, claimed, cancel_flag = patiently(
            lambda: self._start(job, current_key, running_key)
        )
        if not claimed and existing is None:
            # A job delivered twice (RQ put it back while its first delivery still runs):
            # it must not run twice, nor answer before the run does (that answer would be
            # stored first, and start the turn's next batch).
            with contextlib.suppress(redis.RedisError):
                self._client.delete(current_key)
            return self._await_other_run(job)
        try:
            if existing is not None:
                # A job delivered again after it was answered: the first stored result stands.
                return ToolResult.model_validate_json(existing)
            if cancel_flag:
                state.cancelled.set()
            state.claim_keys = (current_key, running_key)
            state.confirm_claim = _ClaimAtGrant(self, job)
            return proceed(state)
        except ClaimLost as lost:
            # Another delivery of the call holds its claim (a failover dropped this one's and
            # put the job back), or the call is answered: this delivery ran nothing.
            state.claim_released = True  # the claim is not this delivery's to let go
            with contextlib.suppress(redis.RedisError):
                self._client.delete(current_key)
            if lost.answer is not None:
                return lost.answer
            return self._await_other_run(job)
        finally:
            if not state.claim_released:  # let go with the result, unless that failed
                with contextlib.suppress(redis.RedisError):
                    self._client.delete(current_key, running_key)

    def hold(self, job: CallJob) -> ClaimHold:
        """This worker's claim on ``job``'s call kept (or another's found, or the answer), in
        a round trip of its own."""
        return patiently(
            lambda: self._claims.hold(job.call.id, job.turn_id, self._worker, self._liveness_ms)
        )

    def queue_hold(self, pipe: Pipeline, job: CallJob) -> None:
        """``hold`` put on ``pipe``, for another round trip to carry; read with
        ``CallClaims.read_hold``."""
        self._claims.queue_hold(pipe, job.call.id, job.turn_id, self._worker, self._liveness_ms)

    def _start(
        self, job: CallJob, current_key: str, running_key: str
    ) -> tuple[bytes | None, bool, bool]:
        """The call's stored result, whether this worker holds its claim, whether its turn is
        cancelled. Tried again as a whole when Redis does not answer, so the claim is read
        back rather than taken from SET NX's reply: a try whose reply was lost may have set
        it, and no other delivery runs on this worker."""
        with self._client.pipeline(transaction=False) as pipe:
            pipe.get(self._keys.result(job.call.id))
            pipe.set(current_key, job.model_dump_json(), ex=_CURRENT_TTL_S)
            pipe.set(running_key, self._worker, px=self._liveness_ms, nx=True)
            pipe.get(running_key)
            pipe.exists(self._keys.turn_cancel(job.turn_id))
            existing, _, _, holder, cancel_flag = pipe.execute()
        claimed = holder is not None and _text(holder) == self._worker
        return existing, claimed, bool(cancel_flag)

    def _await_other_run(self, job: CallJob) -> ToolResult:
        """The result of the run another worker holds; ``worker_lost`` if that worker dies."""
        call = job.call
        self._events.emit("call_duplicate", call_id=call.id, turn_id=job.turn_id, tool=call.name)
        gone_since: float | None = None
        while True:
            try:
                with self._client.pipeline(transaction=False) as pipe:
                    pipe.get(self._keys.result(call.id))
                    pipe.exists(self._keys.running(call.id))
                    stored, running = pipe.execute()
            except redis.RedisError:
                # Redis is away: the other run's answer is still to come, so keep waiting.
                gone_since = None
                time.sleep(_DUPLICATE_POLL_S)
                continue
            if stored is not None:
                return ToolResult.model_validate_json(stored)
            now = time.monotonic()
            gone_since = None if running else (gone_since or now)
            # The liveness key's expiry already proves a silent worker; the grace covers one
            # that just stored its result and let go of the key.
            if gone_since is not None and now - gone_since > 2 * self._heartbeat_s:
                message = texts.worker_lost(call.name)
                lost = ToolResult.failure(call.id, call.name, ErrorType.WORKER_LOST, message)
                return self._store.publish(job, lost)
            time.sleep(_DUPLICATE_POLL_S)


def skip_cancelled(state: CallState, proceed: Proceed) -> ToolResult:
    """Step: a call whose turn was cancelled (seen by the claim or the heartbeat) does not run."""
    if state.cancelled.is_set():
        call = state.call
        message = texts.turn_cancelled(call.name)
        return ToolResult.failure(call.id, call.name, ErrorType.CANCELLED, message)
    return proceed(state)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


class _ClaimAtGrant:
    """The claim kept at the lock grant: its ``claim_hold`` rides on the grant's round trip
    (and WAIT); read under the grant. The claim taken at the start may have been dropped by
    a failover since, and taken by another delivery of the same job; the grant serialises
    them. A grant whose ride did not run (a server that lost the script) asks again alone."""

    def __init__(self, claim: Claim, job: CallJob) -> None:
        self._claim = claim
        self._job = job
        self._found: ClaimHold | None = None

    def queue(self, pipe: Pipeline) -> None:
        self._found = None
        self._claim.queue_hold(pipe, self._job)

    def read(self, reply: object) -> None:
        self._found = CallClaims.read_hold(reply)

    def confirm(self, state: CallState) -> None:
        found, self._found = self._found, None
        if found is None:
            found = self._claim.hold(self._job)
        if found.cancelled:
            state.cancelled.set()
        if not found.held:
            raise ClaimLost(found.answer)
