"""``toolpool session ...``: create, list, show and delete sessions."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Sequence
from pathlib import Path

import click

from executor._settings import Settings
from executor.cli._common import connection_options, require_redis, settings_for, talking_to
from executor.client import Sessions
from executor.lock import LockStatus
from executor.wire import ProcessRecord, SessionInfo

# A command is shown up to this many characters in a table; --json has it whole.
_COMMAND_SHOWN = 60


def _sessions(settings: Settings) -> Sessions:
    require_redis(settings)
    try:
        return Sessions(settings=settings)
    except ValueError as exc:  # a URL redis-py cannot parse
        raise click.BadParameter(str(exc), param_hint="--redis") from None


@click.group("session")
def session() -> None:
    """Create, list, show and delete sessions: one agent's folder, lock scope and shell.

    Workers serve sessions when started with `toolpool worker --sessions-root DIR`; a call
    runs in a session with `--session NAME` (or TOOLPOOL_SESSION, or
    Executor(session=NAME)).
    """


@session.command("create")
@click.argument("name")
@click.option(
    "--from",
    "template",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Copy this folder (on the session's host) as the session's files, as `cp -a` does.",
)
@click.option(
    "--host", default=None, help="The host whose disk holds it (default: the least loaded)."
)
@click.option(
    "--idle-ttl",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Delete the session after this long without a call (0: never; default "
    "TOOLPOOL_SESSION_IDLE_TTL or 86400).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Seconds to wait for the host to make the folder.",
)
@connection_options
def create_command(
    name: str,
    template: Path | None,
    host: str | None,
    idle_ttl: float | None,
    timeout: float,
    redis_url: str | None,
    prefix: str | None,
) -> None:
    """Create session NAME, empty or as a copy of a folder, on one host's disk."""
    settings = settings_for(redis_url, prefix)
    started = time.monotonic()
    with talking_to(settings), _sessions(settings) as sessions:
        info = sessions.create(
            name, template=template, host=host, idle_ttl=idle_ttl, timeout=timeout
        )
    took = time.monotonic() - started
    source = f" from {info.template}" if info.template else ""
    click.echo(f"Created session {info.name!r} on host {info.host!r}{source} in {took:.2f} s.")


@session.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines, one session a line.")
@connection_options
def list_command(as_json: bool, redis_url: str | None, prefix: str | None) -> None:
    """List sessions: host, state, size, calls, last use, lock holder."""
    settings = settings_for(redis_url, prefix)
    with talking_to(settings), _sessions(settings) as sessions:
        infos = sessions.list()
        locks = {info.name: sessions.lock_status(info.name) for info in infos}
        running = {info.name: _running(sessions.store.processes(info.name)) for info in infos}
        live = sessions.hosts()
    if as_json:
        for info in infos:
            shown = _as_json(info, locks[info.name], info.host in live)
            click.echo(json.dumps({**shown, "processes_running": running[info.name]}))
        return
    if not infos:
        click.echo("No sessions. Create one with `toolpool session create NAME`.")
        return
    rows = [
        (
            "SESSION",
            "HOST",
            "STATE",
            "SIZE",
            "CALLS",
            "PENDING",
            "PROCS",
            "LAST USE",
            "EXPIRES",
            "LOCK",
        )
    ]
    for info in infos:
        host = info.host if info.host in live else f"{info.host} (no live worker)"
        rows.append(
            (
                info.name,
                host,
                info.state,
                _size(info.size_bytes),
                str(info.calls),
                str(info.pending),
                str(running[info.name]),
                _ago(info.last_used),
                _expires(info),
                _holder(locks[info.name]),
            )
        )
    for line in _table(rows):
        click.echo(line)


@session.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@connection_options
def show_command(name: str, as_json: bool, redis_url: str | None, prefix: str | None) -> None:
    """Show one session: its record, shell state, lock and background processes."""
    settings = settings_for(redis_url, prefix)
    with talking_to(settings), _sessions(settings) as sessions:
        info = sessions.get(name)
        lock = sessions.lock_status(name)
        live = info.host in sessions.hosts()
        processes = sessions.processes(name)
    if as_json:
        shown = _as_json(info, lock, live)
        shown["processes"] = [_process_json(record) for record in processes]
        click.echo(json.dumps(shown, indent=2))
        return
    for key, value in _shown(info, lock, live):
        click.echo(f"{key:12} {value}".rstrip())
    for line in _processes_shown(processes):
        click.echo(line)


def _processes_shown(records: list[ProcessRecord]) -> list[str]:
    """``session show``'s background processes: a heading line, then one row each."""
    if not records:
        return [f"{'processes':12} no background processes"]
    heading = f"{'processes':12} {len(records)} ({_running(records)} running)"
    rows = [("ID", "STATE", "AGE", "PID OR ENDING", "OUTPUT", "COMMAND")]
    for record in records:
        running = record.state in ("starting", "running")
        rows.append(
            (
                record.id,
                record.state,
                _duration(record.age_s),
                f"pid {record.pid}" if running else record.ending(),
                # While it runs: as of the session's last process call or the host's last sweep.
                _size(record.output_bytes),
                _short(record.command),
            )
        )
    return [heading, *("  " + line for line in _table(rows))]


