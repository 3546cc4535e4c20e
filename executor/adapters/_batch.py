"""One pool turn for the tool calls an agent framework starts together.

Frameworks run a model response's tool calls as concurrent asyncio tasks, one call each. Sent
one by one, they would be separate turns with no order between them: a write and a read of
the same file could run in either order. ``TurnBatcher`` gathers the calls that reach it
while the event loop is still starting them (no new call for a few loop iterations, or a
short wall-clock bound) and sends them as one turn, in the order they arrived, which is the
order the framework started them: the turn's partitioning then runs reads together and
writes alone, in that order, as for any turn.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from executor.client import AsyncExecutor
from executor.wire import ToolCall, ToolResult, parse_call

# Loop iterations without a new call after which the batch is taken to be complete: the
# framework starts a response's tasks in one iteration and each reaches its tool within a few.
QUIET_ITERATIONS = 3
# The longest a call waits for more to join it, should the loop never go quiet.
MAX_GATHER_S = 0.05


@dataclass
class _Batch:
    """Calls gathered for one turn, and the future their results come on."""

    results: asyncio.Future[list[ToolResult]]
    calls: list[ToolCall] = field(default_factory=list)
    waiting: int = 0
    sent: asyncio.Task[None] | None = None


class TurnBatcher:
    """Sends the calls that arrive together as one turn of ``executor`` (in ``session``).

    ``await batcher.call(name, arguments, call_id)`` answers one call. Every call gets a fresh
    pool call id (the framework's id, made unique): frameworks and scripted models reuse
    ids across runs, and the pool refuses an id another turn holds.
    """

    def __init__(
        self, executor: AsyncExecutor, *, session: str | None = None, timeout: float | None = None
    ) -> None:
        self.executor = executor
        self.session = session
        self.timeout = timeout
        self._open: _Batch | None = None
        #: The calls of each turn sent so far, for those who want to see how they went.
        self.turns: list[list[ToolCall]] = []

    async def call(
        self, name: str, arguments: dict[str, object] | str, call_id: str | None = None
    ) -> ToolResult:
        """Run one call on the pool, in a turn with the calls that arrive with it."""
        # parse_call keeps arguments that are not a JSON object, for the pool to answer.
        unique = f"{(call_id or 'call')[:150]}-{uuid.uuid4().hex[:12]}"
        call = parse_call({"id": unique, "name": name, "arguments": arguments})
        batch = self._open
        if batch is None:
            batch = self._open = _Batch(asyncio.get_running_loop().create_future())
            batch.sent = asyncio.create_task(self._send_when_gathered(batch))
        index = len(batch.calls)
        batch.calls.append(call)
        batch.waiting += 1
        try:
            results = await asyncio.shield(batch.results)
        except asyncio.CancelledError:
            # The turn runs on for the calls still awaited; once none is, it is cancelled.
            batch.waiting -= 1
            if batch.waiting == 0:
                if self._open is batch:
                    self._open = None  # a later call must not join a batch nobody waits for
                if batch.sent is not None:
                    batch.sent.cancel()
                    # The turn's cancel reaches the pool before its last caller leaves: the
                    # framework may close the executor next.
                    await asyncio.wait([batch.sent])
            raise
        return results[index]

    async def _send_when_gathered(self, batch: _Batch) -> None:
        started, quiet, seen = time.monotonic(), 0, 0
        while quiet < QUIET_ITERATIONS and time.monotonic() - started < MAX_GATHER_S:
            await asyncio.sleep(0)
            quiet = quiet + 1 if len(batch.calls) == seen else 0
            seen = len(batch.calls)
        self._open = None  # a call from now on starts the next turn
        self.turns.append(list(batch.calls))
        try:
            results = await self.executor.run(
                batch.calls, session=self.session, timeout=self.timeout
            )
        except asyncio.CancelledError:
            batch.results.cancel()
            raise
        except Exception as exc:  # each call's awaiter raises it: no call is left unanswered
            batch.results.set_exception(exc)
            return
        batch.results.set_result(results)
