"""``toolpool lock ...``: look at the distributed lock, or end a stuck lease (for an operator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis

from executor.keys import DEFAULT_PREFIX, DEFAULT_SCOPE, Keys
from executor.lock.models import LockStatus, OwnerInfo
from executor.lock.rwlock import RWLock

F = TypeVar("F", bound=Callable[..., Any])


def _connection_options(command: F) -> F:
    command = click.option(
        "--prefix",
        envvar="TOOLPOOL_KEY_PREFIX",
        default=DEFAULT_PREFIX,
        show_default=True,
        help="Key prefix of the toolpool deployment (env TOOLPOOL_KEY_PREFIX).",
    )(command)
    command = click.option(
        "--scope",
        default=DEFAULT_SCOPE,
        show_default=True,
        help="Lock scope: workers sharing a scope share one lock.",
    )(command)
    return click.option(
        "--redis",
        "redis_url",
        envvar="TOOLPOOL_REDIS_URL",
        required=True,
        help="Redis URL, e.g. redis://host:6379/0 or unix:///path/redis.sock "
        "(env TOOLPOOL_REDIS_URL).",
    )(command)


def _open(redis_url: str, scope: str, prefix: str) -> RWLock:
    try:
        client = redis.Redis.from_url(redis_url)
        return RWLock(client, scope, keys=Keys(prefix))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


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
@_connection_options
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(redis_url: str, scope: str, prefix: str, as_json: bool) -> None:
    """Show the lock's holders, its queue and its counters."""
    rwlock = _open(redis_url, scope, prefix)
    try:
        snapshot = rwlock.status()
    except redis.RedisError as exc:
        raise click.ClickException(f"Cannot read the lock at {redis_url}: {exc}") from None
    click.echo(snapshot.model_dump_json(indent=2) if as_json else format_status(snapshot))


@lock.command("release")
@_connection_options
@click.option("--token", required=True, help="The lease token to end (see `lock status`).")
def release(redis_url: str, scope: str, prefix: str, token: str) -> None:
    """Force-release a lease (or drop a waiter); its holder finds out at its next renewal."""
    rwlock = _open(redis_url, scope, prefix)
    try:
        ended = rwlock.force_release(token)
    except redis.RedisError as exc:
        raise click.ClickException(f"Cannot reach the lock at {redis_url}: {exc}") from None
    if not ended:
        raise click.ClickException(
            f"Token {token} neither holds nor waits for the lock on scope {scope!r}; "
            "nothing changed. Check the token with `toolpool lock status`."
        )
    click.echo(f"Released token {token} on lock scope {scope!r}.")
