"""How one bash command is confined: the sandbox, its limits, and which limit it reached.

A command is started through a small ``/bin/sh`` launcher that joins the call's cgroup
(``_cgroup``) and sets per-process limits (``ulimit``: file size, CPU time, and address space
where no memory cgroup exists), then runs the command, inside bubblewrap (``_sandbox``) when
the sandbox is on. Hard limits equal soft ones (CPU: one second above, so SIGXCPU comes
first), and the sandbox drops every capability, so the command cannot raise them.

``BashSettings.sandbox`` (``TOOLPOOL_BASH_SANDBOX``): ``off``; ``auto`` (the default:
sandboxed where bubblewrap works, else unconfined, with a warning at worker start);
``required`` (never unconfined: a worker without a working sandbox refuses to start, and a
call that finds none is an error).
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from executor import ToolError
from workers.tools._cgroup import CallCgroup, Cgroups, Limits, find_cgroups
from workers.tools._sandbox import (
    SANDBOX_HOME,
    SANDBOX_TMP,
    SandboxSpec,
    bwrap_argv,
    probe,
    sandbox_init,
)
from workers.tools._sandbox import hidden_paths as _hidden_paths
from workers.tools._shell_settings import BashSettings

# Runs outside the sandbox, as the command's first process: join the cgroups, set the limits,
# then exec the rest. Its arguments: file size (512-byte blocks), CPU seconds, address space
# (KiB), each "-" for none; the cgroup.procs files; "--"; the command.
_LAUNCHER = (
    "f=$1 c=$2 v=$3; shift 3; "
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
    '{ [ "$f" = - ] || ulimit -f "$f"; } && '
    '{ [ "$c" = - ] || { ulimit -S -t "$c" && ulimit -H -t $((c + 1)); }; } && '
    '{ [ "$v" = - ] || ulimit -v "$v"; } || exit 125; '
    'exec "$@"'
)
LAUNCH_FAILED = 125
# How a command's launch says it could not enter its working directory (``_shell_warm``).
LAUNCH_NO_DIRECTORY = "toolpool-launch: cannot enter"
# Variables that make a program load code or data of the caller's choosing (glibc's list of
# those it drops for a setuid program, and every LD_ one): a session may export them, so
# they never reach the launcher, nsenter or bubblewrap, which run outside the sandbox as
# the worker; the sandbox sets them again for the command (``outside_env``).
_UNSAFE_OUTSIDE = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TMPDIR",
        "TZDIR",
    }
)
_MIB = 1024 * 1024
# What a program prints when an allocation fails under an address-space limit.
_NO_MEMORY = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


@dataclass
class Confinement:
    """One command's confinement: what runs before ``bash -c``, its environment, its cgroup.

    A context manager: leaving it kills what is left of the command and removes its cgroup.
    ``worker_folders``: the worker's own folders, hidden from the sandbox but for ``workspace``.
    """

    settings: BashSettings
    workspace: Path
    bwrap: str | None
    launcher: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cgroup: CallCgroup | None = None
    worker_folders: tuple[Path, ...] = ()
    # The command that puts the sandbox into its session's network namespace; [] for none.
    join_network: list[str] = field(default_factory=list)

    @classmethod
    def prepare(
        cls,
        settings: BashSettings,
        workspace: Path,
        worker_folders: tuple[Path, ...] = (),
        join_network: list[str] | None = None,
    ) -> Confinement:
        """Decide how a command with write access to ``workspace`` runs; make its cgroup.
        ``join_network``: a prefix that joins the session's own network namespace (used
        only in the sandbox, which then shares that namespace instead of an empty one)."""
        return cls.made(
            settings,
            find_cgroups(),
            sandbox_for(settings),
            workspace,
            worker_folders,
            join_network or [],
        )

    @classmethod
    def made(
        cls,
        settings: BashSettings,
        cgroups: Cgroups,
        bwrap: str | None,
        workspace: Path,
        worker_folders: tuple[Path, ...] = (),
        join_network: list[str] | tuple[str, ...] = (),
    ) -> Confinement:
        """The confinement ``prepare`` decides on, with the cgroups and the sandbox (bwrap's
        path, or None: unconfined) already found; its cgroup made."""
        env = {"HOME": SANDBOX_HOME, "TMPDIR": SANDBOX_TMP} if bwrap is not None else {}
        # In the sandbox the PID namespace ends what leaves the process group; without it,
        # the cgroup is what finds those processes.
        cgroup = _call_cgroup(cgroups, settings, track=bwrap is None)
        launcher = _launcher(settings, cgroups, cgroup)
        joined = list(join_network) if bwrap is not None else []
        return cls(settings, workspace, bwrap, launcher, env, cgroup, worker_folders, joined)

    def __enter__(self) -> Confinement:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None

    def argv(
        self,
        cwd: Path,
        read_only_files: tuple[Path, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> list[str]:
        """What comes before ``bash -c COMMAND`` for a command starting in ``cwd``. ``env``:
        the command's environment, whose variables ``outside_env`` leaves out are set again
        inside the sandbox; run the result with ``outside_env(env)``."""
        return [*self.launcher, *self.sandbox_argv(cwd, read_only_files, env)]

    def sandbox_argv(
        self,
        cwd: Path,
        read_only_files: tuple[Path, ...] = (),
        env: Mapping[str, str] | None = None,
        hidden: tuple[Path, ...] | None = None,
    ) -> list[str]:
        """``argv`` without the launcher: the session's network and bubblewrap ([] when
        unconfined). ``hidden``: the paths to hide, if already read (``hidden_paths``)."""
        if self.bwrap is None:
            return []
        if hidden is None:
            hidden = hidden_paths(self.settings, self.workspace, self.worker_folders)
        spec = SandboxSpec(
            self.workspace,
            hidden,
            network=self.settings.network or bool(self.join_network),
            tmp_bytes=self.settings.tmp_mb * _MIB,
            read_only_files=read_only_files,
        )
        sandbox = bwrap_argv(self.bwrap, spec, cwd)
        given = env or {}
        # Before bubblewrap's closing "--": only the command's own process gets them.
        sandbox[-1:-1] = [
            word
            for name in given
            if unsafe_outside(name)
            for word in ("--setenv", name, given[name])
        ]
        return [*self.join_network, *sandbox]

    def placed(
        self, workspace: Path, worker_folders: tuple[Path, ...], join_network: list[str]
    ) -> Confinement:
        """This confinement for a command in ``workspace`` (and the session's network): the
        same launcher and cgroup, which stay this one's to close."""
        joined = list(join_network) if self.bwrap is not None else []
        return replace(
            self, workspace=workspace, worker_folders=worker_folders, join_network=joined
        )

    def outside_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The environment to start ``argv(..., env)`` with: in the sandbox, ``env`` without
        the variables that would run the session's code in the launcher, nsenter or
        bubblewrap (outside the sandbox, as the worker); those are set inside it instead.
        Unconfined, ``env`` as it is: nothing there is apart from the worker."""
        if self.bwrap is None:
            return dict(env)
        return {name: value for name, value in env.items() if not unsafe_outside(name)}

    def start_failure(self, returncode: int, stderr: str) -> str | None:
        """Why the command never ran (the launcher or the sandbox failed), or None."""
        first = stderr.lstrip().split("\n", 1)[0]
        if returncode == LAUNCH_FAILED and first.startswith("toolpool-launch:"):
            if first.startswith(LAUNCH_NO_DIRECTORY):
                return f"its working directory could not be entered ({first})"
            return f"its limits could not be applied ({first})"
        if self.sandboxed and returncode == 1 and first.startswith("bwrap:"):
            return f"the sandbox could not start ({first})"
        return None

    def kill_left(self, spare_init: bool = False) -> bool:
        """Kill the command's processes still in its cgroup and wait for them to end; True
        if there were any. ``spare_init``: the sandbox's init is killed but not waited for
        (once bash has exited it only takes the sandbox's namespaces down)."""
        if self.cgroup is None:
            return False
        return self.cgroup.kill(sandbox_init if spare_init else None)

    def cpu_over(self) -> bool:
        """True once the command's processes together used more than the CPU time limit."""
        limit = self.settings.cpu_seconds
        used = None if self.cgroup is None or not limit else self.cgroup.cpu_seconds()
        return used is not None and used > limit

    def limits_reached(self, returncode: int, stderr: str, cpu_total: bool = False) -> list[str]:
        """A phrase for each limit the command reached, from the cgroup's counters and, for
        per-process limits, from how the command ended (``cpu_total``: the loop stopped it
        for the CPU time of all its processes)."""
        settings, cgroup, reached = self.settings, self.cgroup, []
        if cpu_total:
            reached.append(
                f"the CPU time limit of {settings.cpu_seconds:g} s (all its processes together)"
            )
        signalled = {-returncode, returncode - 128}
        if cgroup is not None and (kills := cgroup.memory_kills()):
            reached.append(
                f"the memory limit of {settings.memory_mb} MiB (the kernel killed "
                f"{_count(kills, 'process', 'processes')} of the command)"
            )
        elif settings.memory_mb and any(text in stderr for text in _NO_MEMORY):
            reached.append(f"the memory limit of {settings.memory_mb} MiB (an allocation failed)")
        if cgroup is not None and (refused := cgroup.processes_refused()):
            reached.append(
                f"the limit of {settings.max_processes} processes "
                f"({_count(refused, 'fork', 'forks')} refused)"
            )
        if signal.SIGXCPU in signalled or "CPU time limit exceeded" in stderr:
            reached.append(f"the CPU time limit of {settings.cpu_seconds:g} s per process")
        if signal.SIGXFSZ in signalled or any(
            text in stderr for text in ("File size limit exceeded", "File too large")
        ):
            reached.append(f"the file size limit of {settings.file_size_mb} MiB per file")
        if self.bwrap is not None and "No space left on device" in stderr:
            reached.append(
                f"the space of the private /tmp ({settings.tmp_mb} MiB), or the "
                "workspace's disk is full"
            )
        return reached

    def close(self) -> None:
        """Kill whatever of the command is left in its cgroup, and remove the cgroup."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


def sandbox_for(settings: BashSettings) -> str | None:
    """bwrap's path where commands run in a sandbox, None where they run unconfined; a
    ``ToolError`` where the sandbox is required and does not work here."""
    if settings.sandbox == "off":
        return None
    found = probe(settings.network)
    if found.bwrap is None and settings.sandbox == "required":
        raise ToolError(
            f"bash needs its sandbox on this worker (sandbox mode 'required'), but "
            f"{found.reason}; nothing ran. Ask the operator to fix the worker."
        )
    return found.bwrap


def available_cgroups() -> Cgroups:
    """The cgroups this worker confines commands with (``find_cgroups``, read here so that a
    stand-in for it reaches every user)."""
    return find_cgroups()


def hidden_paths(
    settings: BashSettings, workspace: Path, worker_folders: tuple[Path, ...] = ()
) -> tuple[Path, ...]:
    """What a command in ``workspace`` must not see: the configured list, and this worker's
    other places (the pool workspace, the sessions root), unless one is the workspace."""
    return _hidden_paths(settings.hide, workspace, worker_folders)


def unsafe_outside(name: str) -> bool:
    """Whether variable ``name`` makes a program load code or data of the caller's choosing."""
    return name.startswith("LD_") or name in _UNSAFE_OUTSIDE


def _call_cgroup(cgroups: Cgroups, settings: BashSettings, track: bool) -> CallCgroup | None:
    limits = Limits(
        processes=settings.max_processes,
        memory_bytes=settings.memory_mb * _MIB,
        cpu_seconds=settings.cpu_seconds,
    )
    if not CallCgroup.needed(cgroups, limits, track):
        return None
    try:
        return CallCgroup(cgroups, limits, track)
    except OSError as exc:
        raise ToolError(
            f"Could not make the command's cgroup ({exc}); nothing ran. Try again later."
        ) from None


def _launcher(settings: BashSettings, cgroups: Cgroups, cgroup: CallCgroup | None) -> list[str]:
    size = str(settings.file_size_mb * 2048) if settings.file_size_mb else "-"
    cpu = str(math.ceil(settings.cpu_seconds)) if settings.cpu_seconds else "-"
    # Address space only stands in for a memory cgroup: it counts reservations, not use.
    space = "-"
    if settings.memory_mb and cgroups.memory is None:
        space = str(settings.memory_mb * 1024)
    procs = [] if cgroup is None else cgroup.procs_files
    if (size, cpu, space) == ("-", "-", "-") and not procs:
        return []
    return ["/bin/sh", "-c", _LAUNCHER, "toolpool-launch", size, cpu, space, *procs, "--"]


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


@dataclass(frozen=True)
class Report:
    """What a worker says at start about bash's confinement, and whether it may start."""

    lines: list[str]
    warning: str = ""
    refusal: str = ""


def describe(settings: BashSettings) -> Report:
    """The sandbox and the limits in force for this worker's bash commands."""
    lines: list[str] = []
    warning = refusal = ""
    if settings.sandbox == "off":
        lines.append("bash sandbox: off (commands run unconfined, as the worker's user)")
    else:
        found = probe(settings.network)
        if found.bwrap is not None:
            network = "network allowed" if settings.network else "no network"
            lines.append(
                f"bash sandbox: {found.version or 'bubblewrap'} (workspace-only writes, own "
                f"PID namespace, {network})"
            )
        elif settings.sandbox == "required":
            refusal = (
                f"bash's sandbox is required (--sandbox required), but {found.reason}. "
                + _INSTALL_HINT
            )
        else:
            warning = (
                f"WARNING: bash commands run UNCONFINED: {found.reason}. "
                + _INSTALL_HINT
                + " Or pass --sandbox required to refuse to start without it, or --disable-tool "
                "bash."
            )
    cgroups = find_cgroups()
    limits = []
    if settings.max_processes:
        limits.append(
            f"{settings.max_processes} processes ({cgroups.describe('pids')})"
            if cgroups.pids is not None
            else "processes: not enforced (no pids cgroup)"
        )
    if settings.memory_mb:
        limits.append(f"memory {settings.memory_mb} MiB ({_memory_where(cgroups)})")
    if settings.cpu_seconds:
        total = "" if cgroups.cpu is None else " and for all its processes together"
        limits.append(f"CPU {settings.cpu_seconds:g} s per process{total}")
    if settings.file_size_mb:
        limits.append(f"file size {settings.file_size_mb} MiB")
    lines.append("bash limits: " + ("; ".join(limits) or "none"))
    return Report(lines, warning, refusal)


def _memory_where(cgroups: Cgroups) -> str:
    if cgroups.memory is None:
        return "address space per process, no memory cgroup"
    return f"all processes, {cgroups.describe('memory')}"


_INSTALL_HINT = (
    "Install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap); in a container, allow it namespaces (see docs/sandbox.md)."
)
