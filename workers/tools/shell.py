"""The bash tool: a shell command in the workspace, with a time limit and capped output.

The command runs as ``bash -c COMMAND`` in its own session, confined as ``_confine`` says: in
bubblewrap's sandbox where it works, with limits, in a cgroup of its own where one can be made.
That launch is made ahead, off the lock (``_shell_warm``): the call hands a waiting launch its
command, and the used one's cgroup is removed after the answer.
Its process group is the unit of cleanup: on a timeout, a cancel, a lost lock, and also after
a normal exit (background children), the whole group is sent SIGTERM and, after a short
grace, SIGKILL. A process that leaves the group on purpose (``setsid``) dies with the
sandbox's PID namespace, or is found in the cgroup; without either it escapes, and the pipes
it may hold open are abandoned after a short wait, not waited for.

The command gets only an allow-listed part of the worker's environment (``_BASE_ENV`` plus the
names in ``BashSettings.env``, ``TOOLPOOL_BASH_ENV``): the worker's own variables hold secrets
such as the Redis URL with its password, and whatever a model's command can read, the model can
print.

In a session, the shell state carries over from call to call, as in an interactive shell: a
command starts in the directory the session's last command ended in, with the variables it
exported (``workers.tools._shell_state``). The state is kept in Redis, so any worker continues it.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shutil
from collections.abc import Callable, Mapping
from typing import Annotated

from pydantic import Field

from executor import ToolError
from executor.contract import ToolContext, tool
from workers.processes._netns import current, start_soon
from workers.tools._confine import sandbox_for
from workers.tools._shell_peers import ahead_of_peers
from workers.tools._shell_run import ShellRun
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_state import SessionShell
from workers.tools._shell_warm import launch, make_ahead, take, units

# When the runner's deadline is nearer than the wanted time limit, stop this much earlier so
# the kill and the report (with partial output) happen before the runner gives up on us.
_REPORT_MARGIN = 4.0
_MIN_LIMIT = 0.5
# What a shell needs to behave normally (find programs, a home, locale, terminal, time zone,
# temp dir), and nothing that usually holds a credential. TOOLPOOL_POOL_CHILD
# (workers.pool._reaper.TOKEN_ENV) is no secret: it marks a pool child's processes, and the pool
# finds what a dead worker's command left running by it.
_BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "TMPDIR",
    "TOOLPOOL_POOL_CHILD",
)


# bash enforces its own limit (the call's ``timeout`` or the settings' default); the runner's
# limit is only a safety net above any limit the settings allow by default.
_SAFETY_LIMIT = 600.0


@tool(timeout_argument="timeout", timeout=_SAFETY_LIMIT, settings=BashSettings)
def bash(
    ctx: ToolContext,
    command: Annotated[
        str, Field(min_length=1, description="The command line, run as `bash -c COMMAND`.")
    ],
    timeout: Annotated[
        float | None,
        Field(
            gt=0,
            description="Time limit in seconds (default 10, at most 600). The command and "
            "every process it started are killed when it is reached.",
        ),
    ] = None,
) -> str:
    """Run a shell command with bash in the workspace root and return its exit code and output.

    In a session, the working directory and exported variables carry over from the previous
    command, as in an interactive shell.
    stdin is closed; stdout and stderr are reported separately, each cut to its first and last
    halves when over the limit (1 MiB by default). A non-zero exit code is reported, not
    treated as a failure.
    Background processes still running when the command ends are killed: to keep a server, a
    watcher or a REPL running between calls, use process_start (in a session).
    """
    if "\x00" in command:
        # The kernel takes arguments as C strings: a NUL byte cannot reach bash at all.
        raise ToolError(
            "command contains a NUL character (\\0), which cannot be passed to bash; nothing "
            "ran. Remove it; to produce a NUL byte, write printf '\\0' in the command."
        )
    limit = _time_limit(ctx, timeout)
    executable = _bash()
    if executable is None:
        raise ToolError(
            "bash is not available on this worker (no 'bash' on its PATH), so shell commands "
            "cannot run here. Use the file tools (read_file, list_directory, glob, grep) instead."
        )
    settings = ctx.settings_as(BashSettings)
    env = command_environment(os.environ, settings.env)
    cap = settings.max_output_bytes
    root, folders = ctx.workspace.root, ctx.worker_folders
    bwrap = sandbox_for(settings)
    network, starting = _network(ctx, settings, bwrap)
    argv = [executable, "-c", command]
    session = ctx.shell is not None
    unit = take(settings, bwrap, root, folders, network, session, not starting)
    confinement = unit.confinement.placed(root, folders, network)
    env.update(confinement.env)
    try:
        if ctx.shell is None:
            script = launch(unit, confinement, root, env, argv)
            run = ShellRun.attach(unit, script, cap, confinement)
            units().wake()  # the next unit is made beside the command, not before it
            try:
                return run.finish(ctx, limit)
            finally:
                run.close()
        with SessionShell(ctx, ctx.shell, env, unit.files) as shell:
            # A loader variable the session exported (LD_PRELOAD) must not run its code in the
            # launcher or the sandbox, outside the sandbox: it is set inside only.
            script = launch(unit, confinement, shell.cwd, shell.env, argv, (shell.startup,))
            run = ShellRun.attach(unit, script, cap, confinement)
            units().wake()
            if bwrap is not None and ctx.session is not None and settings.warm_peers != "off":
                # The host's other sessions' sandboxes made ahead here too, beside the command.
                place = ctx.session
                ahead_of_peers(settings, bwrap, place.name, place.host_folder, root, folders)
            run.notes.extend(shell.notes)
            try:
                report = run.finish(ctx, limit)
            finally:
                run.close()
            notes = shell.keep()
    finally:
        # Nothing the command started outlives the call: what left its process group
        # (setsid) is found in the cgroup and killed now. In the sandbox it dies with the PID
        # namespace, but only as the sandbox's init ends, after bubblewrap has reported.
        # The cgroup itself is removed after the answer.
        confinement.kill_left(spare_init=confinement.sandboxed)
        units().spend(unit)
    return "\n".join([report, *notes])


def _network(ctx: ToolContext, settings: BashSettings, bwrap: str | None) -> tuple[list[str], bool]:
    """In a session, the prefix that joins its own network namespace, so that what its
    background processes serve on the loopback is reachable; [] for a network of its own.
    And whether the session's network is starting (this network is for this call alone)."""
    if ctx.session is None or bwrap is None or settings.network:
        return [], False
    prefix = current(ctx.session.host_folder)
    if prefix is not None:
        return prefix, False
    # No holder yet, so nothing of the session serves on a loopback: a network of its own is
    # the same to this command. The holder starts off its path, the next sandbox ahead in it.
    root, folders, session = ctx.workspace.root, ctx.worker_folders, ctx.shell is not None

    def started(joined: list[str]) -> None:
        make_ahead(settings, bwrap, root, folders, joined, session)

    start_soon(ctx.session.host_folder, started)
    return [], True


