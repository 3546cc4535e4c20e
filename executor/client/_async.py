"""``AsyncExecutor``: the ``Executor`` for asyncio programs, whose event loop must not block.

Agent frameworks are asyncio programs; a blocking ``Executor.run`` would stall their loop for
a whole turn. ``AsyncExecutor`` offers the same operations, awaited, with ``Executor``'s
semantics (checks, approval, partitioning, order, outages, events):

- waiting for results, where a turn spends its time, is native ``redis.asyncio``: the
  collector's own steps, driven on the loop, so a thousand turns waited for cost no thread;
- submitting, cancelling and reading the catalog, short and built on RQ (which has no
  asyncio API), each take a thread of a small pool, with an ``Executor`` borrowed for it (an
  ``Executor`` serves one thread at a time); so do the collector's once-a-second liveness
  checks.

Cancelling an awaited ``run`` cancels its turn on the pool. Use one ``AsyncExecutor`` from one
event loop (its ``redis.asyncio`` connections belong to the loop that first used them).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from executor.client._collector import LIVENESS_CHECK_S
from executor.client._executor import (
    Executor,
    Turn,
    in_call_order,
    plan_from,
    so_far,
    take_fresh,
)
from executor.client._outage import connect_async, reaching
from executor.contract import ToolInfo
from executor.wire import Catalog, ToolCall, ToolResult, TurnPlan

T = TypeVar("T")
# Submits, cancels and catalog reads at once (waiting for results takes no thread). More
# threads would not submit faster: they contend for the GIL, and with the loop.
DEFAULT_THREADS = 4


class ExecutorPool:
    """``Executor``s lent one thread at a time, made as needed and kept for reuse."""

    def __init__(self, make: Callable[[], Executor]) -> None:
        self._make = make
        self._idle: queue.SimpleQueue[Executor] = queue.SimpleQueue()
        self._all: list[Executor] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Executor]:
        try:
            executor = self._idle.get_nowait()
        except queue.Empty:
            executor = self._make()
            with self._lock:
                self._all.append(executor)
        try:
            yield executor
        except BaseException:
            # A wait cut short may leave a thread still using it: never lend it again.
            with self._lock:
                self._all.remove(executor)
            executor.close()
            raise
        self._idle.put(executor)

    def close(self) -> None:
        with self._lock:
            for executor in self._all:
                executor.close()
            self._all.clear()


class AsyncExecutor:
    """Runs turns of tool calls on toolpool's workers, from an asyncio event loop.

    Takes ``Executor``'s arguments (``settings``, ``session``, ``approve``, ``check``,
    ``wait_for_workers``, ...) and ``threads``, the most submits and cancels under way at once.
    ``async with AsyncExecutor(...) as ex: results = await ex.run(calls)``.
    """

    def __init__(self, *args: Any, threads: int = DEFAULT_THREADS, **kwargs: Any) -> None:
        # Made here, so a bad argument fails now, not in the first turn's thread. It is never
        # lent: its collector waits for every turn, and its log gets their events.
        self._home = Executor(*args, **kwargs)
        self.settings = self._home.settings
        self.session = self._home.session
        url = str(self._home.redis_url)
        self._client = connect_async(url)
        self._blocking = connect_async(url, blocking_s=LIVENESS_CHECK_S)
        self._executors = ExecutorPool(lambda: Executor(*args, **kwargs))
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="toolpool-async")
        self._logging = threading.Lock()

    async def __aenter__(self) -> AsyncExecutor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (waits for submits and cancels under way)."""
        await asyncio.get_running_loop().run_in_executor(None, self._close)
        await self._client.aclose()
        await self._blocking.aclose()

    def _close(self) -> None:
        self._threads.shutdown(wait=True)
        self._executors.close()
        self._home.close()

    async def _call(self, work: Callable[[Executor], T]) -> T:
        def borrowed() -> T:
            with self._executors.borrow() as executor:
                return work(executor)

        return await asyncio.get_running_loop().run_in_executor(self._threads, borrowed)

    async def run(
        self,
        calls: Iterable[ToolCall | dict[str, Any]],
        *,
        timeout: float | None = None,
        session: str | None = None,
    ) -> list[ToolResult]:
        """Submit a turn and await its results, in call order (``Executor.run``). Cancelling
        the awaiting task cancels the turn on the pool."""
        # The submit runs on a thread that a cancel cannot stop: a turn it enqueues after this
        # task was cancelled must be cancelled too, once it exists.
        submitting = asyncio.ensure_future(self.submit(calls, session=session))
        try:
            turn = await asyncio.shield(submitting)
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel_once_submitted(submitting))
            raise
        try:
            return await self.collect(turn, timeout=timeout)
        except asyncio.CancelledError:
            # The turn must not run on unattended: cancel it, even as this task is cancelled.
            await asyncio.shield(self.cancel(turn))
            raise

    async def _cancel_once_submitted(self, submitting: asyncio.Future[Turn]) -> None:
        try:
            turn = await submitting
        except Exception:  # nothing was submitted, or its error is the submit's to report
            return
        await self.cancel(turn)

    async def submit(
        self, calls: Iterable[ToolCall | dict[str, Any]], *, session: str | None = None
    ) -> Turn:
        """Check, approve and enqueue a turn (``Executor.submit``)."""
        listed = list(calls)
        return await self._call(lambda executor: executor.submit(listed, session=session))

    async def collect(self, turn: Turn | str, *, timeout: float | None = None) -> list[ToolResult]:
        """Await every result of ``turn`` (a ``Turn`` or its id), in order (``Executor.collect``:
        the same answers for lost workers, the deadline and outages)."""
        limit = self.settings.client.turn_timeout if timeout is None else timeout
        plan, results = await self._wait(turn, limit, time_out=True)
        return in_call_order(plan, results)

    async def poll(self, turn: Turn | str, *, wait: float = 0.0) -> list[ToolResult | None]:
        """The results of ``turn`` so far, in call order, ``None`` for a call without one yet,
        once all are in or ``wait`` seconds have passed; no call is answered ``timeout``
        (``Executor.poll``)."""
        plan, results = await self._wait(turn, wait, time_out=False)
        return so_far(plan, results)

    async def _wait(
        self, turn: Turn | str, limit: float, *, time_out: bool
    ) -> tuple[TurnPlan, dict[str, ToolResult]]:
        deadline = time.monotonic() + limit
        if isinstance(turn, Turn):
            plan = turn.plan
        else:
            with reaching(self._home.redis_url, f"while loading turn {turn}", turn):
                plan = plan_from(turn, await self._client.get(self._home.keys.turn(turn)))
        results = await self._home.collector.wait_async(
            plan,
            deadline,
            limit,
            self._client,
            self._blocking,
            fresh=take_fresh(turn),
            time_out=time_out,
        )
        if self._home.logs_events and len(results) == len(plan.enqueued()):
            await asyncio.to_thread(self._log_collected, turn)
        return plan, results

    def _log_collected(self, turn: Turn | str) -> None:
        with self._logging:  # one turn's lines at a time
            self._home.log_collected(turn)

    async def cancel(self, turn: Turn | str) -> None:
        """Stop ``turn``: calls not started never run; running ones are stopped."""
        await self._call(lambda executor: executor.cancel(turn))

    async def tools(self, *, session: str | None = None) -> list[ToolInfo]:
        """The tools calls can name (``Executor.tools``)."""
        return await self._call(lambda executor: executor.tools(session=session))

    async def catalog(self, *, session: str | None = None) -> Catalog:
        """The live workers and their tools (``Executor.catalog``)."""
        return await self._call(lambda executor: executor.catalog(session=session))

    async def full_output(self, call_id: str) -> str | None:
        """The whole output of a truncated result, while it is kept."""
        return await self._call(lambda executor: executor.full_output(call_id))
