"""Background processes of a session: start one, read its output, type into it, stop it, list.

``process_start`` is a tool of its own rather than a ``background`` flag of ``bash``: its
arguments and answer differ (no time limit; a process id and the first output), bash keeps
its promise that nothing it starts outlives the call, and an operator can turn background
processes off alone (``--disable-tool process_start``).

A background process runs like a bash command of the session (same sandbox, limits, working
directory and exported variables, and the session's own network, so its servers are reachable
from the session's later commands on the loopback), on a terminal, until it ends, is stopped,
reaches a limit, or its session or this host's pool ends (``workers.processes``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from typing import Annotated, Literal

from pydantic import Field

from executor import ToolError, WorkspaceError
from executor.contract import ToolContext, tool
from workers.processes._daemon import TOKEN_ENV
from workers.processes._netns import join
from workers.processes._table import Entry, ProcessTable
from workers.tools._shell_settings import BashSettings
from workers.tools.shell import command_environment

# Output bytes a read returns at most; a page stays under the result limit.
PAGE_MAX = 3500
_PAGE_DEFAULT = 2500
_MAX_WAIT = 30.0
# Output that stops arriving for this long counts as "the answer is complete".
_QUIET_S = 0.3
_POLL = 0.02
# Terminal escape sequences (colours, cursor moves) and carriage returns, for the model's view.
_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)|\x1b[@-Z\\-_]")
_PROCESS = Annotated[str, Field(min_length=1, description="The process id, such as p1.")]
_WAIT = Field(ge=0, le=_MAX_WAIT, description="Seconds to wait for output (at most 30).")

SIGNALS = ("TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT", "WINCH")


@tool(settings=BashSettings, timeout=60.0, max_result_chars=4000)
def process_start(
    ctx: ToolContext,
    command: Annotated[
        str,
        Field(min_length=1, description="The command line, run as `bash -c COMMAND`."),
    ],
    wait: Annotated[float, _WAIT] = 1.0,
) -> str:
    """Start a command in the background of the session and return its process id and first
    output. It runs on a terminal until it ends or is stopped, with no time limit; servers
    it starts are reachable from the session's later commands on localhost. Read its output
    with process_output, type into it with process_input, stop it with process_stop."""
    table = ProcessTable.of(ctx)
    if "\x00" in command:
        raise ToolError("command contains a NUL character (\\0), which cannot be passed to bash.")
    settings = ctx.settings_as(BashSettings)
    running = [entry for entry in table.all() if entry.running]
    if len(running) >= settings.background_max:
        listed = ", ".join(f"{e.record.id} ({_short(e.record.command)})" for e in running)
        raise ToolError(
            f"Session {table.session.name!r} already runs {len(running)} background processes, "
            f"the most it may at once (TOOLPOOL_BASH_BACKGROUND_MAX): {listed}. Stop one with "
            "process_stop first; nothing was started."
        )
    executable = shutil.which("bash")
    if executable is None:
        raise ToolError("bash is not available on this worker, so no command can start here.")
    notes: list[str] = []
    network: list[str] = []
    if settings.sandbox != "off" and not settings.network:
        network, why = join(table.folder)
        if why:
            notes.append(
                f"note: {why}; this process has a network of its own, which the session's "
                "other commands cannot reach."
            )
    cwd = _start_dir(ctx)
    env = {**command_environment(os.environ, settings.env), **(ctx.shell.env if ctx.shell else {})}
    env.pop(TOKEN_ENV, None)
    spec = {
        "command": command,
        "argv_tail": [executable, "-c", command],
        "cwd": str(cwd),
        "env": env,
        "workspace": str(ctx.workspace.root),
        "worker_folders": [str(p) for p in ctx.worker_folders],
        "bash": _fields(settings),
        "join_network": network,
        "output_cap": settings.background_output_mb * 1024 * 1024,
        "cpu_seconds": settings.background_cpu_seconds,
    }
    entry = table.start(spec, "workers.tools._keeper")
    entry, data = _answer(ctx, table, entry, 0, wait)
    table.publish(entry)
    head = f"Started background process {entry.record.id} (pid {entry.record.pid}): {command}"
    return "\n".join([head, *_page(entry, 0, data), *notes])


@tool(
    concurrency_safe=True,
    read_only=True,
    settings=BashSettings,
    timeout=60.0,
    max_result_chars=4000,
)
def process_output(
    ctx: ToolContext,
    process: _PROCESS,
    offset: Annotated[
        int, Field(ge=0, description="Byte offset to read from; 0 is the start.")
    ] = 0,
    max_bytes: Annotated[
        int, Field(ge=1, le=PAGE_MAX, description="Most bytes to return (at most 3500).")
    ] = _PAGE_DEFAULT,
    wait: Annotated[float, _WAIT] = 0.0,
) -> str:
    """Read a background process's output (its terminal: stdout and stderr together) from a
    byte offset, a page at a time; with wait, wait that long for output past the offset."""
    table = ProcessTable.of(ctx)
    entry = table.get(process)
    size = entry.output_size
    if offset > size:
        raise ToolError(
            f"offset {offset} is past the end of {entry.record.id}'s output ({size} bytes so "
            f"far); read from an offset between 0 and {size}."
        )
    if wait > 0 and offset == size:
        entry = _wait_for_output(ctx, table, entry, wait)
    data = entry.read(offset, max_bytes)
    table.publish(entry)
    return "\n".join(_page(entry, offset, data))


@tool(settings=BashSettings, timeout=60.0, max_result_chars=4000)
def process_input(
    ctx: ToolContext,
    process: _PROCESS,
    text: Annotated[str, Field(description="What to type (a control character as \\u0003).")],
    enter: Annotated[bool, Field(description="Press Enter after the text.")] = True,
    wait: Annotated[float, _WAIT] = 1.0,
) -> str:
    """Type text into a background process's terminal (a REPL, a prompt) and return what it
    answers within the wait: its output until it is quiet for a moment, or the wait ends."""
    table = ProcessTable.of(ctx)
    entry = table.get(process)
    start = entry.output_size
    table.type(entry, (text + ("\n" if enter else "")).encode())
    entry, data = _answer(ctx, table, entry, start, wait)
    table.publish(entry)
    return "\n".join(_page(entry, start, data))


@tool(settings=BashSettings, timeout=60.0, max_result_chars=4000)
def process_stop(
    ctx: ToolContext,
    process: _PROCESS,
    signal_name: Annotated[
        Literal[SIGNALS],  # type: ignore[valid-type]
        Field(
            alias="signal",
            description="TERM (the default) stops it: SIGTERM, then SIGKILL after 2 s. KILL "
            "stops it at once. Any other is sent to it, and it keeps running unless it ends.",
        ),
    ] = "TERM",
) -> str:
    """Stop a background process of the session, or send it a signal; say how it ended."""
    table = ProcessTable.of(ctx)
    entry = table.get(process)
    if signal_name in ("TERM", "KILL"):
        if not entry.running:
            return _summary(entry) + " (it had already ended; nothing was sent)"
        grace = 0.0 if signal_name == "KILL" else None
        reason = f"stopped by process_stop (SIG{signal_name})"
        ended = table.stop(entry, reason) if grace is None else table.stop(entry, reason, grace)
        table.publish(ended)
        return _summary(ended)
    signum = signal.Signals[f"SIG{signal_name}"]
    sent = table.signal(entry, signum)
    time.sleep(0.1)  # let it act on the signal before its state is read
    now = table.get(process)
    table.publish(now)
    return f"Sent SIG{signal_name} to {sent} process(es) of {entry.record.id}. " + _summary(now)


@tool(concurrency_safe=True, read_only=True, settings=BashSettings)
def process_list(ctx: ToolContext) -> str:
    """List the session's background processes: id, state, age, how each ended, command."""
    table = ProcessTable.of(ctx)
    entries = table.all()
    table.publish(*entries)
    settings = ctx.settings_as(BashSettings)
    if not entries:
        return (
            f"Session {table.session.name!r} has no background processes on this host "
            "(start one with process_start)."
        )
    running = sum(1 for e in entries if e.running)
    lines = [
        f"{len(entries)} background process(es) in session {table.session.name!r}, {running} "
        f"running (at most {settings.background_max} at once):"
    ]
    for entry in entries:
        record = entry.record
        how = record.ending() or f"pid {record.pid}"
        lines.append(
            f"{record.id}  {record.state:<8} {_age(record.age_s):>7}  {how}; "
            f"{entry.output_size} bytes of output; {_short(record.command, 80)}"
        )
    return "\n".join(lines)


