"""``toolpool status`` and ``toolpool events``: what a deployment is doing."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import click
import redis

from executor._connect import FOLLOWER, STANDARD, connect
from executor._errors import RedisUnavailable, SessionError
from executor._pool_state import snapshot
from executor._settings import Settings, shown_url
from executor.cli._common import (
    connection_options,
    redis_unreachable,
    require_redis,
    session_option,
    settings_for,
)
from executor.wire import (
    Event,
    Keys,
    TurnPlan,
    append_jsonl,
    follow_events,
    read_events,
)


@click.command("status")
@click.option("--scope", default=None, help="Lock scope to show (default: TOOLPOOL_SCOPE).")
@session_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@connection_options
def status_command(
    scope: str | None,
    session: str | None,
    as_json: bool,
    redis_url: str | None,
    prefix: str | None,
) -> None:
    """Queue depth, workers and their current calls, lock holders and waiters, failures.

    With --session: the session's host queue and lock, and the session itself.
    """
    if scope is not None and session is not None:
        raise click.UsageError("Give --scope or --session, not both: a session has its own scope.")
    settings = settings_for(redis_url, prefix, scope=scope)
    client = _connect(settings)
    try:
        report = snapshot(client, settings, session=session)
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None
    except (redis.ConnectionError, redis.TimeoutError, RedisUnavailable) as exc:
        # Redis went away after the probe: the same message as when it was never there.
        raise redis_unreachable(settings.redis.url or "", exc) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Cannot read status from {shown_url(settings.redis.url or '')}: {exc}"
        ) from None
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_status(report)


@click.command("events")
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they arrive.")
@click.option(
    "--jsonl",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also append the events to this JSONL file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of text.")
@click.option(
    "--count",
    type=int,
    default=100,
    show_default=True,
    help="How many recent events to show first.",
)
@click.option("--turn", "turn_id", default=None, help="Only this turn's events.")
@click.option("--call", "call_id", default=None, help="Only this call's events.")
@session_option
@connection_options
def events_command(
    follow: bool,
    jsonl: Path | None,
    as_json: bool,
    count: int,
    turn_id: str | None,
    call_id: str | None,
    session: str | None,
    redis_url: str | None,
    prefix: str | None,
) -> None:
    """Show the structured events (calls, approvals and the lock's), or save them as JSONL.

    With --session, only the events of that session's turns.
    """
    settings = settings_for(redis_url, prefix)
    client = _connect(settings, blocking=follow)
    keys = Keys(settings.redis.key_prefix)
    in_session = _TurnSessions(client, keys)

    def wanted(item: Event) -> bool:
        return (
            (turn_id is None or item.turn_id == turn_id)
            and (call_id is None or item.call_id == call_id)
            and (session is None or in_session(item.turn_id) == session)
        )

    def show(batch: list[Event]) -> None:
        batch = [item for item in batch if wanted(item)]
        for item in batch:
            click.echo(item.to_json_line() if as_json else _event_line(item))
        if jsonl is not None and batch:
            append_jsonl(jsonl, batch)

    try:
        recent = client.xrevrange(keys.events, count=count) if count > 0 else []
        entries = read_events(client, keys, since=_decode(recent[-1][0])) if recent else []
        show([item for _, item in entries])
        if follow:
            last = entries[-1][0] if entries else "$"
            for _, item in follow_events(client, keys, since=last):
                show([item])
    except KeyboardInterrupt:
        pass
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise redis_unreachable(settings.redis.url or "", exc) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Cannot read events from {shown_url(settings.redis.url or '')}: {exc}"
        ) from None
    finally:
        client.close()


class _TurnSessions:
    """The session of each turn, read from its stored plan once (None: no session)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._known: dict[str, str | None] = {}

    def __call__(self, turn_id: str) -> str | None:
        if not turn_id:
            return None
        if turn_id not in self._known:
            raw = self._client.get(self._keys.turn(turn_id))
            self._known[turn_id] = TurnPlan.model_validate_json(raw).session if raw else None
        return self._known[turn_id]


def _connect(settings: Settings, *, blocking: bool = False) -> redis.Redis:
    return connect(require_redis(settings), role=FOLLOWER if blocking else STANDARD)


def _print_status(report: dict[str, Any]) -> None:
    if "session" in report:
        about = report["session"]
        click.echo(
            f"Session {about['name']} on host {about['host']}: {about['state']}, "
            f"{about['calls']} calls, {about['pending']} pending, cwd {about['cwd']}"
        )
    queue = report["queue"]
    click.echo(
        f"Queue {queue['name']}: {queue['queued']} queued, {queue['waiting_on_earlier_calls']} "
        f"waiting on earlier calls, {queue['running']} running, {queue['failed_jobs']} "
        "failed jobs"
    )
    workers = report["workers"]
    in_sessions = sum(1 for worker in workers if worker.get("session_host"))
    of_them = f" ({in_sessions} serve sessions)" if in_sessions else ""
    click.echo(f"Workers: {len(workers)}{of_them}")
    for worker in workers:
        click.echo("  " + _worker_line(worker))
    lock = report["lock"]
    click.echo(
        f"Lock {lock.get('scope', '')}: {len(lock['holders'])} holder(s), "
        f"{len(lock['queue'])} waiter(s)"
    )
    for holder in lock["holders"]:
        owner = holder["owner"]
        click.echo(
            f"  holds {holder['mode']:9}  fence {holder['fence']}  {owner['tool']} "
            f"({owner['call_id']}) on {owner['worker']}  "
            f"{holder['remaining_ms']} ms left"
        )
    for waiter in lock["queue"]:
        click.echo("  " + _waiter_line(waiter, lock.get("server_time_ms")))
    click.echo(f"Recent failures: {len(report['recent_failures'])}")
    for item in report["recent_failures"]:
        click.echo("  " + _event_line(Event.model_validate(item)))


def _worker_line(worker: dict[str, Any]) -> str:
    """One worker for a person: name, pid, state, what it serves, what it runs now."""
    doing = "idle"
    if worker["call_id"]:
        doing = f"running {worker['tool']} ({worker['call_id']})"
        if worker.get("session"):
            doing += f" in session {worker['session']}"
    serves = worker.get("serves") or "pool calls"
    return f"{worker['name']}  pid {worker['pid']}  {worker['state']}  {serves}  {doing}"


def _waiter_line(waiter: dict[str, Any], server_time_ms: int | None) -> str:
    """One lock waiter for a person: its place, mode, call and worker, how long it waited
    and since when (the lock's clock is the Redis server's: the time is taken from it)."""
    owner = waiter.get("owner") or {}
    who = f"{owner.get('tool') or '?'} ({owner.get('call_id') or 'no call'})"
    if owner.get("worker"):
        who += f" on {owner['worker']}"
    age_ms = int(waiter.get("age_ms", 0))
    since = ""
    if server_time_ms is not None:
        since = f" (since {_clock((int(server_time_ms) - age_ms) / 1000)})"
    return (
        f"waits {waiter['mode']:9}  #{waiter.get('position', '?')}  {who}  "
        f"waiting {_span(age_ms)}{since}"
    )


def _span(ms: int) -> str:
    """A wait for a person: milliseconds below a second, else seconds or minutes."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def _event_line(item: Event) -> str:
    """One event for a person: local times with milliseconds, its call and turn (for
    ``toolpool timeline``), no field that holds None."""
    extra = " ".join(
        f"{key}={_shown(key, value)}"
        for key, value in item.data.items()
        if key != "arguments" and value is not None
    )
    call = f"call={item.call_id}" if item.call_id else ""
    turn = f"turn={item.turn_id}" if item.turn_id else ""
    parts = [_clock(item.ts), f"{item.event:22}", f"{item.tool:14}", call, turn, item.worker, extra]
    return " ".join(part for part in parts if part).rstrip()


def _shown(key: str, value: Any) -> str:
    """A data field's value as text; a time (``released_at``) as a local clock time."""
    if key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return _clock(value)
    return str(value)


def _clock(ts: float) -> str:
    """An epoch time as local clock time with milliseconds: ``14:03:27.512``."""
    return datetime.datetime.fromtimestamp(ts).isoformat(timespec="milliseconds")[11:]


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
