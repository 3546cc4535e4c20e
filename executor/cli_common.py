"""Options and helpers shared by toolpool's commands; each option also reads an env var."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
import redis

from executor.errors import ToolpoolError
from executor.registry import ToolRegistry, load_registry
from executor.settings import Settings, shown_url

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

tools_option = click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    envvar="TOOLPOOL_TOOLS",
    metavar="MODULE:ATTR",
    help="Add a registry of your own tools (repeatable; env TOOLPOOL_TOOLS, space-separated).",
)


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


def require_redis(settings: Settings) -> str:
    """The Redis URL, or a usage error that says how to give one."""
    if not settings.redis_url:
        raise click.UsageError(
            "No Redis URL: pass --redis URL or set TOOLPOOL_REDIS_URL "
            "(`toolpool up` starts Redis and workers and prints one)."
        )
    return settings.redis_url


def build_registry(tool_specs: tuple[str, ...]) -> ToolRegistry:
    """The built-in tools plus every registry named with ``--tools``."""
    from workers import builtin_registry  # the CLI is the one place executor needs workers

    registry = builtin_registry()
    for spec in tool_specs:
        for name_spec in spec.split():
            registry = registry.merged(load_registry(name_spec))
    return registry


def or_fail(build: Callable[[], T]) -> T:
    """Run ``build``; a toolpool error becomes a clean CLI error instead of a traceback."""
    try:
        return build()
    except ToolpoolError as exc:
        raise click.ClickException(str(exc)) from None


@contextlib.contextmanager
def talking_to(settings: Settings) -> Iterator[None]:
    """Turn a Redis failure (or a toolpool error) inside the block into a clean CLI error."""
    try:
        yield
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Cannot use Redis at {shown_url(settings.redis_url or '')}: {exc}"
        ) from None
    except ToolpoolError as exc:
        raise click.ClickException(str(exc)) from None
