"""Store: the call's result, once; the first result stored for a call is its answer.

A worker keeps trying while Redis does not answer (a result must not be lost to a blip), up to
a patience; a result that comes second (another delivery stored one first) is dropped, with a
``result_dropped`` event, and the stored one is the answer.
"""

from __future__ import annotations

import time

import redis

from executor.wire import CallJob, EventLog, ResultStore, ToolResult
from workers.pipeline._chain import CallState, Proceed

# How long a worker keeps trying to store a result while Redis does not answer.
_PUBLISH_PATIENCE_S = 30.0
# Pause between two tries.
_RETRY_S = 0.5


class Store:
    """Step: store the answer of the steps inside; the stored result is the job's answer."""

    def __init__(self, results: ResultStore, events: EventLog) -> None:
        self._results = results
        self._events = events

    def __call__(self, state: CallState, proceed: Proceed) -> ToolResult:
        return self.publish(state.the_job(), proceed(state))

    def publish(self, job: CallJob, result: ToolResult) -> ToolResult:
        """Store ``result`` unless the call has one; the call's stored result."""
        deadline = time.monotonic() + _PUBLISH_PATIENCE_S
        while True:
            try:
                if self._results.publish(job.turn_id, result):
                    return result
                stored = self._results.get(job.call.id)
                self._events.emit("result_dropped", call_id=job.call.id, turn_id=job.turn_id,
                                  tool=job.call.name)  # fmt: skip
                return stored or result
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(_RETRY_S)
