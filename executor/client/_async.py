"""``AsyncExecutor``: the ``Executor`` for asyncio programs, whose event loop must not block.

Agent frameworks are asyncio programs; a blocking ``Executor.run`` would stall their loop for
a whole turn. ``AsyncExecutor`` offers the same operations, awaited: each runs on a thread of
its own pool with an ``Executor`` borrowed for it (an ``Executor`` serves one thread at a
time), so the semantics are ``Executor``'s own — checks, approval, partitioning, order,
outages, events — and the loop only awaits. Cancelling an awaited ``run`` cancels its turn on
the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from executor.client._executor import Executor, Turn
from executor.contract import ToolInfo
from executor.wire import Catalog, ToolCall, ToolResult

T = TypeVar("T")
# Turns waited for at once: each waits on a thread of its own.
DEFAULT_THREADS = 64


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
    ``wait_for_workers``, ...) and ``threads``, the most turns waited for at once.
    ``async with AsyncExecutor(...) as ex: results = await ex.run(calls)``.
    """

    def __init__(self, *args: Any, threads: int = DEFAULT_THREADS, **kwargs: Any) -> None:
        # Made once here, so a bad argument fails now, not in the first turn's thread.
        first = Executor(*args, **kwargs)
        self.settings = first.settings
        self.session = first.session
        made = iter([first])
        self._executors = ExecutorPool(lambda: next(made, None) or Executor(*args, **kwargs))
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="toolpool-async")

    async def __aenter__(self) -> AsyncExecutor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every ``Executor`` made (waits for turns still being waited for)."""
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def _close(self) -> None:
        self._threads.shutdown(wait=True)
        self._executors.close()

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
        turn = await self.submit(calls, session=session)
        try:
            return await self.collect(turn, timeout=timeout)
        except asyncio.CancelledError:
            # The turn must not run on unattended: cancel it, even as this task is cancelled.
            await asyncio.shield(self.cancel(turn))
            raise

    async def submit(
        self, calls: Iterable[ToolCall | dict[str, Any]], *, session: str | None = None
    ) -> Turn:
        """Check, approve and enqueue a turn (``Executor.submit``)."""
        listed = list(calls)
        return await self._call(lambda executor: executor.submit(listed, session=session))

    async def collect(self, turn: Turn | str, *, timeout: float | None = None) -> list[ToolResult]:
        """Await every result of ``turn`` (a ``Turn`` or its id), in order."""
        return await self._call(lambda executor: executor.collect(turn, timeout=timeout))

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
