"""Store: the call's result, once; the first result stored for a call is its answer.

The result goes in one round trip with what must land before or with it: the lease's release
left by the lock step, the events the call queued (its ``tool_result`` among them, so whoever
reads the result finds them) and, on a worker, the release of the call's claim. A worker keeps
trying while Redis does not answer (a result must not be lost to a blip), up to a patience; a
result that comes second (another delivery stored one first) is dropped, with a
``result_dropped`` event, and the stored one is the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import redis
from redis.client import Pipeline

from executor import _texts as texts
from executor._patience import patiently
from executor.wire import CallJob, ErrorType, EventLog, ResultStore, ToolResult
from workers.pipeline._chain import CallState, Closing, Proceed

log = logging.getLogger(__name__)


class JobEnding(Protocol):
    """The queue's bookkeeping of the job whose call is answered (RQ's end of a job that
    ended well): sent after the result, in its round trip."""

    def queue(self, pipe: Pipeline) -> None:
        """Put the commands on ``pipe``."""

    def mark_sent(self) -> None:
        """The round trip came back."""


class Store:
    """Step: store the answer of the steps inside; the stored result is the job's answer."""

    def __init__(self, results: ResultStore, events: EventLog) -> None:
        self._results = results
        self._events = events
        #: The running job's end, taken once by the round trip that stores a result (set by
        #: the worker process, ``executor._rq.worker.ToolpoolWorker.take_end``).
        self.take_end: Callable[[], JobEnding | None] = lambda: None

    def __call__(self, state: CallState, proceed: Proceed) -> ToolResult:
        state.closing = []
        try:
            result = proceed(state)
        except redis.RedisError as exc:
            # A step before the run lost Redis for longer than its patience: the call gets an
            # answer all the same, not the turn's timeout.
            _do_instead(state.closing)
            state.closing = []
            log.warning("toolpool: call %s could not start: %s", state.call.id, exc)
            call = state.call
            message = texts.redis_lost_before_run(call.name, str(exc))
            result = ToolResult.failure(call.id, call.name, ErrorType.UNEXPECTED_ERROR, message)
        except BaseException:
            _do_instead(state.closing)
            raise
        stored, state.claim_released = self._store(
            state.the_job(), result, state.claim_keys, state.closing
        )
        return stored

    def publish(
        self,
        job: CallJob,
        result: ToolResult,
        *,
        release: Sequence[str] = (),
        closing: Sequence[Closing] = (),
    ) -> ToolResult:
        """Store ``result`` unless the call has one; the call's stored result.

        In one round trip: what the steps left (``closing``: the lease's release), the queued
        events, the result, and the ``release`` keys deleted after.
        """
        return self._store(job, result, release, closing)[0]

    def _store(
        self,
        job: CallJob,
        result: ToolResult,
        release: Sequence[str],
        closing: Sequence[Closing],
    ) -> tuple[ToolResult, bool]:
        """``publish``, and whether the ``release`` keys were deleted."""
        released = True
        try:
            first = self._publish_once(job, result, release, closing)
        except redis.RedisError as exc:
            _do_instead(closing)
            # Its events are dropped, as any event Redis does not take; the result is not.
            log.warning("toolpool: storing the result of call %s failed once: %s", job.call.id, exc)
            first = None
        if first is None:
            first = patiently(lambda: self._results.publish(job.turn_id, result, job.then))
            try:
                if release:
                    self._results.client.delete(*release)
            except redis.RedisError:
                released = False  # the claim step tries once more
        if first:
            return result, released
        stored = patiently(lambda: self._results.get(job.call.id))
        self._events.emit(
            "result_dropped", call_id=job.call.id, turn_id=job.turn_id, tool=job.call.name
        )
        return stored or result, released

    def _publish_once(
        self,
        job: CallJob,
        result: ToolResult,
        release: Sequence[str],
        closing: Sequence[Closing],
    ) -> bool | None:
        """One round trip: what the steps left, events, the result, the claim's release; None
        if the publish script must be loaded first (a Redis that restarted)."""
        with self._results.client.pipeline(transaction=False) as pipe:
            readers = [item.queue(pipe) for item in closing]
            written = len(readers) + self._events.flush_into(pipe)
            self._results.publish_into(pipe, job.turn_id, result, job.then)
            if release:
                pipe.delete(*release)
            ending = self.take_end()
            if ending is not None:
                ending.queue(pipe)
            waited = self._results.acks.queue_wait(pipe)
            replies = pipe.execute(raise_on_error=False)
        if ending is not None:
            ending.mark_sent()
        if waited:
            # Not acknowledged: raised before anything is read, so the release of the lease
            # goes again alone (``closing``) and the result is stored again, patiently.
            self._results.acks.check(replies[-1], f"the result of call {job.call.id}")
        for read, reply in zip(readers, replies, strict=False):
            read(reply)
        for reply in replies[len(readers) : written]:
            if isinstance(reply, Exception):
                log.warning("toolpool: could not record an event: %s", reply)
        code = replies[written]
        if isinstance(code, redis.exceptions.NoScriptError):
            return None
        if isinstance(code, Exception):
            raise code
        return self._results.stored(code)


def _do_instead(closing: Sequence[Closing]) -> None:
    """What the steps left, done alone: their round trip with the result did not happen."""
    for item in closing:
        try:
            item.instead()
        except Exception:  # one failing must not keep the others undone
            log.exception("toolpool: closing work of a call failed")
