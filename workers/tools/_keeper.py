"""The keeper of one background process: it runs the command on a terminal and keeps its output.

``python -m workers.tools._keeper FOLDER`` is started by the worker that runs
``process_start`` and outlives it (``_daemon``). It starts the command as ``bash`` would (the
same sandbox, limits and cgroup, in the session's network), on a pseudo-terminal of its own,
so a REPL or a prompt behaves as at a terminal; then, until the command ends:

- it appends what the command writes to ``output`` (stdout and stderr together, as a terminal
  shows them), up to the kept-output limit;
- it types into the terminal what a worker writes to the ``stdin`` FIFO;
- on SIGTERM it stops the command (SIGTERM to the command's processes, SIGKILL to all that
  is left after a grace), with the reason a worker wrote to ``stop``;
- it stops the command itself at a limit: kept output, CPU time of all its processes, memory
  (the kernel killed one of them), or processes (a fork was refused).

It records each change of state in ``state.json`` (what the tools read) and in the session's
record in Redis (what ``toolpool session show`` and the dashboard list).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import selectors
import signal
import struct
import sys
import termios
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from executor import ToolError
from workers.processes import _place as place
from workers.processes._daemon import detach, failed, ready
from workers.processes._place import STOP_GRACE
from workers.processes._signals import group_members, signal_members
from workers.tools._confine import Confinement
from workers.tools._shell_settings import BashSettings

log = logging.getLogger("toolpool.keeper")

# How often the limits are checked, and the longest the loop sleeps.
_TICK = 1.0
_READ = 65536
# Input typed but not yet taken by the terminal: past this, the FIFO is left unread.
_MAX_PENDING = 64 * 1024
# A wide terminal, so servers' lines are not wrapped.
_ROWS, _COLUMNS = 50, 200
# After the command ends, how long its last output may take to arrive.
_DRAIN_S = 0.5
_MIB = 1024 * 1024
_RECORD_TRIES = 30


class Keeper:
    """One background process, from start to its recorded end."""

    def __init__(self, folder: Path, spec: dict[str, Any]) -> None:
        self.folder = folder
        self.spec = spec
        self.cap = int(spec["output_cap"])
        # A ProcessRecord's fields as plain data: the keeper imports neither pydantic nor
        # redis-py until its end (they would double its start time and triple its memory).
        self.record: dict[str, Any] = {
            "id": spec["id"],
            "session": spec["session"],
            "command": spec["command"],
            "host": spec.get("host", ""),
            "state": "starting",
            "pid": 0,
            "started_at": 0.0,
            "ended_at": None,
            "exit_code": None,
            "signal": None,
            "reason": "",
            "output_bytes": 0,
        }
        self.pid = 0
        self.master = -1
        self.written = 0
        self.pending = bytearray()
        self.stop_reason = ""
        self.grace = STOP_GRACE
        self.status: int | None = None
        self.selector = selectors.DefaultSelector()
        self.output = open(folder / place.OUTPUT, "ab", buffering=0)  # noqa: SIM115
        # The command's cgroups, in state.json while it runs: if this keeper dies unrecorded,
        # a worker kills what is left in them (``_table.settle_lost``).
        self.cgroups: list[str] = []

    # -- start ---------------------------------------------------------------------------

    def start(self) -> Confinement:
        spec = self.spec
        bash = BashSettings(**spec["bash"])
        settings = replace(bash, cpu_seconds=float(spec["cpu_seconds"]))
        confinement = Confinement.prepare(
            settings,
            Path(spec["workspace"]),
            tuple(Path(p) for p in spec["worker_folders"]),
            spec.get("join_network") or [],
        )
        env = {**spec["env"], **confinement.env, "TERM": "dumb"}
        # The session's variables reach the command in the sandbox, never what starts it.
        argv = [*confinement.argv(Path(spec["cwd"]), env=env), *spec["argv_tail"]]
        env = confinement.outside_env(env)
        self.cgroups = [] if confinement.cgroup is None else confinement.cgroup.procs_files
        fifo = self.folder / place.STDIN
        os.mkfifo(fifo, 0o600)
        self.stdin = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        pid, master = os.forkpty()
        if pid == 0:  # the child: becomes the command
            try:
                os.chdir(spec["cwd"])
                os.execve(argv[0], argv, env)
            except OSError as exc:
                os.write(2, f"toolpool: could not run the command: {exc}\n".encode())
            os._exit(127)
        self.pid, self.master = pid, master
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", _ROWS, _COLUMNS, 0, 0))
        os.set_blocking(master, False)
        self.selector.register(master, selectors.EVENT_READ)
        self.selector.register(self.stdin, selectors.EVENT_READ)
        self.record.update(state="running", pid=pid, started_at=time.time())
        self.save()
        return confinement

    # -- the loop --------------------------------------------------------------------------

    def run(self, confinement: Confinement) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the loop
        self.selector.register(wake_r, selectors.EVENT_READ)
        while self.status is None:
            for key, mask in self.selector.select(_TICK):
                if key.fd == wake_r:
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 4096)
                elif key.fd == self.stdin:
                    self._take_input()
                elif key.fd == self.master:
                    if mask & selectors.EVENT_READ:
                        self._read_terminal()
                    if mask & selectors.EVENT_WRITE:
                        self._type()
            if not self.folder.is_dir() and not self.stop_reason:
                # Its session went without asking it (a test's folder removed): nobody could
                # read or drive it any more.
                self.stop_reason = "its session's host folder was removed"
            self._reap()
            if self.status is not None:
                break
            if self.stop_reason:
                self._stop(confinement, self.stop_reason)
                break
            reached = self._limit_reached(confinement)
            if reached:
                self._stop(confinement, reached)
                break
        self._drain()
        self._end(confinement)

    def _on_term(self, signum: int, frame: object) -> None:
        asked = place.read_json(self.folder / place.STOP) or {}
        self.grace = float(asked.get("grace", STOP_GRACE))
        self.stop_reason = str(asked.get("reason") or "its keeper was sent SIGTERM")

    def _take_input(self) -> None:
        if len(self.pending) >= _MAX_PENDING:
            return
        try:
            data = os.read(self.stdin, _MAX_PENDING - len(self.pending))
        except BlockingIOError:
            return
        self.pending += data
        self._type()

    def _type(self) -> None:
        """Write pending input to the terminal as far as it takes it."""
        if self.master < 0:
            self.pending.clear()
            return
        if self.pending:
            try:
                done = os.write(self.master, self.pending)
                del self.pending[:done]
            except BlockingIOError:
                pass
            except OSError:
                self.pending.clear()
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.pending else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.modify(self.master, events)
        # A full terminal leaves the FIFO unread until it takes more.
        with contextlib.suppress(KeyError, ValueError):
            if len(self.pending) >= _MAX_PENDING:
                self.selector.unregister(self.stdin)
            elif self.stdin not in self.selector.get_map():
                self.selector.register(self.stdin, selectors.EVENT_READ)

    def _read_terminal(self) -> None:
        try:
            data = os.read(self.master, _READ)
        except BlockingIOError:
            return
        except OSError as exc:
            # EIO: every process closed the terminal; the command may still run.
            if exc.errno != errno.EIO:
                log.warning("reading the terminal: %s", exc)
            self._close_terminal()
            return
        if not data:
            self._close_terminal()
            return
        room = self.cap - self.written
        if room > 0:
            self.output.write(data[:room])
            self.written += min(len(data), room)
        if len(data) > room and not self.stop_reason:
            self.stop_reason = (
                f"it reached the kept-output limit of {_size(self.cap)} "
                "(TOOLPOOL_BASH_BACKGROUND_OUTPUT_MB); the output up to it is kept"
            )

    def _close_terminal(self) -> None:
        if self.master >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.master)

    def _reap(self) -> None:
        if self.status is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.status = 0
            return
        if pid == self.pid:
            self.status = status

    def _limit_reached(self, confinement: Confinement) -> str:
        settings = confinement.settings
        cgroup = confinement.cgroup
        if confinement.cpu_over():
            return (
                f"it reached the CPU time limit of {settings.cpu_seconds:g} s (all its "
                "processes together; TOOLPOOL_BASH_BACKGROUND_CPU_SECONDS)"
            )
        if cgroup is not None and (kills := cgroup.memory_kills()):
            return (
                f"it reached the memory limit of {settings.memory_mb} MiB (the kernel killed "
                f"{kills} of its processes; TOOLPOOL_BASH_MEMORY_MB)"
            )
        if cgroup is not None and (refused := cgroup.processes_refused()):
            return (
                f"it reached the limit of {settings.max_processes} processes ({refused} forks "
                "refused; TOOLPOOL_BASH_MAX_PROCESSES)"
            )
        return ""

    # -- the end -------------------------------------------------------------------------

    def _stop(self, confinement: Confinement, reason: str) -> None:
        """Stop the command: SIGTERM to its processes, SIGKILL to what is left after a grace."""
        self.stop_reason = reason
        if self.grace > 0:
            signal_members(self.pid, signal.SIGTERM)
        end = time.monotonic() + self.grace
        while self.status is None and time.monotonic() < end:
            self._pump(0.05)
            self._reap()
        if self.status is None or group_members(self.pid):
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        confinement.kill_left()
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)

    def _pump(self, wait: float) -> None:
        if self.master < 0 or self.master not in self.selector.get_map():
            time.sleep(wait)
            return
        if self.selector.select(wait):
            self._read_terminal()

    def _drain(self) -> None:
        """Read what the command wrote just before it ended."""
        end = time.monotonic() + _DRAIN_S
        while self.master >= 0 and self.master in self.selector.get_map():
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            ready_now = [k for k, _ in self.selector.select(remaining) if k.fd == self.master]
            if not ready_now:
                break
            self._read_terminal()

    def _end(self, confinement: Confinement) -> None:
        status = self.status or 0
        if not self.stop_reason:
            # A limit often ends the command before a tick sees it (the kernel's OOM kill,
            # SIGXCPU, the fork bomb's first bash ending): its counters still say which.
            self.stop_reason = self._limit_reached(confinement) or _limit_signal(
                status, confinement.settings
            )
        update: dict[str, Any] = {"ended_at": time.time(), "output_bytes": self.written}
        if self.stop_reason:
            update.update(state="stopped", reason=self.stop_reason)
        else:
            update["state"] = "exited"
        if os.WIFSIGNALED(status):
            update["signal"] = _signal_name(os.WTERMSIG(status))
        else:
            update["exit_code"] = os.waitstatus_to_exitcode(status)
        # Whatever the command left running dies with it (the sandbox's PID namespace ended
        # with it; without the sandbox, its cgroup and what is left of its process group).
        if group_members(self.pid):
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        confinement.close()
        self.cgroups = []
        self.record.update(update)
        self.save()
        self.publish()
        with contextlib.suppress(OSError):
            os.unlink(self.folder / place.STDIN)

    # -- records ---------------------------------------------------------------------------

    def save(self) -> None:
        self.record["output_bytes"] = self.written
        data = dict(self.record)
        data["keeper_pid"] = os.getpid()
        data[place.CGROUPS] = self.cgroups
        if self.folder.is_dir():
            place.write_json(self.folder / place.STATE, data)

    def publish(self, tries: int = _RECORD_TRIES) -> bool:
        """Record the process's end in the session's record in Redis; True once done. Tried
        ``tries`` times a second apart: a failover passes while the keeper waits. (Its start
        is recorded by the worker that started it; workers of the host refresh the record.)"""
        import redis

        from executor import Settings
        from executor._connect import STANDARD, connect
        from executor.wire import Keys, SessionStore

        for attempt in range(tries):
            try:
                settings = Settings.from_env()
                client = connect(settings.redis.url or "", role=STANDARD)
                store = SessionStore(client, Keys(settings.redis.key_prefix))
                record = self.record
                store.set_process_json(record["session"], record["id"], json.dumps(record))
                return True
            except (redis.RedisError, ValueError) as exc:
                if attempt == tries - 1:
                    log.warning("could not record the process in Redis: %s", exc)
                    return False
                time.sleep(1.0)
        return False


def _limit_signal(status: int, settings: BashSettings) -> str:
    """The per-process limit whose signal ended the command, as the reason; "" for none.
    Through the sandbox the signal arrives as exit code 128 + its number."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
    else:
        number = os.waitstatus_to_exitcode(status) - 128
    if number == signal.SIGXCPU and settings.cpu_seconds:
        return (
            f"it reached the CPU time limit of {settings.cpu_seconds:g} s (killed by SIGXCPU; "
            "TOOLPOOL_BASH_BACKGROUND_CPU_SECONDS)"
        )
    if number == signal.SIGXFSZ and settings.file_size_mb:
        return (
            f"it reached the file size limit of {settings.file_size_mb} MiB per file (killed "
            "by SIGXFSZ; TOOLPOOL_BASH_FILE_SIZE_MB)"
        )
    return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _size(count: int) -> str:
    return f"{count // _MIB} MiB" if count >= _MIB else f"{count} bytes"


def main(folder: Path) -> None:
    detach()
    logging.basicConfig(
        filename=str(folder / place.LOG), level=logging.INFO, format="%(asctime)s %(message)s"
    )
    spec = place.read_json(folder / place.SPEC)
    if spec is None:
        failed(f"the process's spec in {folder} is missing or unreadable")
        return
    os.setsid()
    keeper = Keeper(folder, spec)
    try:
        confinement = keeper.start()
    except (ToolError, OSError) as exc:
        failed(f"the command could not start: {exc}")
        return
    ready(keeper.pid)
    try:
        keeper.run(confinement)
    except BaseException:
        log.exception("the keeper failed")
        with contextlib.suppress(OSError):
            os.killpg(keeper.pid, signal.SIGKILL)
        confinement.close()
        raise


if __name__ == "__main__":
    main(Path(sys.argv[1]))
