"""Options and helpers shared by toolpool's commands; each option also reads an env var.

Every command ends with one of these exit codes: ``EXIT_OK``; ``EXIT_FAILED`` when a call
answered an error or the command could not do what it was asked (it says why); click's 2 for
a usage error; ``EXIT_REDIS`` when Redis cannot be reached at the URL given (one message,
``redis_unreachable``, for every command).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
import redis

from executor._connect import PROBE, RedisSettings, RedisURLError, connect
from executor._errors import RedisUnavailable, SessionError, ToolpoolError
from executor._settings import Settings, shown_url
from executor.wire import session_scope

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REDIS = 3

# What an unreachable Redis raises (an AuthenticationError is a ConnectionError too).
_UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def session_option(command: F) -> F:
    """``--session``: run in (or look at) one session (env TOOLPOOL_SESSION)."""
    return click.option(
        "--session",
        envvar="TOOLPOOL_SESSION",
        default=None,
        help="The session: its folder, lock scope and shell state (env TOOLPOOL_SESSION; "
        "default: none, the workers' own workspace).",
    )(command)


def scope_of(settings: Settings, session: str | None) -> str:
    """The lock scope a command looks at: the session's, or the configured one."""
    if session is None:
        return settings.worker.scope
    try:
        return session_scope(session)
    except SessionError as exc:
        raise click.BadParameter(str(exc), param_hint="--session") from None


def connection_options(command: F) -> F:
    """``--redis`` and ``--prefix``, for commands that talk to a deployment."""
    command = click.option(
        "--prefix",
        envvar="TOOLPOOL_KEY_PREFIX",
        default=None,
        help="Key prefix of the deployment (env TOOLPOOL_KEY_PREFIX; default toolpool).",
    )(command)
    return click.option(
        "--redis",
        "redis_url",
        envvar="TOOLPOOL_REDIS_URL",
        default=None,
        help="Redis URL, e.g. redis://host:6379/0, rediss://... or unix:///path/redis.sock "
        "(env TOOLPOOL_REDIS_URL).",
    )(command)


def settings_for(redis_url: str | None, prefix: str | None, **changes: Any) -> Settings:
    """Settings from the environment, with the command's options on top."""
    settings = or_fail(Settings.from_env)
    if redis_url:
        changes["redis_url"] = redis_url
    if prefix:
        changes["key_prefix"] = prefix
    return settings.with_changes(**{k: v for k, v in changes.items() if v is not None})


def require_redis(settings: Settings, *, probe: bool = True) -> str:
    """The Redis URL, once Redis answers there (with ``probe``); else a usage error that
    says how to give one or what is wrong with it, or ``redis_unreachable``'s error."""
    if not settings.redis.url:
        raise click.UsageError(
            "No Redis URL: pass --redis URL or set TOOLPOOL_REDIS_URL "
            "(`toolpool up` starts Redis and workers and prints one)."
        )
    try:
        RedisSettings.from_url(settings.redis.url)
    except RedisURLError as exc:
        raise bad_url(exc) from None
    if probe:
        with probing(settings.redis.url):
            pass
    return settings.redis.url


class RedisUnreachable(click.ClickException):
    """Redis does not answer at the URL a command was given: exit code ``EXIT_REDIS``."""

    exit_code = EXIT_REDIS


def redis_unreachable(url: str, problem: BaseException | str) -> RedisUnreachable:
    """The one error every command gives when Redis does not answer at ``url``: the URL
    (no password), why, and where the URL came from."""
    if isinstance(problem, RedisUnavailable):  # says already where and what it was doing
        said = str(problem)
    else:
        why = problem if isinstance(problem, str) else _reason(problem)
        said = f"Cannot reach Redis at {shown_url(url)}: {why}."
    return RedisUnreachable(
        f"{said} Check the URL (--redis or TOOLPOOL_REDIS_URL), that Redis runs there and "
        "that this machine can reach it."
    )


@contextlib.contextmanager
def probing(url: str) -> Iterator[redis.Redis]:
    """A client on ``url`` once Redis answered a PING there; a Redis failure inside the block
    (or of the PING) is ``redis_unreachable``'s error."""
    try:
        client = connect(url, role=PROBE)
    except RedisURLError as exc:
        raise bad_url(exc) from None
    except ValueError as exc:  # a URL redis-py cannot parse
        raise click.BadParameter(str(exc), param_hint="--redis") from None
    try:
        client.ping()
        yield client
    except redis.RedisError as exc:
        raise redis_unreachable(url, exc) from None
    finally:
        client.close()


def _reason(exc: BaseException) -> str:
    """Why a Redis command failed, in one line without a trailing full stop."""
    text = str(exc).strip() or type(exc).__name__
    # redis-py's Sentinel error goes on with the repr of its client: the first part says it.
    text = text.splitlines()[0].split(" : <", 1)[0]
    return text.rstrip(".")


def bad_url(exc: RedisURLError) -> click.UsageError:
    """The usage error for a Redis URL that does not parse: the URL (no password) and why."""
    return click.UsageError(
        f"Invalid Redis URL {exc.url} (--redis or TOOLPOOL_REDIS_URL): {exc.problem}"
    )


def json_object(text: str, param_hint: str = "--args") -> dict[str, Any]:
    """``text`` parsed as a JSON object, or a usage error that says what is wrong."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=param_hint) from None
    if not isinstance(value, dict):
        raise click.BadParameter(
            'must be a JSON object, e.g. \'{"path": "a.txt"}\'', param_hint=param_hint
        )
    return value


def or_fail(build: Callable[[], T]) -> T:
    """Run ``build``; a toolpool error becomes a clean CLI error instead of a traceback."""
    try:
        return build()
    except ToolpoolError as exc:
        raise click.ClickException(str(exc)) from None


@contextlib.contextmanager
def talking_to(settings: Settings) -> Iterator[None]:
    """Turn a Redis failure (or a toolpool error) inside the block into a clean CLI error:
    Redis gone away is ``redis_unreachable``'s (exit ``EXIT_REDIS``)."""
    try:
        yield
    except (*_UNREACHABLE, RedisUnavailable) as exc:
        raise redis_unreachable(settings.redis.url or "", exc) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Cannot use Redis at {shown_url(settings.redis.url or '')}: {exc}"
        ) from None
    except ToolpoolError as exc:
        raise click.ClickException(str(exc)) from None
