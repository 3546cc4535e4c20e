"""One ``bash -c`` run in a launch made ahead (``_shell_warm``): its pipes read into capped
streams, its end heard at once, its process group (and cgroup) cleaned up, its report rendered.

``ShellRun.finish`` waits for the command while watching the deadline, the cancel flag, the
fence and the CPU time of the confinement; every way out kills what is left. The report is
the exit line, each stream cut to its first and last halves over the cap, and notes.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from executor import FenceError, ToolCancelledError, ToolError, ToolTimeoutError
from executor import _texts as texts
from executor.contract import ToolContext
from workers.processes._signals import group_members
from workers.tools._confine import Confinement
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_unit import Unit

# Seconds a process group gets between SIGTERM and SIGKILL.
_KILL_GRACE = 1.0
# Seconds to wait for a SIGKILLed group to vanish, and then for the pipes to reach EOF.
_REAP_WAIT = 1.0
_DRAIN_WAIT = 1.0
# How often the loop wakes to check the deadline, the cancel flag and the fence.
_POLL = 0.05
_FENCE_INTERVAL = 0.5
_READ_CHUNK = 65536


class CappedStream:
    """One output stream's bytes: the first half of the cap and a rolling last half."""

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.cap = cap
        self.head = bytearray()
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_size = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_size += len(data)
        # Whole chunks leave from the left (cheap); the partial excess is cut in text().
        while self.tail and self.tail_size - len(self.tail[0]) >= self.tail_cap:
            self.tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        """The kept bytes decoded, with a line saying how many were dropped in the middle."""
        tail = b"".join(self.tail)
        if len(tail) > self.tail_cap:
            tail = tail[len(tail) - self.tail_cap :]
        dropped = self.total - len(self.head) - len(tail)
        if dropped == 0:
            return (bytes(self.head) + tail).decode(errors="replace")
        return (
            self.head.decode(errors="replace")
            + f"\n... [{dropped} bytes of {self.name} omitted: the limit is {self.cap} bytes "
            "per stream, its first and last halves kept] ...\n" + tail.decode(errors="replace")
        )


