"""``toolpool metrics``: the pool's metrics for Prometheus to scrape."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from executor._connect import FOLLOWER, READER, connect
from executor._extras import install_extra
from executor.cli._common import connection_options, require_redis, settings_for
from executor.wire import Keys

_MISSING = f"toolpool metrics needs prometheus-client: {install_extra('metrics')}."


@click.command("metrics")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to serve on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9464,
    show_default=True,
    help="The port to serve /metrics on.",
)
@connection_options
def metrics_command(host: str, port: int, redis_url: str | None, prefix: str | None) -> None:
    """Serve the pool's metrics at http://HOST:PORT/metrics, for Prometheus.

    Read at each scrape: the queue's jobs by state, the live workers, the lock's grants,
    expiries, lost leases, holders and waiters. Counted from the events from the moment it
    starts: calls by tool and status, call duration and lock wait histograms, lost calls.
    """
    settings = settings_for(redis_url, prefix)
    try:
        from prometheus_client import start_http_server

        from executor._metrics import pool_registry
    except ImportError:
        raise click.ClickException(_MISSING) from None
    url = require_redis(settings)
    client = connect(url, role=READER)
    registry, counts = pool_registry(client, settings)
    stop = threading.Event()

    def stop_on(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stop_on)
    signal.signal(signal.SIGINT, stop_on)
    server, thread = start_http_server(port, addr=host, registry=registry)
    click.echo(
        f"toolpool metrics: serving on http://{host}:{server.server_port}/metrics", err=False
    )
    # The events are followed on a connection of their own: its reads block.
    follower = connect(url, role=FOLLOWER)
    try:
        counts.follow(follower, Keys(settings.redis.key_prefix), stop)
    finally:
        server.shutdown()
        thread.join(timeout=5)
        follower.close()
        client.close()
    click.echo("toolpool metrics: stopped")
