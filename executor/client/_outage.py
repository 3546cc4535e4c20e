"""What an unreachable Redis means on the orchestrator's side, and riding an outage out.

Every Redis command of the orchestrator fails after 10 s rather than never (a paused or cut-off
Redis), after one quick reconnect (a restarted Redis closed the pooled connection): the
``ORCHESTRATOR`` role of ``executor/_connect.py``. Waiting out a longer outage is
``collect``'s job, against its own deadline; what cannot wait raises ``RedisUnavailable``
saying what was being done.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import redis
import redis.asyncio

from executor import _connect as factory
from executor._errors import ConfigurationError, RedisUnavailable
from executor._settings import Settings, shown_url

log = logging.getLogger(__name__)

# What an unreachable Redis raises; AuthenticationError is a ConnectionError that waiting
# does not cure, so it is let through as it is.
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)
# Between attempts while an outage is ridden out: short first (a restart takes ~1 s).
_FIRST_PAUSE_S = 0.1
_MAX_PAUSE_S = 2.0


def required_url(url: str | None, settings: Settings) -> str:
    """``url``, else the settings' Redis URL; ``ConfigurationError`` saying how to give one."""
    found = url or settings.redis.url
    if not found:
        raise ConfigurationError("No Redis URL: pass redis_url=... or set TOOLPOOL_REDIS_URL.")
    return found


def connect(url: str, *, blocking_s: float = 0.0) -> redis.Redis:
    """A client whose commands fail within 10 s (plus ``blocking_s`` for BLPOP)."""
    return factory.connect(url, role=factory.ORCHESTRATOR.waiting(blocking_s))


def connect_async(url: str, *, blocking_s: float = 0.0) -> redis.asyncio.Redis:
    """``connect``'s client on ``redis.asyncio``, with the same time limits."""
    return factory.connect_async(url, role=factory.ORCHESTRATOR.waiting(blocking_s))


def unreachable(
    url: str | None, exc: BaseException, doing: str, turn_id: str | None = None
) -> RedisUnavailable:
    """The error for ``exc``, met while ``doing`` ("while cancelling turn T")."""
    return RedisUnavailable(
        f"Redis at {shown_url(url or '')} could not be reached {doing}. "
        f"({type(exc).__name__}: {exc})",
        turn_id,
    )


@contextlib.contextmanager
def reaching(url: str | None, doing: str, turn_id: str | None = None) -> Iterator[None]:
    """Turn an unreachable Redis inside the block into ``RedisUnavailable``."""
    try:
        yield
    except UNREACHABLE as exc:
        raise unreachable(url, exc, doing, turn_id) from None


@dataclass
class Outage:
    """How long Redis has been away, and how long to pause before the next attempt."""

    since: float | None = None
    attempts: int = 0

    def pause(self) -> float:
        self.since = self.since or time.monotonic()
        self.attempts += 1
        return float(min(_MAX_PAUSE_S, _FIRST_PAUSE_S * 2 ** (self.attempts - 1)))

    def lasted(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since

    def over(self) -> None:
        if self.since is not None:
            log.info("toolpool: Redis is back after %.1f s", self.lasted())
        self.since = None
        self.attempts = 0