@dataclass
class ShellRun:
    """A started ``bash -c`` and the pipes it writes to."""

    process: subprocess.Popen[bytes]
    streams: dict[int, CappedStream]
    selector: selectors.BaseSelector
    confinement: Confinement | None
    # Readable once the shell has exited (None: no pidfd here, so the exit is polled for).
    pidfd: int | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def attach(cls, unit: Unit, script: bytes, cap: int, confinement: Confinement) -> ShellRun:
        """Run ``script`` in ``unit`` (``_shell_warm``), whose process becomes the command;
        ``confinement``: the unit's, as placed for this call."""
        process = unit.process
        selector = selectors.DefaultSelector()
        streams: dict[int, CappedStream] = {}
        pipes: tuple[tuple[str, IO[bytes] | None], ...] = (
            ("stdout", process.stdout),
            ("stderr", process.stderr),
        )
        for name, pipe in pipes:
            assert pipe is not None  # PIPE was asked for
            streams[pipe.fileno()] = CappedStream(name, cap)
            selector.register(pipe.fileno(), selectors.EVENT_READ)
        pidfd = open_pidfd(process.pid)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        unit.go(script)
        return cls(process, streams, selector, confinement, pidfd)

    def finish(self, ctx: ToolContext, limit: float) -> str:
        """Wait for the command and render the report; raises ``ToolError`` on a timeout."""
        started = time.monotonic()
        deadline = started + limit
        next_fence = started + _FENCE_INTERVAL
        while self.process.poll() is None:
            now = time.monotonic()
            if now >= deadline:
                self._stop_group()
                # A command held at a limit (bash retries a refused fork for half a minute)
                # runs into the time limit: say which limit held it.
                reached = self._limits_reached(0)
                also = f" It had reached {_limit_names(reached)}." if reached else ""
                raise ToolTimeoutError(
                    self._report(
                        f"Command timed out after {limit:g} s; it and every process it started "
                        f"were killed.{also} Output so far:"
                    )
                    + f"\nGive a larger timeout (at most {_max_timeout(ctx):g} s) "
                    "or split the work into shorter commands."
                )
            if ctx.cancelled.is_set():
                self._stop_group()
                raise ToolCancelledError(
                    self._report("Command cancelled and killed. Output so far:")
                )
            if self.confinement is not None and self.confinement.cpu_over():
                self._stop_group()
                raise ToolError(
                    self._report(
                        "Command stopped: it reached "
                        + _limit_names(self.confinement.limits_reached(0, "", cpu_total=True))
                        + "; it and every process it started were killed. Output so far:"
                    )
                    + _LIMIT_HINT
                )
            if now >= next_fence:
                next_fence = now + _FENCE_INTERVAL
                try:
                    ctx.check_fence()
                except FenceError:
                    # bash cannot be fenced: the only safe answer to a lost lock is to stop it.
                    self._stop_group()
                    raise FenceError(
                        texts.command_stopped(self._report("Output so far:"))
                    ) from None
            self._pump(min(_POLL, deadline - now), ctx)
        if self.confinement is not None and self.confinement.sandboxed:
            # bash's exit ended its PID namespace: the kernel kills whatever it left running,
            # and the group's last members may still be exiting, so there is nothing to count.
            self._drain()
            background = False
        else:
            background = self._stop_group()
            # A process that left the group (setsid) is still found in the cgroup.
            if self.confinement is not None:
                background = self.confinement.kill_left() or background
        if background:
            self.notes.append(
                "note: background processes still running after the command finished were "
                "killed; nothing started by a command outlives it."
            )
        return self._ended(self.process.returncode)

    def _ended(self, returncode: int) -> str:
        """The report of a command that ended; an error if it never ran or hit a limit."""
        if self.confinement is None:
            return self._report(_exit_line(returncode))
        stderr = self._stderr()
        failure = self.confinement.start_failure(returncode, stderr)
        if failure is not None:
            raise ToolError(
                f"bash could not run the command: {failure}; nothing ran. Try again later, or "
                "ask the operator to check the worker."
            )
        reached = self._limits_reached(returncode)
        if reached:
            raise ToolError(
                self._report(
                    f"The command reached {_limit_names(reached)}; {_exit_line(returncode)}."
                )
                + _LIMIT_HINT
            )
        return self._report(_exit_line(returncode))

    def _stderr(self) -> str:
        return next(s.text() for s in self.streams.values() if s.name == "stderr")

    def _limits_reached(self, returncode: int) -> list[str]:
        if self.confinement is None:
            return []
        return self.confinement.limits_reached(returncode, self._stderr())

    def close(self) -> None:
        """Make sure nothing is left: the group signalled, the pipes and selector closed."""
        if self.process.poll() is None:
            self._stop_group()
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fd)
        self.selector.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def _pump(self, wait: float, ctx: ToolContext | None = None) -> None:
        """Read whatever the pipes have, waiting at most ``wait`` seconds for something.

        The shell's exit also ends the wait (through its pidfd), even while a background
        process still holds the pipes open, so the caller sees the command end at once.
        """
        if not self.selector.get_map():
            # No pidfd (or it fired before Popen could reap) and both pipes are closed: the
            # shell is exiting. Popen.wait polls with sleeps of up to 50 ms, short at first;
            # a cancel or the deadline is still seen within ``wait``.
            if self.process.returncode is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=max(wait, 0.0))
                return
            # Only the group's other processes are left: wake up for a cancel.
            if ctx is not None:
                ctx.cancelled.wait(max(wait, 0.0))
            else:
                time.sleep(max(wait, 0.0))
            return
        for key, _ in self.selector.select(max(wait, 0.0)):
            if key.fd == self.pidfd:
                # The shell has exited (a zombie until reaped). Popen reaps it, so it keeps
                # its return code; the pidfd stays readable, so it leaves the selector.
                self.selector.unregister(key.fd)
                self.process.poll()
                continue
            data = os.read(key.fd, _READ_CHUNK)
            if data:
                self.streams[key.fd].feed(data)
            else:
                self.selector.unregister(key.fd)

    def _stop_group(self) -> bool:
        """End every live process of the group, TERM then KILL; True if there was one."""
        pgid = self.process.pid
        if not _group_alive(pgid):
            self._drain()
            return False
        _signal_group(pgid, signal.SIGTERM)
        if not self._wait_group_gone(_KILL_GRACE):
            _signal_group(pgid, signal.SIGKILL)
            self._wait_group_gone(_REAP_WAIT)
        self._drain()
        return True

    def _wait_group_gone(self, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while True:
            self.process.poll()  # reap the shell so it does not count as a member
            if not _group_alive(self.process.pid):
                return True
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            self._pump(min(_POLL, remaining))

    def _drain(self) -> None:
        """Read the pipes to EOF, but never wait long for a writer outside the group."""
        self.process.poll()
        end = time.monotonic() + _DRAIN_WAIT
        while self._pipes_open():
            remaining = end - time.monotonic()
            if remaining <= 0:
                self.notes.append(
                    "note: the output pipes were still held open by a process that left the "
                    "command's process group; output may be incomplete."
                )
                return
            self._pump(remaining)

    def _pipes_open(self) -> bool:
        return any(fd in self.streams for fd in self.selector.get_map())

    def _report(self, first_line: str) -> str:
        parts = [first_line]
        texts = [(s.name, _strip_newline(s.text())) for s in self.streams.values()]
        for name, text in texts:
            if text:
                parts.append(f"{name}:\n{text}")
        if not any(text for _, text in texts):
            parts.append("(no output)")
        parts.extend(self.notes)
        return "\n".join(parts)


_LIMIT_HINT = (
    "\nUse less (smaller inputs, fewer processes, output to files in the workspace), or ask "
    "the operator to raise the limit (docs/sandbox.md#limits)."
)


def _limit_names(reached: list[str]) -> str:
    return reached[0] if len(reached) == 1 else ", ".join(reached[:-1]) + " and " + reached[-1]


def _exit_line(returncode: int) -> str:
    if returncode > 128 and (name := _signal_name(returncode - 128)):
        # What a shell (or the sandbox) reports for a command killed by a signal.
        return f"exit code: {returncode} (128 + {returncode - 128}: killed by {name})"
    if returncode >= 0:
        return f"exit code: {returncode}"
    return f"killed by signal {_signal_name(-returncode) or -returncode}"


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _strip_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None where there is none (not Linux, or a kernel before 5.3,
    or a seccomp filter refusing it): then the loop polls for the exit every ``_POLL``."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:
        return None
    return fd


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    """True while a process of the group is alive; zombies do not count.

    A plain ``killpg(pgid, 0)`` also succeeds for zombies, and orphaned zombies can stay in
    the group for good where PID 1 does not reap (some containers), so on Linux /proc is
    read to tell them apart.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc").is_dir():
        return True
    return bool(group_members(pgid))


def _max_timeout(ctx: ToolContext) -> float:
    return ctx.settings_as(BashSettings).max_timeout
