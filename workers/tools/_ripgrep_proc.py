"""rg processes for grep: start several, read the lines each prints as they come, stop them.

Each process prints ``path NUL line:column:text`` lines (``--null --line-number --column``);
each ``RgProcess`` keeps the lines it has printed, with their sort keys, and what it wrote to
stderr. ``RgProcesses.step`` reads from every running process at once, for a moment; it
raises ``RgOverBudget`` when the call's budget is spent and ``SearchCancelled`` when the call
is cancelled. Whatever happens, ``RgProcesses.close`` kills and reaps every process it
started.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workers.tools._grep_proc import SearchCancelled, SearchFailed, SearchOverBudget
from workers.tools._grep_search import GREP_MAX_MATCHES, cut_line

_POLL_S = 0.05
_READ_BYTES = 1 << 16

# A matching line: its sort key (the path's parts, see ``path_key``), number and text.
Line = tuple[tuple[bytes, ...], int, str]


class RgOverBudget(SearchOverBudget):
    """rg ran out of time: a tree too large rather than a regex that backtracks."""


class RegexRejected(Exception):
    """rg refused the regex (too large for its engine, say); the message says why."""


def path_key(relative: bytes) -> tuple[bytes, ...]:
    """Sorts paths as rg's ``--sort path`` walk meets them: folder by folder, each name byte
    by byte (so a name that is not UTF-8 sorts the same in every run)."""
    return tuple(relative.split(b"/"))


@dataclass(eq=False)
class RgProcess:
    """One rg process and what it has printed so far.

    ``prefix`` is cut from the front of each path printed; a line whose key ``keep`` refuses
    is dropped, and so is every line past the first ``limit`` kept (the caller stops the
    process there: they would not be read). ``ended`` once its output has ended and it has
    been reaped; ``stopped`` if it was killed before it ended.
    """

    process: subprocess.Popen[bytes]
    prefix: bytes
    keep: Callable[[tuple[bytes, ...]], bool] | None
    limit: int
    lines: list[Line] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ended: bool = False
    stopped: bool = False
    _pending: dict[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pipe in (self.process.stdout, self.process.stderr):
            assert pipe is not None
            self._pending[pipe.fileno()] = b""

    def streams(self) -> list[int]:
        """The file descriptors of its stdout and stderr."""
        out, err = self.process.stdout, self.process.stderr
        assert out is not None
        assert err is not None
        return [out.fileno(), err.fileno()]

    def failure(self) -> Exception | None:
        """What a run that ended on its own went wrong with, if it printed no line (rg says
        2 for an error, as for a folder it could not read, even when it found lines)."""
        code = self.process.returncode
        if self.stopped or code in (0, 1):
            return None
        if code != 2:
            return SearchFailed(f"rg ended with status {code}")
        if self.lines:
            return None
        message = " ".join(self.errors).strip()
        if "regex" in message:
            return RegexRejected(message)
        return SearchFailed(f"rg failed: {message or 'exit status 2'}")

    def feed(self, fd: int, chunk: bytes) -> bool:
        """Take what was read from its stdout or stderr (``b""``: that stream has ended);
        True once both have ended."""
        if not chunk:
            rest = self._pending.pop(fd)
            lines = [rest] if rest else []
        else:
            *lines, self._pending[fd] = (self._pending[fd] + chunk).split(b"\n")
        out = self.process.stdout
        assert out is not None
        for line in lines:
            if fd == out.fileno():
                self._match(line)
            elif line.strip():
                self.errors.append(line.decode("utf-8", errors="replace"))
        return not self._pending

    def _match(self, line: bytes) -> None:
        if len(self.lines) >= self.limit:
            return
        path, _, rest = line.partition(b"\x00")
        number, _, rest = rest.partition(b":")
        column, _, raw = rest.partition(b":")
        if not number.isdigit() or not column.isdigit():
            return  # not a match line (rg prints none other with these flags)
        key = path_key(path.removeprefix(self.prefix).replace(os.sep.encode(), b"/"))
        if self.keep is not None and not self.keep(key):
            return
        text = raw.decode("utf-8", errors="replace").rstrip()
        at = len(raw[: int(column) - 1].decode("utf-8", errors="replace"))
        self.lines.append((key, int(number), cut_line(text, at)))


class RgProcesses:
    """The rg processes of one search, read together, within one budget."""

    def __init__(self, budget: float, cancelled: threading.Event, *, current: str = "") -> None:
        self.budget = budget
        self.deadline = time.monotonic() + budget
        self._cancelled = cancelled
        self._current = current
        self._running: dict[int, RgProcess] = {}  # by file descriptor, two per process
        self._selector = selectors.DefaultSelector()
        self._all: list[RgProcess] = []

    def __enter__(self) -> RgProcesses:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start(
        self,
        command: list[str],
        *,
        prefix: bytes,
        stdin: int | None = None,
        cwd: str | None = None,
        keep: Callable[[tuple[bytes, ...]], bool] | None = None,
        limit: int,
    ) -> RgProcess:
        """Start rg with ``command``; its lines (the first ``limit``) are read by ``step``."""
        try:
            process = subprocess.Popen(
                command,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
            )
        except OSError as exc:
            raise SearchFailed(f"cannot start rg ({exc.strerror})") from None
        run = RgProcess(process, prefix, keep, limit)
        self._all.append(run)
        for fd in run.streams():
            self._running[fd] = run
            self._selector.register(fd, selectors.EVENT_READ)
        return run

    @property
    def running(self) -> int:
        """How many processes have not ended."""
        return sum(1 for run in self._all if not run.ended)

    def step(self, until: float | None = None) -> bool:
        """Read what the processes print for a moment (at most until the monotonic time
        ``until``); a process whose output has ended is reaped and marked ``ended``. True if
        anything was read."""
        if self._cancelled.is_set():
            raise SearchCancelled
        now = time.monotonic()
        left = self.deadline - now
        if left <= 0:
            raise RgOverBudget(self._current, self.budget)
        wait = min(_POLL_S, left) if until is None else max(min(_POLL_S, left, until - now), 0)
        if not self._running:
            time.sleep(wait)
            return False
        ready = self._selector.select(wait)
        for key, _ in ready:
            fd = int(key.fd)
            run = self._running[fd]
            chunk = os.read(fd, _READ_BYTES)
            if not chunk:
                self._forget(fd)
            if run.feed(fd, chunk):
                run.process.wait()
                run.ended = True
        return bool(ready)

    def stop(self, run: RgProcess) -> None:
        """Kill ``run`` (unless it has ended) and reap it; its lines so far stay."""
        if run.ended:
            return
        run.stopped = True
        with contextlib.suppress(ProcessLookupError):
            run.process.kill()
        run.process.wait()
        for fd in run.streams():
            self._forget(fd)
        run.ended = True

    def close(self) -> None:
        """Stop every process and close every pipe."""
        try:
            for run in self._all:
                self.stop(run)
        finally:
            for run in self._all:
                for pipe in (run.process.stdout, run.process.stderr):
                    if pipe is not None:
                        pipe.close()
            self._selector.close()

    def _forget(self, fd: int) -> None:
        if self._running.pop(fd, None) is not None:
            self._selector.unregister(fd)


def run_rg(
    command: list[str],
    budget: float,
    cancelled: threading.Event,
    *,
    prefix: bytes,
    stdin: int | None = None,
    limit: int = GREP_MAX_MATCHES,
    current: str = "",
) -> RgProcess:
    """Run one rg until it ends or has printed more than ``limit`` lines (then ``stopped``);
    kill it when the budget is spent (RgOverBudget) or the call is cancelled
    (SearchCancelled)."""
    with RgProcesses(budget, cancelled, current=current) as processes:
        run = processes.start(command, prefix=prefix, stdin=stdin, limit=limit + 1)
        while not run.ended:
            processes.step()
            if len(run.lines) > limit:
                processes.stop(run)
        failure = run.failure()
        if failure is not None:
            raise failure
        return run
