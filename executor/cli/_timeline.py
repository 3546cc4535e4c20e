"""``toolpool timeline``: a turn's timeline as SVG, from the pool's events."""

from __future__ import annotations

from pathlib import Path

import click
import redis

from executor._connect import READER, connect
from executor._extras import install_extra
from executor._timeline import render_svg, turn_bars
from executor.cli._common import (
    connection_options,
    redis_unreachable,
    require_redis,
    settings_for,
)
from executor.wire import Keys, TurnPlan, read_events


@click.command("timeline")
@click.argument("turn_id")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write it here, SVG or PNG by the name's suffix (default: SVG on standard output).",
)
@connection_options
def timeline_command(
    turn_id: str, output: Path | None, redis_url: str | None, prefix: str | None
) -> None:
    """Draw TURN_ID's timeline as SVG (or PNG, for -o *.png): a lane per worker, a bar per
    call split into its wait for the lock and its run (shared and exclusive in two colours),
    the batches marked.

    Read from the events Redis keeps (the newest TOOLPOOL_EVENTS_MAXLEN, 10,000 by default).
    """
    if output is not None and output.suffix.lower() not in (".svg", ".png"):
        raise click.BadParameter(f"{output.name}: name it *.svg or *.png", param_hint="--output")
    settings = settings_for(redis_url, prefix)
    client = connect(require_redis(settings), role=READER)
    keys = Keys(settings.redis.key_prefix)
    try:
        events = [item for _, item in read_events(client, keys) if item.turn_id == turn_id]
        stored = client.get(keys.turn(turn_id))
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # Redis went away after the probe: the same message as when it was never there.
        raise redis_unreachable(settings.redis.url or "", exc) from None
    finally:
        client.close()
    if not events:
        raise click.ClickException(
            f"No events of turn {turn_id!r}: it never ran here, or its events were trimmed "
            "since (the stream keeps the newest TOOLPOOL_EVENTS_MAXLEN)."
        )
    plan = TurnPlan.model_validate_json(stored) if stored is not None else None
    bars = turn_bars(events, turn_id, plan)
    svg = render_svg(
        bars, f"turn {turn_id}: {len(bars)} calls on {len({b.worker for b in bars})} workers"
    )
    if output is None:
        click.echo(svg)
        return
    if output.suffix.lower() == ".png":
        output.write_bytes(_png(svg))
    else:
        output.write_text(svg + "\n", encoding="utf-8")
    click.echo(f"{output}: {len(bars)} calls", err=True)


def _png(svg: str) -> bytes:
    """The SVG drawn at twice its size by cairosvg, on the system's cairo library."""
    try:
        import cairosvg  # type: ignore[import-untyped]
    except (ImportError, OSError) as exc:  # OSError: the package is there, libcairo is not
        raise click.ClickException(
            f"A PNG needs cairosvg and the cairo library: {install_extra('png')} (and "
            f"libcairo2 from the system's packages), or write SVG. ({exc})"
        ) from None
    png: bytes = cairosvg.svg2png(bytestring=svg.encode("utf-8"), scale=2)
    return png
