"""``toolpool dashboard``: a live web page of the pool."""

from __future__ import annotations

import contextlib
import signal

import click

from executor._extras import install_extra
from executor.cli._common import connection_options, require_redis, settings_for

_MISSING = f"toolpool dashboard needs its web server: {install_extra('dashboard')}."


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to serve on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8766,
    show_default=True,
    help="The port to serve on.",
)
@click.option(
    "--token",
    envvar="TOOLPOOL_DASHBOARD_TOKEN",
    default=None,
    help="Require this token: `Authorization: Bearer TOKEN` or `?token=TOKEN` "
    "(env TOOLPOOL_DASHBOARD_TOKEN; set it there: a command line is "
    "public).",
)
@connection_options
def dashboard_command(
    host: str, port: int, token: str | None, redis_url: str | None, prefix: str | None
) -> None:
    """Serve a live, read-only web page of the pool at http://HOST:PORT/.

    Workers and the call each runs, sessions, the lock's holders, waiters and counters, the
    queue, recent calls (with their results), and any turn's timeline; it updates from the
    pool's events as they happen. /metrics serves the pool's metrics for Prometheus.
    """
    settings = settings_for(redis_url, prefix)
    try:
        import uvicorn

        from executor.dashboard import dashboard_app
    except ImportError:
        raise click.ClickException(_MISSING) from None
    url = require_redis(settings)
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        click.echo(
            f"toolpool dashboard: WARNING: serving {host} without --token: anyone who can "
            "reach it can read every call's arguments and results.",
            err=True,
        )
    app = dashboard_app(settings, url, token=token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    click.echo(f"toolpool dashboard: serving on http://{host}:{port}/")
    # uvicorn stops on SIGTERM, then raises it again under the handler it found there: this
    # one, so that the command ends as on Ctrl-C, saying it stopped (exit 0; a container's stop).
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    click.echo("toolpool dashboard: stopped")
