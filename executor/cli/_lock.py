"""``toolpool lock ...``: look at the distributed lock, or end a stuck lease (for an operator)."""

from __future__ import annotations

import click
import redis

from executor._connect import STANDARD, connect
from executor._settings import shown_url
from executor.cli._common import (
    connection_options,
    redis_unreachable,
    require_redis,
    scope_of,
    session_option,
    settings_for,
)
from executor.lock import LockStatus, OwnerInfo, RWLock
from executor.wire import Keys

scope_option = click.option(
    "--scope", default=None, help="Lock scope (env TOOLPOOL_SCOPE; default global)."
)


def _open(
    redis_url: str | None, scope: str | None, prefix: str | None, session: str | None = None
) -> tuple[RWLock, str]:
    if scope is not None and session is not None:
        raise click.UsageError("Give --scope or --session, not both: a session has its own scope.")
    settings = settings_for(redis_url, prefix, scope=scope)
    url = require_redis(settings)
    client = connect(url, role=STANDARD)
    return RWLock(client, scope_of(settings, session), keys=Keys(settings.redis.key_prefix)), url


def _who(owner: OwnerInfo) -> str:
    parts = [
        f"{name}={value}"
        for name, value in (
            ("worker", owner.worker),
            ("host", owner.host),
            ("pid", owner.pid or ""),
            ("tool", owner.tool),
            ("call", owner.call_id),
        )
        if value
    ]
    return " ".join(parts) or "(no owner info)"


def format_status(status: LockStatus) -> str:
    """The human-readable text of ``toolpool lock status``."""
    state = f"held {status.mode} by {len(status.holders)}" if status.holders else "free"
    lines = [f"Lock scope {status.scope!r} (policy {status.policy}): {state}"]
    lines.append(f"Holders ({len(status.holders)}):")
    for holder in status.holders:
        fence = f"  fence={holder.fence}" if holder.fence is not None else ""
        lines.append(
            f"  {holder.mode:<9}  token={holder.token}{fence}  "
            f"lease left={holder.remaining_ms} ms  {_who(holder.owner)}"
        )
    lines.append(f"Queue ({len(status.queue)}):")
    for waiter in status.queue:
        lines.append(
            f"  {waiter.position}. {waiter.mode:<9}  token={waiter.token}  "
            f"waiting {waiter.age_ms} ms  {_who(waiter.owner)}"
        )
    counters = "  ".join(f"{k}={v}" for k, v in status.counters.model_dump().items())
    lines.append(f"Counters: {counters}")
    lines.append(f"Last fence: {status.last_fence}")
    return "\n".join(lines)


@click.group("lock")
def lock() -> None:
    """Inspect the distributed reader/writer lock, or end a stuck lease."""


@lock.command("status")
@connection_options
@scope_option
@session_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(
    redis_url: str | None,
    prefix: str | None,
    scope: str | None,
    session: str | None,
    as_json: bool,
) -> None:
    """Show the lock's holders, its queue and its counters (a session's: --session)."""
    rwlock, url = _open(redis_url, scope, prefix, session)
    try:
        snapshot = rwlock.status()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise redis_unreachable(url, exc) from None
    except redis.RedisError as exc:
        raise click.ClickException(f"Cannot read the lock at {shown_url(url)}: {exc}") from None
    click.echo(snapshot.model_dump_json(indent=2) if as_json else format_status(snapshot))


@lock.command("release")
@connection_options
@scope_option
@session_option
@click.option("--token", required=True, help="The lease token to end (see `lock status`).")
def release(
    redis_url: str | None, prefix: str | None, scope: str | None, session: str | None, token: str
) -> None:
    """Force-release a lease (or drop a waiter); its holder finds out at its next renewal."""
    rwlock, url = _open(redis_url, scope, prefix, session)
    try:
        ended = rwlock.force_release(token)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise redis_unreachable(url, exc) from None
    except redis.RedisError as exc:
        raise click.ClickException(f"Cannot reach the lock at {shown_url(url)}: {exc}") from None
    if not ended:
        raise click.ClickException(
            f"Token {token} neither holds nor waits for the lock on scope {rwlock.scope!r}; "
            "nothing changed. Check the token with `toolpool lock status`."
        )
    click.echo(f"Released token {token} on lock scope {rwlock.scope!r}.")
