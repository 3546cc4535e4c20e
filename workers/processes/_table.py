"""A session's background processes as the tools see them: start, find, read, type, signal, stop.

Everything goes through the files of the session's host folder (``_place``), so any worker of
the host drives a process another worker started. A record that says "running" whose keeper
is gone is settled as ``lost`` by the first worker that finds it: what the command left in its
cgroups is killed, since no keeper is left to do it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor import ToolError
from executor.contract import SessionPlace, ToolContext
from executor.wire import ProcessRecord
from workers.processes import _place as place
from workers.processes._daemon import KEEPER_OF, daemon_env, start_daemon
from workers.processes._place import STOP_GRACE
from workers.processes._signals import kill_left_in, signal_members

# Finished processes kept (their records and output) beyond the running ones.
KEEP_FINISHED = 32
_POLL = 0.02


@dataclass(frozen=True)
class Entry:
    """One process as found now: its folder, its record, its keeper's pid."""

    folder: Path
    record: ProcessRecord
    keeper: int

    @property
    def running(self) -> bool:
        return self.record.state in ("starting", "running")

    @property
    def output_size(self) -> int:
        try:
            return (self.folder / place.OUTPUT).stat().st_size
        except OSError:
            return 0

    def read(self, offset: int, count: int) -> bytes:
        """Up to ``count`` bytes of its output from byte ``offset``."""
        try:
            with open(self.folder / place.OUTPUT, "rb") as stream:
                stream.seek(offset)
                return stream.read(count)
        except OSError:
            return b""


