"""bash's shell state in a session: where a command starts, and what it ended with.

The working directory and the exported variables a command ends with are kept (by the
``ShellState``'s ``save``, in the session's record in Redis), so the session's next command
starts there, on any worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import weakref
from pathlib import Path

from executor import WorkspaceError
from executor.contract import ShellState, ToolContext
from workers.tools._shell_export import ExportError, exported

# Variables bash sets by itself: never kept as the session's own.
_SHELL_OWN = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "BASH_ENV", "TOOLPOOL_POOL_CHILD"})
_NOT_KEPT = (
    "note: the shell state (working directory, exported variables) could not be kept: Redis "
    "was out of reach; the next command starts from the state kept before this one."
)
# The most of exported variables a session keeps (as JSON): enough for a virtualenv and a
# few settings, not a place to store data.
_MAX_KEPT_ENV = 64 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ShellFiles:
    """The two files that carry a session's shell state out of a command.

    bash reads a start-up file of ours first (``BASH_ENV``, which it unsets, so shells the
    command starts do not read it) that sets an ``EXIT`` trap: at the command's end (``exit``
    included) bash writes its working directory and exported variables to ``fd``, an
    anonymous file of ours that the command inherits. Made before the command (a sandbox made
    ahead shows ``startup`` to the command it will run); ``close`` removes both.

    The variables come from builtins (``export -p``), with no process more on the way to the
    answer; only where the shell has functions (an exported one is in the environment as
    ``BASH_FUNC_NAME%%``) or no ``compgen`` to tell, ``env -0`` lists the environment as is.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115
        self.fd = self._file.fileno()
        variables = (
            "compgen -A function >/dev/null 2>&1; "
            'if [ $? = 1 ]; then builtin printf "export\\0"; builtin export -p; '
            'else builtin printf "env\\0"; env -0; fi'
        )
        save = (
            f'__tp_rc=$?; {{ builtin pwd -P; builtin printf "\\0"; {variables}; }} '
            f">&{self.fd} 2>/dev/null"
        )
        # Removed by this process only (``close``, or when dropped unclosed): a process forked
        # from the worker holds copies of these objects, and its end must not remove the file.
        self._startup = tempfile.NamedTemporaryFile(  # noqa: SIM115
            "w", prefix="toolpool-bash-", delete=False
        )
        self._startup.write(f"unset BASH_ENV\ntrap '{save}; exit $__tp_rc' EXIT\n")
        self._startup.flush()
        # The sandbox shows the command this one file of the worker's temporary folder.
        self.startup = Path(self._startup.name)
        self._removal = weakref.finalize(self, _remove_as, os.getpid(), self.startup)

    def written(self) -> bytes:
        """What the command's shell wrote at its end (nothing if it never got there)."""
        self._file.seek(0)
        return self._file.read()

    def close(self) -> None:
        self._file.close()
        self._startup.close()
        self._removal()


def _remove_as(owner: int, path: Path) -> None:
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            path.unlink()


class SessionShell:
    """A session's shell state around one command: where it starts, and what it ends with.

    The command runs as given, with ``files`` (``ShellFiles``) saying where it ended, so its
    errors read as without a session. A command killed, or one that replaces the shell
    (``exec``) or sets its own ``EXIT`` trap, keeps the earlier state. ``files``: made ahead
    with a sandbox, and closed with it; else made here and closed on leaving.
    """

    def __init__(
        self,
        ctx: ToolContext,
        state: ShellState,
        base_env: dict[str, str],
        files: ShellFiles | None = None,
    ) -> None:
        self._ctx = ctx
        self._state = state
        self._base_env = base_env
        self.notes: list[str] = []
        self.cwd = self._start_dir()
        self._own = files is None
        self.files = ShellFiles() if files is None else files
        self.fd = self.files.fd
        self.startup = self.files.startup
        self.env = {**base_env, **state.env, "BASH_ENV": str(self.startup)}

    def __enter__(self) -> SessionShell:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._own:
            self.files.close()

    def _start_dir(self) -> Path:
        root = self._ctx.workspace.root
        try:
            start = self._ctx.workspace.resolve(self._state.cwd)
        except WorkspaceError:
            start = None
        if start is None or not start.is_dir():
            self.notes.append(
                f"note: the working directory {self._state.cwd!r} left by an earlier command "
                "is outside the session folder or gone; this command ran in the session "
                "folder's root."
            )
            if not self._state.save(".", self._state.env):
                self.notes.append(_NOT_KEPT)
            return root
        return start

    def keep(self) -> list[str]:
        """Save the state the command ended with, for the session's next call; notes to show."""
        if self._ctx.cancelled.is_set():
            return []  # stopped, timed out or lost its lease: the state stays as it was
        data = self.files.written()
        if b"\0" not in data:
            return []  # the shell was replaced (exec) or the trap could not write
        where, _, listed = data.partition(b"\0")
        notes: list[str] = []
        ended = where.decode(errors="replace").rstrip("\n")
        ended_in = Path(ended)
        root = self._ctx.workspace.root
        if ended and (ended_in == root or root in ended_in.parents):
            cwd = str(ended_in.relative_to(root)) if ended_in != root else "."
        elif not ended:  # pwd -P fails in a directory removed under the shell
            cwd = "."
            notes.append(
                "note: the command ended in a directory that no longer exists; the next command "
                "starts in the session folder's root."
            )
        else:
            cwd = "."
            notes.append(
                f"note: the command ended in {ended_in}, outside the session folder; the next "
                "command starts in the session folder's root, not there."
            )
        env = {}
        for name, value in self._listed(listed).items():
            if name not in _SHELL_OWN and self._base_env.get(name) != value:
                env[name] = value
        if len(json.dumps(env)) > _MAX_KEPT_ENV:
            notes.append(
                f"note: the exported variables take more than {_MAX_KEPT_ENV} bytes; they were "
                "not kept for the next command (the working directory was)."
            )
            env = self._state.env
        if not self._state.save(cwd, env):
            notes.append(_NOT_KEPT)
        return notes

    def _listed(self, listed: bytes) -> dict[str, str]:
        """The environment the shell ended with, from what its trap wrote after the cwd."""
        kind, _, rest = listed.partition(b"\0")
        if kind != b"export":  # env -0's NAME=VALUE entries
            pairs = (entry.partition(b"=") for entry in rest.split(b"\0"))
            return {_text(name): _text(value) for name, sep, value in pairs if sep}
        try:
            found = {_text(name): _text(value) for name, value in exported(rest).items()}
        except ExportError:
            return dict(self._state.env)  # not bash's listing: the variables stay as they were
        # What bash cannot hold as a variable (a name that is no identifier) passes through
        # it to the command's children unchanged: the shell ended with it as it started.
        for name, value in self.env.items():
            if not _IDENTIFIER.match(name) and not name.startswith("BASH_FUNC_"):
                found.setdefault(name, value)
        return found


def _text(data: bytes) -> str:
    return data.decode(errors="replace")
