"""A launch made ahead of a bash command: its cgroup joined, its limits set, its sandbox made.

A unit is a process started before the call that will use it: the launcher (``_confine``),
which joins the command's cgroup and sets its limits, then, for a sandbox unit, the session's
network (``nsenter``) and bubblewrap, and at the end a ``/bin/sh`` that waits for a script on
its standard input. ``script`` writes that script: enter the directory, make the given
variables the whole environment, and ``exec`` the command with stdin closed. The waiting
shell's own environment is empty but for the pool's mark, so nothing of the worker's reaches
the command but what the script gives it; a sandbox unit's script runs inside the sandbox, so
a session's loader variables (``LD_PRELOAD``) run nothing outside it.

A unit serves one command (its cgroup, its PID namespace, its ``/tmp`` are that command's);
``close`` ends an unused one and removes what is left of a used one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from workers.processes._daemon import TOKEN_ENV
from workers.tools._cgroup import Cgroups
from workers.tools._confine import LAUNCH_FAILED, LAUNCH_NO_DIRECTORY, Confinement, hidden_paths
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_state import ShellFiles

# Seconds to wait for an unused unit's processes to end once killed.
_REAP_S = 2.0
# How much lower than the worker's the CPU priority (nice value) is at which a unit is set up
# in the background, until a call takes it: commands running come first.
_BACKGROUND_NICE = 10
# The shell at a unit's end: it runs what it reads on its standard input.
_WAITER = ["/bin/sh", "-s"]
# A variable a POSIX shell can export; other names (a function bash exported) go through env.
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Place:
    """Where a unit's command runs, under which settings: the key a unit is kept under.

    ``workspace`` None: an outside unit. Else a sandbox unit of that workspace, hiding the
    worker's ``worker_folders``, in the session's ``network`` (the prefix that joins it).
    ``session``: the unit has the ``ShellFiles`` a session's command writes its state to.
    """

    settings: BashSettings
    cgroups: Cgroups
    bwrap: str | None
    workspace: Path | None = None
    worker_folders: tuple[Path, ...] = ()
    network: tuple[str, ...] = ()
    session: bool = False


@dataclass
class Unit:
    """A launch made ahead: its process waits for its script (``go``) on its stdin."""

    place: Place
    confinement: Confinement
    process: subprocess.Popen[bytes]
    files: ShellFiles | None
    # The paths its sandbox hides, and its workspace's (and network's) identity when made.
    hidden: tuple[Path, ...]
    identity: tuple[int, ...]
    made: float
    # Made in the background at a lower CPU priority (a root worker's): the nice value to
    # give back when taken (the worker's own), or None.
    lowered_from: int | None = None

    @classmethod
    def make(cls, place: Place, background: bool = False) -> Unit:
        """Start a unit for ``place``: its cgroup made, its launcher (and sandbox) started.
        ``background``: made ahead, so its setting up yields the CPU to commands that run
        (where the worker may give the priority back when the unit is taken: as root)."""
        workspace = place.workspace or Path("/")
        confinement = Confinement.made(
            place.settings,
            place.cgroups,
            place.bwrap,
            workspace,
            place.worker_folders,
            place.network,
        )
        files = ShellFiles() if place.session else None
        try:
            hidden: tuple[Path, ...] = ()
            argv = list(confinement.launcher)
            if place.workspace is not None:
                hidden = hidden_paths(place.settings, workspace, place.worker_folders)
                startup = () if files is None else (files.startup,)
                argv += confinement.sandbox_argv(workspace, startup, hidden=hidden)
            identity = _identity(place)
            process = subprocess.Popen(
                [*argv, *_WAITER],
                cwd=workspace,
                env=_unit_env(),
                pass_fds=() if files is None else (files.fd,),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException:
            if files is not None:
                files.close()
            confinement.close()
            raise
        unit = cls(place, confinement, process, files, hidden, identity, time.monotonic())
        if background and os.geteuid() == 0:
            own = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's, which the unit has
            # The whole group: the launcher, and each process it becomes or starts.
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PGRP, process.pid, min(own + _BACKGROUND_NICE, 19))
                unit.lowered_from = own
        return unit

    def prioritize(self) -> None:
        """Give the unit the worker's CPU priority back (before its script is handed)."""
        if self.lowered_from is not None:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PGRP, self.process.pid, self.lowered_from)
            self.lowered_from = None

    def fits(self, hidden: tuple[Path, ...]) -> bool:
        """Whether this unit still serves its place: waiting, hiding ``hidden`` (the paths
        to hide now), its workspace and network the ones it was made with."""
        if self.process.poll() is not None or self.hidden != hidden:
            return False
        try:
            return self.identity == _identity(self.place)
        except OSError:
            return False

    def go(self, script: bytes) -> None:
        """Hand the waiting shell its script; a unit that died meanwhile is seen to end."""
        stdin = self.process.stdin
        assert stdin is not None  # PIPE was asked for
        with contextlib.suppress(BrokenPipeError):
            stdin.write(script)
        with contextlib.suppress(BrokenPipeError):
            stdin.close()

    def close(self) -> None:
        """End the unit: an idle one's processes killed, pipes and files closed, what is
        left in its cgroup killed and the cgroup removed."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(_REAP_S)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self.files is not None:
            self.files.close()
        self.confinement.close()


def script(argv: list[str], env: Mapping[str, str], cwd: Path | None = None) -> bytes:
    """What a unit's waiting shell runs: enter ``cwd`` (if given), make ``env`` the whole
    environment, and become ``argv`` with stdin closed."""
    lines = []
    if cwd is not None:
        failed = shlex.quote(f"{LAUNCH_NO_DIRECTORY} {cwd}")
        lines.append(
            f"cd -P -- {shlex.quote(str(cwd))} 2>/dev/null || "
            f"{{ echo {failed} >&2; exit {LAUNCH_FAILED}; }}"
        )
    run = argv
    if all(_SHELL_NAME.match(name) for name in env):
        # The waiting shell's environment is empty but for the pool's mark (and bwrap's PWD);
        # the cd's OLDPWD is its own.
        lines.append("unset OLDPWD")
        if env:
            lines.append("export " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()))
    else:
        run = [shutil.which("env") or "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items())]
        run.extend(argv)
    lines.append(f"exec {shlex.join(run)} </dev/null")
    return ("\n".join(lines) + "\n").encode()


def _unit_env() -> dict[str, str]:
    # The pool's mark only, so that the pool sweeps a dead worker's units; the command's own
    # variables come with its script.
    token = os.environ.get(TOKEN_ENV)
    return {} if token is None else {TOKEN_ENV: token}


def _identity(place: Place) -> tuple[int, ...]:
    """The workspace's device and inode and the network namespace's inode: a session deleted
    and made again, or its network made anew, is another place for an old unit."""
    if place.workspace is None:
        return ()
    found = os.stat(place.workspace)
    identity = [found.st_dev, found.st_ino]
    for word in place.network:
        if word.startswith("--net="):
            identity.append(os.stat(word[len("--net=") :]).st_ino)
    return tuple(identity)
