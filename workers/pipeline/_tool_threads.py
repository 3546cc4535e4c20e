"""Threads that run tools: kept and reused, since starting one a call costs more than a call.

A tool runs in a thread so that the call can answer at its time limit even if the tool does
not return. A thread whose tool returned goes back to the idle ones; one whose tool is stuck
past its limit is simply never handed another task (it ends when its tool does), and the next
call gets another thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# Idle threads kept; more are let go (only calls run at once in one process need more).
_KEEP_IDLE = 2


class Task:
    """One tool run handed to a thread; ``wait`` for it like a thread's ``join``."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.work = work
        self.done = threading.Event()

    def wait(self, timeout: float | None) -> bool:
        """True once the work returned (or raised); False if it still runs at ``timeout``."""
        return self.done.wait(timeout)


class ToolThreads:
    """Hands each task to an idle thread, or to a new one when none is idle."""

    def __init__(self, name: str = "toolpool-tool") -> None:
        self._name = name
        self._guard = threading.Lock()
        self._idle: list[queue.SimpleQueue[Task]] = []
        self._pid = os.getpid()
        self._count = 0

    def start(self, work: Callable[[], None]) -> Task:
        """Run ``work`` in a thread now (what it raises is logged, not raised)."""
        task = Task(work)
        with self._guard:
            if self._pid != os.getpid():  # a forked child has none of its parent's threads
                self._pid, self._idle = os.getpid(), []
            if self._idle:
                inbox = self._idle.pop()
            else:
                inbox = queue.SimpleQueue()
                self._count += 1
                threading.Thread(
                    target=self._serve,
                    args=(inbox,),
                    daemon=True,
                    name=f"{self._name}-{self._count}",
                ).start()
        inbox.put(task)
        return task

    def idle(self) -> int:
        """How many threads wait for a task."""
        with self._guard:
            return len(self._idle)

    def _serve(self, inbox: queue.SimpleQueue[Task]) -> None:
        keep = True
        while keep:
            task = inbox.get()
            try:
                task.work()
            except BaseException:  # the thread must live on to serve the next task
                log.exception("toolpool: a tool thread's task raised")
            finally:
                # Idle again before the caller hears of it, so its next call reuses this one.
                with self._guard:
                    keep = len(self._idle) < _KEEP_IDLE and self._pid == os.getpid()
                    if keep:
                        self._idle.append(inbox)
                task.done.set()