class ProcessTable:
    """The background processes of the session a call runs in."""

    def __init__(self, session: SessionPlace) -> None:
        self.session = session
        self.folder = session.host_folder

    @classmethod
    def of(cls, ctx: ToolContext) -> ProcessTable:
        """The table of the call's session; ``ToolError`` outside a session."""
        if ctx.session is None:
            raise ToolError(
                f"{ctx.tool_name} works only in a session: a background process belongs to a "
                "session (its folder, its network, its host) and lives until the session ends. "
                "Create one (toolpool session create NAME, or Executor.sessions.create) and "
                "send this call with that session."
            )
        return cls(ctx.session)

    def publish(self, *entries: Entry) -> None:
        """Keep these processes' records, as found now, where every process sees them."""
        for entry in entries:
            publish_entry(entry, self.session.publish)

    # -- finding -------------------------------------------------------------------------

    def all(self) -> list[Entry]:
        """Every process of the session this host keeps, oldest first."""
        return host_entries(self.folder)

    def get(self, process: str) -> Entry:
        """The process ``process`` (``p3`` or ``3``); ``ToolError`` naming the session's."""
        name = process.strip()
        if name.isdigit():
            name = f"p{name}"
        entry = _entry(self.folder / name) if _valid(name) else None
        if entry is None:
            known = [e.record.id for e in self.all()]
            there = f"its processes are {', '.join(known)}" if known else "it has none"
            raise ToolError(
                f"No background process {process!r} in session {self.session.name!r}: {there}. "
                "process_list shows them."
            )
        return entry

    # -- starting ------------------------------------------------------------------------

    def start(self, spec: dict[str, Any], keeper: str) -> Entry:
        """Start a keeper (the module ``keeper``, run with the process's folder) for ``spec``
        (its id is chosen here); the process once it runs."""
        self._forget_finished()
        folder = place.new_process_folder(self.folder)
        spec = {**spec, "id": folder.name, "session": self.session.name, "host": self.session.host}
        place.write_json(folder / place.SPEC, spec)
        argv = [sys.executable, "-m", keeper, str(folder)]
        env = daemon_env({**self.session.redis_env, KEEPER_OF: str(folder)})
        try:
            start_daemon(argv, env, "the background process")
        except ToolError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        entry = _entry(folder)
        if entry is None:
            raise ToolError("the background process started but left no record; try again.")
        return entry

    def _forget_finished(self) -> None:
        finished = [e for e in self.all() if not e.running]
        for entry in finished[: max(0, len(finished) - KEEP_FINISHED + 1)]:
            shutil.rmtree(entry.folder, ignore_errors=True)

    # -- driving ---------------------------------------------------------------------------

    def type(self, entry: Entry, data: bytes) -> None:
        """Type ``data`` into the process's terminal."""
        if not entry.running:
            raise ToolError(_not_running(entry, "take input"))
        try:
            fd = os.open(entry.folder / place.STDIN, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise ToolError(_not_running(entry, f"take input ({exc.strerror})")) from None
        try:
            view = memoryview(data)
            end = time.monotonic() + 5.0
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    if time.monotonic() > end:
                        raise ToolError(
                            f"{entry.record.id} is not reading its input: "
                            f"{len(view)} of {len(data)} bytes could not be typed. Read its "
                            "output (process_output) to see what it waits for."
                        ) from None
                    time.sleep(_POLL)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise ToolError(_not_running(entry, "take input")) from None
            raise
        finally:
            os.close(fd)

    def signal(self, entry: Entry, signum: signal.Signals) -> int:
        """Send ``signum`` to the command's processes; how many got it."""
        if not entry.running:
            raise ToolError(_not_running(entry, f"get {signum.name}"))
        return signal_members(entry.record.pid, signum)

    def stop(self, entry: Entry, reason: str, grace: float = STOP_GRACE) -> Entry:
        """Stop the process (SIGTERM, SIGKILL after ``grace``); its record once it ended."""
        if not entry.running:
            return entry
        ask_stop(entry.folder, entry.keeper, reason, grace)
        return wait_ended(entry, grace + 5.0)


def publish_entry(entry: Entry, publish: Callable[[str, str], bool]) -> bool:
    """Hand ``entry``'s record, with its output counted now, to ``publish(id, json)``."""
    record = entry.record.model_copy(update={"output_bytes": entry.output_size})
    return publish(record.id, record.model_dump_json())


def host_entries(host_folder: Path) -> list[Entry]:
    """Every process a session keeps in ``host_folder`` (one whose keeper died settled)."""
    found = [_entry(folder) for folder in place.process_folders(host_folder)]
    return [entry for entry in found if entry is not None]


def ask_stop(folder: Path, keeper: int, reason: str, grace: float = STOP_GRACE) -> None:
    """Tell the keeper in ``folder`` to stop its process, for ``reason``."""
    # The folder may have gone with its session while its keeper was still exiting: the
    # signal alone stops it (with the default grace); there is no record left for a reason.
    with contextlib.suppress(FileNotFoundError):
        place.write_json(folder / place.STOP, {"reason": reason, "grace": grace})
    if place.daemon_alive(keeper, str(folder)):
        with contextlib.suppress(OSError):
            os.kill(keeper, signal.SIGTERM)


def wait_ended(entry: Entry, seconds: float) -> Entry:
    """The process's entry once its record says it ended (or once ``seconds`` passed)."""
    end = time.monotonic() + seconds
    while True:
        now = _entry(entry.folder) or entry
        if not now.running or time.monotonic() > end:
            return now
        time.sleep(_POLL)


def _entry(folder: Path) -> Entry | None:
    found = place.read_record(folder)
    if found is None:
        return None
    record, keeper = found
    if record.state in ("starting", "running") and not place.daemon_alive(keeper, str(folder)):
        # Read again: the keeper may have written its end just before it exited.
        found = place.read_record(folder)
        if found is None:
            return None
        record, keeper = found
        if record.state in ("starting", "running"):
            record = settle_lost(folder, record, keeper)
    return Entry(folder, record, keeper)


def entry_of(folder: Path) -> Entry | None:
    """The process in ``folder`` as found now (one whose keeper died is settled as lost)."""
    return _entry(folder)


def settle_lost(folder: Path, record: ProcessRecord, keeper: int) -> ProcessRecord:
    """Record as lost a process whose keeper died without recording its end, and kill what
    its command left in its cgroups: nothing else would ever stop those (without the sandbox,
    the keeper's death does not end them; in it, the empty cgroups are removed)."""
    data = place.read_json(folder / place.STATE) or {}
    files = data.get(place.CGROUPS)
    killed = kill_left_in([str(f) for f in files]) if isinstance(files, list) else 0
    reason = "its keeper process ended without a record"
    if killed:
        reason += f"; the {killed} process(es) it left running were killed"
    lost = record.model_copy(update={"state": "lost", "reason": reason, "ended_at": time.time()})
    with contextlib.suppress(OSError):
        place.write_json(
            folder / place.STATE, {**lost.model_dump(), "keeper_pid": keeper, place.CGROUPS: []}
        )
    return lost


def _valid(name: str) -> bool:
    return name[:1] == "p" and name[1:].isdigit()


def _not_running(entry: Entry, what: str) -> str:
    record = entry.record
    return (
        f"{record.id} cannot {what}: it is {record.state} ({record.ending()}). Start it again "
        "with process_start, or read what it wrote with process_output."
    )
