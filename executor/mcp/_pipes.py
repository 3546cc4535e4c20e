"""stdin and stdout as asyncio pipes for the stdio transport: no thread hop per message.

The SDK's stdio transport reads each line and writes each answer through a worker thread
(``anyio.wrap_file``): three thread hops per call, a good part of what a call through MCP costs
on top of the call itself. When both are pipes or sockets, as they are for a client that
started the server as its subprocess, ``std_pipes`` hands the transport readers and writers
on the event loop's own pipe transports instead. Meanwhile fd 0 reads ``/dev/null`` and fd 1
writes to stderr, as the SDK arranges too: a stray print cannot corrupt the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator

# The longest message line read (a write_file of a large file is one line).
MAX_LINE_BYTES = 256 * 1024 * 1024


class PipeLines:
    """The lines of a pipe, as text, for ``async for`` (the transport's stdin)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class PipeWriter:
    """Text written to a pipe; ``flush`` waits while the reader is behind (its stdout)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> int:
        self._writer.write(text.encode("utf-8"))
        return len(text)

    async def flush(self) -> None:
        await self._writer.drain()


def _pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def std_pipes() -> AsyncIterator[tuple[PipeLines, PipeWriter] | None]:
    """stdin's lines and a stdout writer on the running loop's pipe transports; ``None`` where
    stdin or stdout is no pipe or socket (a terminal, a file), which the loop cannot watch."""
    if not (_pipe_or_socket(0) and _pipe_or_socket(1)):
        yield None
        return
    loop = asyncio.get_running_loop()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
        )
        transports.append(reading)
        writing, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
        )
        transports.append(writing)
        yield PipeLines(reader), PipeWriter(asyncio.StreamWriter(writing, protocol, None, loop))
    finally:
        # The wire back on fd 0 and 1 before the transports close their duplicates (the
        # writer's close still sends what it holds).
        with contextlib.suppress(OSError):
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)
        for transport in transports:
            transport.close()