PROCESS_TOOLS = (process_start, process_output, process_input, process_stop, process_list)


# -- helpers -------------------------------------------------------------------------------


def _answer(
    ctx: ToolContext, table: ProcessTable, entry: Entry, start: int, wait: float
) -> tuple[Entry, bytes]:
    """Wait up to ``wait`` s for output past ``start`` to arrive and then pause; read it."""
    end = time.monotonic() + min(wait, max(0.0, ctx.remaining() - 5.0))
    size, quiet_since = entry.output_size, time.monotonic()
    while time.monotonic() < end and not ctx.cancelled.is_set():
        now = table.get(entry.record.id)
        entry = now
        if now.output_size != size:
            size, quiet_since = now.output_size, time.monotonic()
        elif size > start and time.monotonic() - quiet_since >= _QUIET_S:
            break
        if not now.running:
            break
        time.sleep(_POLL)
    return entry, entry.read(start, PAGE_MAX)


def _wait_for_output(ctx: ToolContext, table: ProcessTable, entry: Entry, wait: float) -> Entry:
    """The entry once it has output past what it had, or ended, or ``wait`` s passed."""
    end = time.monotonic() + min(wait, max(0.0, ctx.remaining() - 5.0))
    size = entry.output_size
    while time.monotonic() < end and not ctx.cancelled.is_set():
        entry = table.get(entry.record.id)
        if entry.output_size > size or not entry.running:
            break
        time.sleep(_POLL)
    return entry


