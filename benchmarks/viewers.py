"""The dashboard benchmark's viewers: a process of plain-socket readers of ``/api/stream``.

Each viewer holds the dashboard's event stream open and counts the ``state`` and ``event``
messages it gets; the parent asks for the counts over a pipe. As cheap a reader as can be, so
that what they cost the machine is little beside the dashboard's own cost.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection

from benchmarks.sides import BenchError, Pool

HOST = "127.0.0.1"
_STATE, _EVENT = b"event: state\n", b"event: event\n"
_ASK_PATIENCE_S = 10.0
_START_PATIENCE_S = 90.0
# The viewers' process outlives its parent's pipe by no more than this.
_VIEWERS_LINGER_S = 600.0


@dataclass
class Tally:
    """The server-sent-event messages one viewer got, by kind, counted in the raw bytes."""

    states: int = 0
    events: int = 0
    _tail: bytes = b""

    def feed(self, data: bytes) -> None:
        text = self._tail + data
        self.states += text.count(_STATE)
        self.events += text.count(_EVENT)
        # A marker split between two reads is counted once whole; the tail is too short to
        # hold a whole one, so none is counted twice.
        self._tail = text[-(len(_STATE) - 1) :]


async def _view(host: str, port: int, tally: Tally, errors: list[str]) -> None:
    """One viewer: ``GET /api/stream`` over a plain socket, read as it comes until it fails or
    ends. As cheap a reader as can be (no HTTP library, no parsing beyond the markers), so
    what the viewers' process costs the machine is little beside the dashboard's cost."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), _ASK_PATIENCE_S
        )
        writer.write(
            f"GET /api/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _ASK_PATIENCE_S)
        if not head.startswith(b"HTTP/1.1 200 "):
            errors.append(f"/api/stream answered {head.splitlines()[0]!r}")
            return
        # The body is chunked, one chunk a message: a marker is never cut by the framing.
        while chunk := await reader.read(65536):
            tally.feed(chunk)
        errors.append("/api/stream: the stream ended")
    except Exception as exc:  # any failure of a viewer is reported, not raised here
        errors.append(f"/api/stream: {exc!r}")


async def _view_all(host: str, port: int, tallies: list[Tally], errors: list[str]) -> None:
    await asyncio.gather(*(_view(host, port, tally, errors) for tally in tallies))


def watch(host: str, port: int, count: int, conn: Connection) -> None:
    """The viewers' process (the target of a spawned process): ``count`` viewers of the
    dashboard at ``host``:``port``;
    each ``"tally"`` sent on ``conn`` is answered with (per viewer (states, events), errors)."""
    tallies = [Tally() for _ in range(count)]
    errors: list[str] = []

    def answer() -> None:
        try:
            while conn.recv() == "tally":
                conn.send(([(t.states, t.events) for t in tallies], list(errors)))
        except (EOFError, OSError):
            pass
        # The parent is done with us (or gone): the viewers end with it.
        os._exit(0)

    answering = threading.Thread(target=answer, name="bench-viewers-answer", daemon=True)
    answering.start()
    asyncio.run(_view_all(host, port, tallies, errors))
    answering.join(_VIEWERS_LINGER_S)  # every viewer failed: answer until the parent asks no more


@dataclass
class Viewers:
    """The viewers' process, as its parent sees it."""

    conn: Connection
    pid: int

    def tally(self) -> list[tuple[int, int]]:
        """Per viewer, the (state, event) messages it got so far; ``BenchError`` if one failed."""
        self.conn.send("tally")
        if not self.conn.poll(_ASK_PATIENCE_S):
            raise BenchError(
                f"the viewers' process (pid {self.pid}) did not answer within {_ASK_PATIENCE_S:g} s"
            )
        counts, errors = self.conn.recv()
        if errors:
            raise BenchError(f"{len(errors)} viewer(s) failed, the first: {errors[0]}")
        return [(int(states), int(events)) for states, events in counts]

    def wait_live(self) -> None:
        """Wait until every viewer got its first message."""
        deadline = time.monotonic() + _START_PATIENCE_S
        while not all(states + events for states, events in self.tally()):
            if time.monotonic() > deadline:
                raise BenchError(f"not every viewer got a message within {_START_PATIENCE_S:g} s")
            time.sleep(0.05)


@contextmanager
def viewers(port: int, count: int) -> Iterator[Viewers]:
    """``count`` viewers of the dashboard on ``port``, in a process of their own, each got a
    message; the process is stopped by its pid after."""
    pool = Pool()
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    try:
        pool.start(watch, HOST, port, count, theirs)
        theirs.close()
        pid = pool.processes[0].pid
        assert pid is not None
        found = Viewers(ours, pid)
        found.wait_live()
        yield found
    finally:
        pool.stop()
        ours.close()