def _process_json(record: ProcessRecord) -> dict[str, object]:
    shown: dict[str, object] = record.model_dump()
    shown["age_s"] = round(record.age_s, 3)
    shown["ending"] = record.ending()
    return shown


def _running(records: list[ProcessRecord]) -> int:
    return sum(1 for record in records if record.state in ("starting", "running"))


def _short(command: str, most: int = _COMMAND_SHOWN) -> str:
    """A command on one line of at most ``most`` characters, an ellipsis where it was cut."""
    line = " ".join(command.split())
    return line if len(line) <= most else line[: most - 1] + "…"


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as lines of columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows]


def _shown(info: SessionInfo, lock: LockStatus, live: bool) -> list[tuple[str, str]]:
    """``session show``'s lines for a person: times as local ISO times with their age, the
    size in units (or when it is not counted yet), the environment's names."""
    size = "unknown (not counted yet)" if info.size_bytes is None else _size(info.size_bytes)
    if info.size_bytes is not None and info.size_at is not None:
        size += f" (counted {_ago(info.size_at)})"
    ttl = "never expires" if info.idle_ttl <= 0 else f"{_duration(info.idle_ttl)} without a call"
    return [
        ("name", info.name),
        ("host", info.host + ("" if live else " (no live worker)")),
        ("state", info.state),
        ("created", _when(info.created_at)),
        ("last used", _when(info.last_used)),
        ("calls", f"{info.calls} ({info.pending} waiting or running)"),
        ("idle ttl", ttl),
        ("expires", "never" if info.expires_at is None else _when(info.expires_at)),
        ("size", size),
        ("template", info.template or "none (created empty)"),
        ("cwd", info.cwd),
        ("env", ", ".join(sorted(info.env)) or "none set"),
        ("lock", _holder(lock)),
    ]


@session.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Cancel the session's waiting and running calls first.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for cancelled calls to end and for the host.",
)
@connection_options
def delete_command(
    name: str, force: bool, timeout: float, redis_url: str | None, prefix: str | None
) -> None:
    """Delete session NAME: its folder and all it keeps in Redis.

    Refused while calls of the session wait or run, unless --force.
    """
    settings = settings_for(redis_url, prefix)
    with talking_to(settings), _sessions(settings) as sessions:
        host = sessions.get(name).host
        removed = sessions.delete(name, force=force, timeout=timeout)
    if removed:
        click.echo(f"Deleted session {name!r}: its folder on host {host!r} and its keys.")
    else:
        click.echo(
            f"Deleted session {name!r}'s keys; no worker on host {host!r} is live, so "
            "its folder there was left in place."
        )


def _as_json(info: SessionInfo, lock: LockStatus, live: bool) -> dict[str, object]:
    return {
        "name": info.name,
        "host": info.host,
        "host_live": live,
        "state": info.state,
        "created_at": info.created_at,
        "last_used": info.last_used,
        "calls": info.calls,
        "pending": info.pending,
        "idle_ttl": info.idle_ttl,
        "expires_at": info.expires_at,
        "size_bytes": info.size_bytes,
        "template": info.template,
        "cwd": info.cwd,
        "env": sorted(info.env),
        "lock": _holder(lock),
    }


def _holder(lock: LockStatus) -> str:
    if not lock.holders:
        return "free" if not lock.queue else f"free, {len(lock.queue)} waiting"
    held = ", ".join(
        f"{h.mode} {h.owner.tool or '?'} ({h.owner.call_id or '?'})" for h in lock.holders
    )
    return held + (f", {len(lock.queue)} waiting" if lock.queue else "")


def _size(size: int | None) -> str:
    """Bytes in decimal units, as ``du --si`` and file managers say them: ``12.3 KB``."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _duration(seconds: float) -> str:
    """A span of time in the unit a person reads it in: ``45 s``, ``12 min``, ``3.5 h``,
    ``2.0 days``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _ago(ts: float) -> str:
    return _duration(max(0.0, time.time() - ts)) + " ago"


def _when(ts: float) -> str:
    """An epoch time as a local ISO time, with how long ago (or how soon) it is."""
    at = datetime.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")
    ahead = ts - time.time()
    return f"{at} ({'in ' + _duration(ahead) if ahead > 0 else _ago(ts)})"


def _expires(info: SessionInfo) -> str:
    ends = info.expires_at
    if ends is None:
        return "never"
    return datetime.datetime.fromtimestamp(ends).isoformat(timespec="seconds")
