"""bubblewrap's command line for one bash command: what it sees, where it writes, what it reaches.

The sandbox (``bwrap``, from the distribution's ``bubblewrap`` package) gives a command:

- the system read-only (``/`` bound read-only), a fresh ``/dev`` and ``/proc``;
- the call's workspace as the only writable place besides a private, size-capped ``/tmp``;
- the hidden paths (the worker's home, other workspaces, credential files) replaced by empty,
  read-only folders (a hidden file cannot be opened);
- its own PID namespace: when bash exits, or bwrap is killed, every process it started dies
  with it, ``setsid`` and double-forked daemons included;
- no network unless it is allowed (its own, empty network namespace), no capabilities, and
  ``no_new_privs`` (setuid programs gain nothing).

``probe`` runs the sandbox once per worker process, so a kernel that refuses namespaces is
found at start, with bwrap's own words for why.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import cast

# Inside the sandbox: the private /tmp, and a writable home in it (the real one is hidden).
SANDBOX_TMP = "/tmp"
SANDBOX_HOME = "/tmp/home"


@dataclass(frozen=True)
class SandboxSpec:
    """What one command's sandbox is made of."""

    workspace: Path
    hidden: tuple[Path, ...]
    network: bool = False
    tmp_bytes: int = 0
    # Files the command must read that lie in hidden places (bash's start-up file).
    read_only_files: tuple[Path, ...] = ()


def bwrap_argv(bwrap: str, spec: SandboxSpec, cwd: Path) -> list[str]:
    """The ``bwrap ...`` prefix; the command to run follows it."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # Mounts are laid shallowest first, so a deeper one (the workspace inside a hidden folder,
    # a hidden folder inside the workspace) lands on top. At equal depth a hidden path comes
    # first, so the workspace is never hidden by itself.
    mounts: list[tuple[int, int, list[str]]] = []
    tmp = [] if not spec.tmp_bytes else ["--size", str(spec.tmp_bytes)]
    mounts.append((1, 0, [*tmp, "--tmpfs", SANDBOX_TMP]))
    hidden_dirs = []
    for path in _needed(spec.hidden, spec.workspace):
        if path.is_dir():
            hidden_dirs.append(path)
            mounts.append((len(path.parts), 0, ["--tmpfs", str(path)]))
        else:
            mounts.append((len(path.parts), 0, ["--ro-bind", "/dev/null", str(path)]))
    workspace = str(spec.workspace)
    mounts.append((len(spec.workspace.parts), 1, ["--bind", workspace, workspace]))
    for file in spec.read_only_files:
        mounts.append((len(file.parts), 2, ["--ro-bind", str(file), str(file)]))
    for _, _, mount in sorted(mounts, key=lambda m: (m[0], m[1])):
        argv.extend(mount)
    # Read-only only now: the mounts above may need mount points made inside these folders.
    for path in hidden_dirs:
        argv.extend(["--remount-ro", str(path)])
    argv.extend(["--dir", SANDBOX_HOME])
    argv.extend(["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"])
    if not spec.network:
        argv.append("--unshare-net")
    argv.extend(["--cap-drop", "ALL", "--die-with-parent", "--chdir", str(cwd), "--"])
    return argv


def _needed(hidden: tuple[Path, ...], workspace: Path) -> list[Path]:
    """The hidden paths that need a mount of their own: not /tmp (the private /tmp hides it
    and must stay writable), nor a path inside another hidden one, unless the workspace
    bind shows it again. Each mount costs time on every call."""
    covers = [*hidden, Path(SANDBOX_TMP)]
    needed = []
    for path in hidden:
        if path in (Path(SANDBOX_TMP), workspace):
            continue  # hiding the workspace would make it read-only over its own bind
        covered = any(other != path and other in path.parents for other in covers)
        if not covered or workspace in path.parents:
            needed.append(path)
    return needed


def hidden_paths(
    names: str, workspace: Path, also: Iterable[Path | None] = (), home: Path | None = None
) -> tuple[Path, ...]:
    """The existing paths to hide: ``names`` (space-separated, ``~`` is the worker's home)
    and ``also`` (other workspaces), resolved, without duplicates or the workspace itself."""
    candidates = [*_candidates(names, str(home or Path.home()))]
    candidates.extend(os.fspath(path) for path in also if path is not None)
    # Read on every call (a path may appear at any time): one resolution each, by the C
    # library where it can (a tenth of os.path.realpath's time, the same answer).
    own = _resolved(os.fspath(workspace)) or os.path.realpath(workspace)
    found: dict[str, None] = {}
    for path in candidates:
        real = _resolved(path)
        if real is not None and real not in (own, "/"):
            found[real] = None
    return tuple(map(Path, found))


@cache
def _candidates(names: str, home: str) -> tuple[str, ...]:
    """``names`` as paths, ``~`` expanded to ``home``."""
    return tuple(os.fspath(_expand(name, Path(home))) for name in names.split())


def _resolved(path: str) -> str | None:
    """``path`` with every symbolic link resolved, or None where it does not exist: what
    ``os.path.realpath(path, strict=True)`` answers, by ``realpath(3)`` where there is one."""
    if _libc_realpath is None:
        try:
            return os.path.realpath(path, strict=True)
        except (OSError, RuntimeError):
            return None
    buffer = ctypes.create_string_buffer(_PATH_MAX)
    if not _libc_realpath(os.fsencode(path), buffer):
        return None
    return os.fsdecode(buffer.value)


def _find_realpath() -> Callable[[bytes, ctypes.Array[ctypes.c_char]], int | None] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).realpath
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    function.restype = ctypes.c_void_p
    return cast("Callable[[bytes, ctypes.Array[ctypes.c_char]], int | None]", function)


def _expand(name: str, home: Path) -> Path:
    if name == "~":
        return home
    if name.startswith("~/"):
        return home / name[2:]
    return Path(name)


# realpath(3) writes at most PATH_MAX bytes into the buffer it is given.
_PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096
_libc_realpath = _find_realpath()


def sandbox_init(pid: int) -> bool:
    """Whether ``pid`` is the first process of a PID namespace of its own (a sandbox's init,
    bubblewrap's, which runs no command code), read from ``/proc/PID/status``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            levels = line.split()[1:]
            return len(levels) > 1 and levels[-1] == "1"
    return False


@dataclass(frozen=True)
class Availability:
    """Whether the sandbox runs here: bwrap's path and version, or why not."""

    bwrap: str | None
    version: str = ""
    reason: str = ""


@cache
def probe(network: bool) -> Availability:
    """Run a sandboxed ``true`` once per worker process: is there a bwrap, and may it work?"""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Availability(None, reason="bubblewrap (bwrap) is not installed on this worker")
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
        with tempfile.TemporaryDirectory(prefix="toolpool-probe-") as folder:
            spec = SandboxSpec(Path(folder), (), network=network, tmp_bytes=1024 * 1024)
            done = subprocess.run(
                [*bwrap_argv(bwrap, spec, Path(folder)), "true"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                stdin=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Availability(None, reason=f"bubblewrap ({bwrap}) could not run: {exc}")
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return Availability(
            None, reason=f"bubblewrap ({bwrap}) cannot make a sandbox here: {said[0]}"
        )
    return Availability(bwrap, version=version)
