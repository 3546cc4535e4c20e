"""Tools for the distributed proofs, importable by the worker processes the tests start.

Workers load ``tests.support.dist_tools:registry`` (the nine built-in tools plus the test tools
below); ``client_registry`` is what an orchestrator may believe instead, so that a call can pass
the orchestrator's checks and still be refused by the worker (unknown tool, invalid arguments).
``touch_marker`` and ``mark_callback`` are harmless stand-ins for ``os.system`` in the RQ
controls: what a plain RQ worker runs, a toolpool worker must not.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from executor import ToolContext, ToolError, ToolRegistry, tool
from workers import builtin_registry
from workers.tools._atomic import replace_file

# Long enough for a second worker to start its read before the first one answers.
SLOW_READ_MS = 300
# The time limit of ``stall`` and how long it sleeps: ten times over its limit.
STALL_LIMIT_S = 0.5
STALL_SLEEP_S = 5.0


@tool(concurrency_safe=True, read_only=True)
def slow_read(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File to read, relative to the workspace.")],
    delay_ms: Annotated[int, Field(ge=0, le=10_000, description="Pause before reading.")] = (
        SLOW_READ_MS
    ),
    started: Annotated[
        str | None, Field(description="A file to create once the tool runs (for tests).")
    ] = None,
) -> str:
    """Read a text file after a pause, so that parallel reads visibly overlap."""
    if started is not None:
        # The tool_execution_started event comes just before the tool's thread runs; a test
        # that must act while the tool itself runs waits for this file instead.
        Path(started).touch()
    if ctx.cancelled.wait(delay_ms / 1000):
        raise ToolError("slow_read was cancelled before it read the file.")
    target = ctx.workspace.resolve(path)
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolError(f"File not found: {path}. Write it first.") from None


@tool(timeout=STALL_LIMIT_S)
def stall(
    seconds: Annotated[float, Field(gt=0, description="How long to sleep.")] = STALL_SLEEP_S,
) -> str:
    """Sleep far past this tool's own time limit, ignoring cancellation (a runaway tool)."""
    time.sleep(seconds)
    return "woke up"


@tool(concurrency_safe=True, read_only=True)
def echo(text: Annotated[str, Field(description="What to send back.")]) -> str:
    """Return the text unchanged."""
    return text


@tool
def write_then_freeze(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File to write, relative to the workspace.")],
    content: Annotated[str, Field(description="What to write.")],
    pid_file: Annotated[str, Field(description="Absolute path; gets this process's id.")],
) -> str:
    """write_file that stops its own process (SIGSTOP) between the fence check and the rename.

    The worst moment for a pause: the fence has just passed, the rename has not happened. The
    test lets the lease run out, lets another worker take the lock, and then sends SIGCONT.
    """
    passed = ctx.fence

    def fence_then_freeze() -> None:
        passed()
        ctx.fence = passed  # only the first check freezes
        Path(pid_file).write_text(str(os.getpid()))
        # Sent to this thread, the stop takes effect before the thread runs on; sent to the
        # process, another thread may take it while this one reaches the rename.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    ctx.fence = fence_then_freeze
    replace_file(ctx, ctx.workspace.resolve(path), content.encode())
    return f"wrote {path}"


@tool(name="echo", concurrency_safe=True, read_only=True)
def _loose_echo(text: Annotated[Any, Field(description="Anything at all.")] = None) -> str:
    """The orchestrator's looser idea of ``echo``: any argument passes its check."""
    return str(text)


@tool(concurrency_safe=True, read_only=True)
def ghost() -> str:
    """A tool the orchestrator knows and no worker has."""
    return "boo"


def registry() -> ToolRegistry:
    """What the test workers run: the built-in tools and the test tools."""
    return builtin_registry().merged(ToolRegistry([slow_read, stall, echo, write_then_freeze]))


def client_registry() -> ToolRegistry:
    """An orchestrator's registry that disagrees with the workers' (``ghost``, loose ``echo``)."""
    return builtin_registry().merged(ToolRegistry([slow_read, stall, _loose_echo, ghost]))


def touch_marker(path: str) -> str:
    """Create ``path``: proof that a job ran, without running anything harmful."""
    Path(path).touch()
    return path


def mark_callback(job: Any, connection: Any, *args: Any) -> None:
    """An RQ callback that creates the file named in ``job.meta["marker"]``."""
    Path(job.meta["marker"]).touch()