def _page(entry: Entry, offset: int, data: bytes) -> list[str]:
    """The lines of an answer that shows ``data``, read from ``offset``, and what follows."""
    size = entry.output_size
    end = offset + len(data)
    lines = [_summary(entry)]
    if data:
        lines.append(f"output bytes {offset}-{end} of {size}:")
        lines.append(_clean(data))
    else:
        lines.append(f"no output past byte {offset} (of {size}).")
    if end < size:
        lines.append(
            f"({size - end} more bytes: read on with process_output(process="
            f"{entry.record.id!r}, offset={end}))"
        )
    elif entry.running:
        lines.append(f"(the end so far; later output starts at offset {end})")
    return lines


def _summary(entry: Entry) -> str:
    record = entry.record
    if entry.running:
        return f"{record.id} is running (pid {record.pid}, for {_age(record.age_s)})."
    return f"{record.id} is {record.state}: {record.ending()} (after {_age(record.age_s)})."


def _clean(data: bytes) -> str:
    text = _ESCAPES.sub(b"", data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return text.decode(errors="replace").rstrip("\n")


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _short(command: str, most: int = 40) -> str:
    line = " ".join(command.split())
    return line if len(line) <= most else line[: most - 1] + "…"


def _start_dir(ctx: ToolContext) -> str:
    """Where the session's last command ended, as bash would start; else the folder."""
    root = ctx.workspace.root
    if ctx.shell is None:
        return str(root)
    try:
        start = ctx.workspace.resolve(ctx.shell.cwd)
    except WorkspaceError:
        return str(root)
    return str(start if start.is_dir() else root)


def _fields(settings: BashSettings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}