def command_environment(environ: Mapping[str, str], extra: str) -> dict[str, str]:
    """The variables of ``environ`` allowed through: ``_BASE_ENV`` and the ``extra`` names."""
    allowed = _allowed(extra)
    return {name: value for name, value in environ.items() if allowed(name)}


@functools.cache
def _allowed(extra: str) -> Callable[[str], re.Match[str] | None]:
    """Whether a name is one of ``_BASE_ENV`` and the ``extra`` patterns: one pattern of all."""
    patterns = (*_BASE_ENV, *extra.split())
    return re.compile("|".join(fnmatch.translate(pattern) for pattern in patterns)).match


def _bash() -> str | None:
    """bash's path on the worker's ``PATH``, looked up again only when the ``PATH`` changed
    or the file went."""
    path = os.environ.get("PATH")
    found = _found_bash.get(path)
    if found is None or not os.access(found, os.X_OK):
        found = _found_bash[path] = shutil.which("bash")
    return found


_found_bash: dict[str | None, str | None] = {}


def _time_limit(ctx: ToolContext, requested: float | None) -> float:
    maximum = ctx.settings_as(BashSettings).max_timeout
    if requested is not None and requested > maximum:
        raise ToolError(
            f"timeout {requested:g} s is above the maximum of {maximum:g} s. Ask for at most "
            f"{maximum:g} s, or split the work into shorter commands."
        )
    limit = requested if requested is not None else ctx.settings_as(BashSettings).default_timeout
    remaining = ctx.remaining()
    if remaining - _REPORT_MARGIN < limit:
        limit = max(remaining - _REPORT_MARGIN, _MIN_LIMIT)
    return limit
