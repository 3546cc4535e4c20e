"""``toolpool worker`` and ``toolpool up``: a worker pool in the foreground, with or without Redis.

``worker_command`` and ``up_command`` join the ``toolpool`` group through its entry points;
``python -m workers.cli worker|up ...`` runs them without the rest of the CLI. Every option
also reads a ``TOOLPOOL_*`` variable, which is how the Docker image is configured.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import click
import redis

from executor._connect import PROBE, connect
from executor._settings import Settings, SettingsGroup, shown_url
from executor.cli._common import (
    connection_options,
    or_fail,
    probing,
    require_redis,
    settings_for,
)
from executor.wire import Keys, SessionStore, host_name
from workers._embedded_redis import RedisServer
from workers.cli._registry import build_registry, tools_option
from workers.pool._pool import PoolChild, WorkerPool
from workers.pool._process import served_registry
from workers.processes._ending import end_session
from workers.sessions._folders import remove_folder
from workers.tools._confine import Report as ConfinementReport
from workers.tools._confine import describe as describe_confinement
from workers.tools._shell_settings import SANDBOX_MODES, BashSettings

F = TypeVar("F", bound=Callable[..., Any])

_FORK_HELP = (
    "Fork a fresh process for every call (RQ's forking Worker) instead of running calls in "
    "the worker process: slower per call, but no state leaks from one call to the next."
)


def _pool_options(command: F) -> F:
    """The options ``worker`` and ``up`` share: how many workers, which tools, how to stop."""
    options = [
        click.option(
            "--workers",
            "-n",
            type=click.IntRange(1, 256),
            default=2,
            show_default=True,
            envvar="TOOLPOOL_WORKERS",
            help="Worker processes (env TOOLPOOL_WORKERS).",
        ),
        tools_option,
        click.option("--fork", is_flag=True, envvar="TOOLPOOL_FORK", help=_FORK_HELP),
        click.option(
            "--read-only",
            is_flag=True,
            envvar="TOOLPOOL_READ_ONLY",
            help="Serve only the tools declared read-only; calls to others get an "
            "error result saying so (env TOOLPOOL_READ_ONLY).",
        ),
        click.option(
            "--disable-tool",
            "disabled_tools",
            multiple=True,
            metavar="NAME",
            envvar="TOOLPOOL_DISABLE_TOOLS",
            help="Do not serve this tool, e.g. bash (repeatable; env "
            "TOOLPOOL_DISABLE_TOOLS, space-separated).",
        ),
        click.option(
            "--sandbox",
            type=click.Choice(SANDBOX_MODES),
            default=None,
            help="bash's sandbox (bubblewrap): auto (the default) uses it where it "
            "works and warns where not; required refuses to start without it; "
            "off runs commands unconfined (env TOOLPOOL_BASH_SANDBOX).",
        ),
        click.option(
            "--bash-network/--no-bash-network",
            default=None,
            help="Let sandboxed bash commands use the network (default: no network; "
            "env TOOLPOOL_BASH_NETWORK).",
        ),
        click.option(
            "--grace",
            type=click.FloatRange(0),
            default=60.0,
            show_default=True,
            envvar="TOOLPOOL_STOP_GRACE",
            help="On SIGINT/SIGTERM, seconds the calls in flight may take to finish "
            "before their workers are killed (env TOOLPOOL_STOP_GRACE).",
        ),
        click.option(
            "--log-level",
            default="WARNING",
            show_default=True,
            envvar="TOOLPOOL_LOG_LEVEL",
            type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
            help="Logging level of the pool and its workers (env TOOLPOOL_LOG_LEVEL).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


class _WorkspacePath(click.Path):
    """A folder that must exist; when the option is required and missing, says how to give it."""

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None) -> str:
        return (
            "Pass --workspace DIR or set TOOLPOOL_WORKSPACE to the folder the file tools may "
            "touch (a worker never defaults to the current folder)."
        )


def _workspace_option(default: str | None) -> Callable[[F], F]:
    """``--workspace``: optional when ``default`` is None (``worker``, which then needs
    ``--sessions-root``), else defaulted (``up``)."""
    # Click 8.3+ takes an explicit ``default=None`` as a value: pass one only when there is one.
    defaults: dict[str, Any] = {"default": default, "show_default": True} if default else {}
    return click.option(
        "--workspace",
        type=_WorkspacePath(exists=True, file_okay=False, path_type=Path, resolve_path=True),
        envvar="TOOLPOOL_WORKSPACE",
        help="The folder the file tools may touch in calls without a session; it must exist "
        "(env TOOLPOOL_WORKSPACE).",
        **defaults,
    )


def _sessions_options(command: F) -> F:
    """``--sessions-root`` and ``--host``: serve sessions from folders on this host's disk."""
    options = [
        click.option(
            "--sessions-root",
            type=click.Path(exists=True, file_okay=False, path_type=Path, resolve_path=True),
            envvar="TOOLPOOL_SESSIONS_ROOT",
            default=None,
            help="Serve sessions: session S lives in DIR/S (env "
            "TOOLPOOL_SESSIONS_ROOT). Without --workspace, only session calls.",
        ),
        click.option(
            "--host",
            "host",
            envvar="TOOLPOOL_HOST",
            default=None,
            help="The host name sessions are pinned to (env TOOLPOOL_HOST; default "
            "this machine's name). Workers sharing a disk share it.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("worker")
@connection_options
@_workspace_option(None)
@_sessions_options
@click.option(
    "--queue",
    envvar="TOOLPOOL_QUEUE",
    default=None,
    help="Queue to take calls from (env TOOLPOOL_QUEUE; default 'default').",
)
@click.option(
    "--scope",
    envvar="TOOLPOOL_SCOPE",
    default=None,
    help="Lock scope (env TOOLPOOL_SCOPE; default 'global'). Workers that share "
    "files must share a scope.",
)
@_pool_options
def worker_command(
    redis_url: str | None,
    prefix: str | None,
    workspace: Path | None,
    sessions_root: Path | None,
    host: str | None,
    queue: str | None,
    scope: str | None,
    workers: int,
    tool_specs: tuple[str, ...],
    fork: bool,
    read_only: bool,
    disabled_tools: tuple[str, ...],
    sandbox: str | None,
    bash_network: bool | None,
    grace: float,
    log_level: str,
) -> None:
    """Serve tool calls from Redis with a supervised pool of worker processes.

    A worker that dies is replaced and its call in flight answered at once. SIGINT or SIGTERM
    stops the pool gracefully (calls in flight finish, up to --grace seconds); a second one
    stops it at once.
    """
    if workspace is None and sessions_root is None:
        raise click.UsageError(
            "Give the worker a folder: --workspace DIR (the folder its file tools may touch), "
            "or --sessions-root DIR to serve sessions (one folder per session), or both. "
            "Or set TOOLPOOL_WORKSPACE."
        )
    settings = settings_for(
        redis_url,
        prefix,
        workspace=workspace or sessions_root,
        queue=queue,
        scope=scope,
        sessions_root=sessions_root,
        host=host,
        serve_pool_calls=workspace is not None,
    )
    url = require_redis(settings, probe=False)  # probed below, once the input is checked
    _check_names(settings)
    served = _served(tool_specs, read_only, disabled_tools)
    settings = _with_tool_settings(settings, served, sandbox, bash_network)
    sandbox_report = _check_sandbox(settings, served)
    _check_redis(url, replicas=settings.redis.replicas)
    _setup_logging(log_level)
    pool = _build_pool(url, settings, workers, served, fork, log_level, grace)
    where = []
    worker = settings.worker
    if worker.serve_pool_calls:
        where.append(
            f"queue {settings.client.queue!r}, scope {worker.scope!r}, workspace {worker.workspace}"
        )
    if worker.sessions_root is not None:
        where.append(f"sessions in {worker.sessions_root} on host {host_name(worker.host)!r}")
    click.echo(
        f"toolpool worker: {_processes(workers)} ({_mode(fork, workers)}) on {shown_url(url)}, "
        + "; ".join(where)
    )
    click.echo(f"toolpool worker: {served.describe()}")
    _print_sandbox(sandbox_report, "toolpool worker")
    _run_pool(pool, "toolpool worker")
    click.echo("toolpool worker: stopped")


@click.command("up")
@click.option(
    "--redis",
    "redis_url",
    envvar="TOOLPOOL_REDIS_URL",
    default=None,
    help="Use this Redis (env TOOLPOOL_REDIS_URL); without it, start a private one.",
)
@_workspace_option(".")
@_sessions_options
@_pool_options
def up_command(
    redis_url: str | None,
    workspace: Path,
    sessions_root: Path | None,
    host: str | None,
    workers: int,
    tool_specs: tuple[str, ...],
    fork: bool,
    read_only: bool,
    disabled_tools: tuple[str, ...],
    sandbox: str | None,
    bash_network: bool | None,
    grace: float,
    log_level: str,
) -> None:
    """Run Redis and a worker pool in the foreground, for one machine.

    Without --redis (or TOOLPOOL_REDIS_URL) it starts a private redis-server on a free port
    and prints its URL for orchestrators. Ctrl+C stops the workers (calls in flight finish),
    then Redis.
    """
    settings = settings_for(
        redis_url,
        None,
        workspace=workspace,
        sessions_root=sessions_root,
        host=host,
    )
    _check_names(settings)
    served = _served(tool_specs, read_only, disabled_tools)
    settings = _with_tool_settings(settings, served, sandbox, bash_network)
    sandbox_report = _check_sandbox(settings, served)
    _setup_logging(log_level)
    server: RedisServer | None = None
    if settings.redis.url:
        _check_redis(settings.redis.url, replicas=settings.redis.replicas)
        url = settings.redis.url
        click.echo(f"toolpool up: Redis at {shown_url(url)}")
    else:
        server = _start_private_redis()
        url = server.url
        click.echo(
            f"toolpool up: private Redis (redis-server pid {server.pid}) at "
            f"{server.tcp_url} and {server.url}"
        )
    try:
        pool = _build_pool(url, settings, workers, served, fork, log_level, grace)
        sessions = (
            ""
            if settings.worker.sessions_root is None
            else f", sessions in {settings.worker.sessions_root}"
        )
        click.echo(
            f"toolpool up: {_processes(workers)} ({_mode(fork, workers)}), "
            f"workspace {settings.worker.workspace}{sessions}"
        )
        click.echo(f"toolpool up: {served.describe()}")
        _print_sandbox(sandbox_report, "toolpool up")
        if server is not None:
            click.echo("Point orchestrators at this Redis:")
            click.echo(f"  export TOOLPOOL_REDIS_URL={server.tcp_url}")
        _run_pool(pool, "toolpool up")
        if server is not None and settings.worker.sessions_root is not None:
            _remove_private_sessions(server.url, settings)
    finally:
        if server is not None:
            server.stop()
    click.echo("toolpool up: stopped" + (", Redis too" if server is not None else ""))


@dataclass(frozen=True)
class _Served:
    """Which tools the pool's workers serve: ``--tools``, ``--read-only``, ``--disable-tool``."""

    tool_specs: tuple[str, ...]
    read_only: bool
    disabled: tuple[str, ...]
    names: tuple[str, ...]
    settings_classes: tuple[type[SettingsGroup], ...] = ()

    def describe(self) -> str:
        how = []
        if self.read_only:
            how.append("read-only")
        if self.disabled:
            how.append(f"disabled: {', '.join(self.disabled)}")
        suffix = f" ({'; '.join(how)})" if how else ""
        return f"serving {', '.join(self.names)}{suffix}"


def _served(
    tool_specs: tuple[str, ...], read_only: bool, disabled_tools: tuple[str, ...]
) -> _Served:
    """Load the tools here once, so that a bad --tools or --disable-tool fails now, not in
    every worker."""
    disabled = tuple(dict.fromkeys(n for item in disabled_tools for n in item.split()))
    registry = or_fail(
        lambda: served_registry(
            build_registry(tool_specs), read_only=read_only, disabled=frozenset(disabled)
        )
    )
    return _Served(
        tool_specs, read_only, disabled, tuple(registry.names()), registry.settings_classes()
    )


def _with_tool_settings(
    settings: Settings, served: _Served, sandbox: str | None, network: bool | None
) -> Settings:
    """The served tools' own settings from the environment, read here once so that a bad
    value fails now, with ``--sandbox`` and ``--bash-network`` on top of bash's."""
    tools = [or_fail(kind.from_env) for kind in served.settings_classes]
    settings = settings.with_tools(*tools)
    if BashSettings not in served.settings_classes:
        return settings
    bash = settings.tool(BashSettings)
    bash = replace(
        bash,
        sandbox=bash.sandbox if sandbox is None else sandbox,
        network=bash.network if network is None else network,
    )
    return settings.with_tools(bash)


def _check_sandbox(settings: Settings, served: _Served) -> ConfinementReport | None:
    """How bash commands will be confined; refuses to start where the sandbox is required
    and cannot run. Checked here, once, as the workers' user on the workers' machine."""
    if "bash" not in served.names:
        return None
    report = describe_confinement(settings.tool(BashSettings))
    if report.refusal:
        raise click.ClickException(report.refusal)
    return report


def _print_sandbox(report: ConfinementReport | None, who: str) -> None:
    if report is None:
        return
    for line in report.lines:
        click.echo(f"{who}: {line}")
    if report.warning:
        click.echo(f"{who}: {report.warning}", err=True)


def _build_pool(
    url: str,
    settings: Settings,
    workers: int,
    served: _Served,
    fork: bool,
    log_level: str,
    grace: float,
) -> WorkerPool:
    return or_fail(
        lambda: WorkerPool(
            url,
            settings,
            workers=workers,
            tool_specs=served.tool_specs,
            forking=fork,
            read_only=served.read_only,
            disabled_tools=served.disabled,
            logging_level=log_level,
            grace=grace,
        )
    )


def _remove_private_sessions(url: str, settings: Settings) -> None:
    """Remove the folders of the sessions this host's workers made for a private Redis: its
    records go with it, and a folder left behind would refuse the same session name at the
    next ``up``. A session folder that is gone already, or of another host, is left be."""
    root = settings.worker.sessions_root
    assert root is not None
    host = host_name(settings.worker.host)
    keys = Keys(settings.redis.key_prefix)
    removed: list[str] = []
    try:
        client = connect(url, role=PROBE)
        try:
            store = SessionStore(client, keys)
            for info in store.read_many(store.names()):
                if info.host != host:
                    continue
                end_session(Path(root), info.name, "its session's private Redis stopped")
                if remove_folder(Path(root), info.name):
                    removed.append(info.name)
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        click.echo(f"toolpool up: could not remove the session folders in {root}: {exc}", err=True)
        return
    if removed:
        click.echo(
            f"toolpool up: removed the folders of sessions {', '.join(sorted(removed))} from "
            f"{root} (their private Redis stops with this pool)"
        )


def _start_private_redis() -> RedisServer:
    server = or_fail(lambda: RedisServer(tcp=True))
    # Ctrl+C in a terminal signals the whole foreground process group, redis-server too, and
    # it would quit before the workers' calls in flight store their results. A blocked signal
    # stays blocked across exec, so this Redis ignores SIGINT; stop() ends it with SIGTERM.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        or_fail(server.start)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    except BaseException:
        # Includes a KeyboardInterrupt delivered as SIGINT is unblocked.
        server.stop()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        raise
    return server


def _check_names(settings: Settings) -> None:
    try:
        keys = Keys(settings.redis.key_prefix)
        keys.lock(settings.worker.scope)
        keys.queue_name(settings.client.queue)
        host_name(settings.worker.host)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _check_redis(url: str, *, replicas: int = 0) -> None:
    """Redis answers at ``url`` (else the error every command gives); and a warning if fewer
    replicas are connected than every acknowledged write waits for (a replica may still be
    starting: not refused)."""
    shown = shown_url(url)
    with probing(url) as client:
        connected = int(client.info("replication").get("connected_slaves", 0)) if replicas else 0
    if connected < replicas:
        click.echo(
            f"toolpool: warning: TOOLPOOL_REDIS_REPLICAS={replicas}, but the primary at {shown} "
            f"has {connected} replica(s) connected: every call fails as in an outage until "
            f"{replicas} acknowledge its writes.",
            err=True,
        )


def _processes(count: int) -> str:
    return f"{count} worker process" if count == 1 else f"{count} worker processes"


def _mode(fork: bool, workers: int) -> str:
    if fork:
        return "a forked process per call"
    return "calls run in the worker process" + ("" if workers == 1 else "es")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(message)s")


def _run_pool(pool: WorkerPool, who: str) -> None:
    """Serve until SIGINT/SIGTERM, saying at once what the stop does: the wait for the
    calls in flight is silent otherwise, and a second Ctrl-C, pressed to hurry it, kills
    them."""

    def stopping(calls: int | None) -> None:
        if calls == 0:
            click.echo(f"{who}: stopping: no call in flight", err=True)
            return
        running = "the calls in flight" if calls is None else _calls(calls) + " in flight"
        click.echo(
            f"{who}: stopping: finishing {running} (up to {pool.grace:g} s); press Ctrl-C "
            "again to stop now (those calls answer worker_lost)",
            err=True,
        )

    def hurry() -> None:
        click.echo(
            f"{who}: stopping now: the workers are killed, their calls answer worker_lost",
            err=True,
        )

    pool.run(on_start=_print_children, on_stopping=stopping, on_hurry=hurry)


def _calls(count: int) -> str:
    return "1 call" if count == 1 else f"{count} calls"


def _print_children(children: list[PoolChild]) -> None:
    for child in children:
        click.echo(f"worker {child.name} pid {child.pid}")
