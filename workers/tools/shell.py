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
import os
import shutil
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from executor import ToolError
from executor.contract import ToolContext, tool
from workers.processes._netns import join
from workers.tools._confine import sandbox_for
from workers.tools._shell_run import ShellRun
from workers.tools._shell_settings import BashSettings
from workers.tools._shell_state import SessionShell
from workers.tools._shell_warm import launch, take, units

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
    executable = shutil.which("bash")
    if executable is None:
        raise ToolError(
            "bash is not available on this worker (no 'bash' on its PATH), so shell commands "
            "cannot run here. Use the file tools (read_file, list_directory, glob, grep) instead."
        )
    settings = ctx.settings_as(BashSettings)
    env = command_environment(os.environ, settings.env)
    cap = settings.max_output_bytes
    root = ctx.workspace.root
    bwrap = sandbox_for(settings)
    network = _network(ctx, bwrap)
    argv = [executable, "-c", command]
    unit = take(settings, bwrap, root, ctx.worker_folders, network, ctx.shell is not None)
    confinement = unit.confinement.placed(root, ctx.worker_folders, network)
    env.update(confinement.env)
    try:
        if ctx.shell is None:
            script = launch(unit, confinement, root, env, argv)
            run = ShellRun.attach(unit, script, cap, confinement)
            try:
                return run.finish(ctx, limit)
            finally:
                run.close()
        with SessionShell(ctx, ctx.shell, env, unit.files) as shell:
            # A loader variable the session exported (LD_PRELOAD) must not run its code in the
            # launcher or the sandbox, outside the sandbox: it is set inside only.
            script = launch(unit, confinement, shell.cwd, shell.env, argv, (shell.startup,))
            run = ShellRun.attach(unit, script, cap, confinement)
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


def _network(ctx: ToolContext, bwrap: str | None) -> list[str]:
    """In a session, the prefix that joins its own network namespace, so that what its
    background processes serve on the loopback is reachable; [] for a network of its own."""
    settings = ctx.settings_as(BashSettings)
    if ctx.session is None or bwrap is None or settings.network:
        return []
    prefix, _ = join(ctx.session.host_folder)
    return prefix


def command_environment(environ: Mapping[str, str], extra: str) -> dict[str, str]:
    """The variables of ``environ`` allowed through: ``_BASE_ENV`` and the ``extra`` names."""
    patterns = (*_BASE_ENV, *extra.split())
    return {
        name: value
        for name, value in environ.items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    }


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
