"""``toolpool mcp``: the pool's tools for MCP clients, over stdio or streamable HTTP."""

from __future__ import annotations

import contextlib
import sys

import click

from executor._errors import ConfigurationError
from executor._extras import install_extra
from executor.cli._common import connection_options, require_redis, session_option, settings_for

_MISSING = f"toolpool mcp needs the MCP SDK (the official `mcp` package): {install_extra('mcp')}."


@click.command("mcp")
@connection_options
@session_option
@click.option(
    "--session-per-client",
    is_flag=True,
    help="Give each client connection a session of its own (its own folder, lock "
    "scope and shell), made at its first request; it is deleted after the "
    "sessions' idle time (TOOLPOOL_SESSION_IDLE_TTL). Needs workers that "
    "serve sessions.",
)
@click.option(
    "--http",
    "use_http",
    is_flag=True,
    help="Serve streamable HTTP at http://HOST:PORT/mcp for many clients, instead of "
    "one client on stdin/stdout.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http: the address.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="With --http: the port.",
)
@click.option(
    "--token",
    envvar="TOOLPOOL_MCP_TOKEN",
    default=None,
    help="With --http: require `Authorization: Bearer TOKEN` (env "
    "TOOLPOOL_MCP_TOKEN; set it there: a command line is public).",
)
@click.option(
    "--allow-tool",
    "allow",
    multiple=True,
    metavar="NAME",
    help="Offer only this tool (repeat for more); the others are not listed and "
    "calls to them are refused.",
)
@click.option(
    "--deny-tool",
    "deny",
    multiple=True,
    metavar="NAME",
    help="Withhold this tool (repeat for more).",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Offer only the read-only tools (no write_file, edit_file, bash).",
)
@click.option(
    "--check",
    "check",
    metavar="MODULE:FUNCTION",
    default=None,
    help="check(call, tool) -> reason or None, asked for every call; a reason "
    "refuses the call (and, in a /turns turn, the calls after it).",
)
@click.option(
    "--approve",
    "approve",
    metavar="MODULE:FUNCTION",
    default=None,
    help="approve(call, tool) -> bool, asked for every call of a tool that is not "
    "read-only; False refuses it.",
)
def mcp_command(
    redis_url: str | None,
    prefix: str | None,
    session: str | None,
    session_per_client: bool,
    use_http: bool,
    host: str,
    port: int,
    token: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    read_only: bool,
    check: str | None,
    approve: str | None,
) -> None:
    """Serve the pool's tools to MCP clients.

    tools/list gives the live workers' tools, with read-only and destructive hints; tools/call
    runs the call on the pool (a client's cancel cancels it there). With --session, every call
    runs in that session's folder and lock scope.

    Without --http it speaks MCP on stdin/stdout, for a client that starts it as a subprocess.
    """
    settings = settings_for(redis_url, prefix)
    if session and session_per_client:
        raise click.UsageError("Give --session NAME or --session-per-client, not both.")
    # The MCP SDK (and anyio with it) is an extra: every other command works without it.
    try:
        import anyio

        from executor.mcp import ServerPolicy, serve_http, serve_stdio
    except ImportError:
        raise click.ClickException(_MISSING) from None
    try:
        policy = ServerPolicy.build(
            allow=allow, deny=deny, read_only=read_only, check=check, approve=approve
        )
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    require_redis(settings)
    if not use_http:
        anyio.run(
            lambda: serve_stdio(
                settings, session=session, session_per_client=session_per_client, policy=policy
            )
        )
        return
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        click.echo(
            f"toolpool mcp: WARNING: serving {host} without --token: anyone who can "
            "reach it can run every tool the pool serves.",
            err=True,
        )

    def ready(url: str) -> None:
        click.echo(f"toolpool mcp: serving on {url}")
        sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(
            lambda: serve_http(
                settings,
                host=host,
                port=port,
                session=session,
                session_per_client=session_per_client,
                token=token,
                on_ready=ready,
                policy=policy,
            )
        )
    click.echo("toolpool mcp: stopped")
