"""Acknowledged writes: how many replicas must hold a write before toolpool acts on it.

Redis replicates asynchronously, so a write its primary answered can be missing from the
replica that a failover promotes. With ``TOOLPOOL_REDIS_REPLICAS`` = N > 0, every write a
guarantee rests on (a lock grant, renewal or release, a call's claim, a stored result, a
turn's plan and queued calls) is followed, in its own round trip, by ``WAIT N`` on the same
connection; a claim rides on its call's lock grant, since a WAIT covers every write made
before it. Fewer than N acknowledgements within ``TOOLPOOL_REDIS_REPLICA_WAIT_MS`` raise
``NotAcknowledged`` (an outage, to every caller) and the write is not acted on. A reader about
to act on what it read (the client handing out results) reads and WAITs in one round trip
(``queue_confirm``): a write of a counter, then the WAIT, which covers every write made
before it, by any client. With N = 0 nothing waits and nothing is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import redis
import redis.asyncio.client
from redis.client import Pipeline
from redis.commands.core import Script

from executor._errors import ToolpoolError
from executor._settings import Settings
from executor.wire._keys import Keys


class NotAcknowledged(ToolpoolError, redis.ConnectionError):
    """Fewer replicas than ``TOOLPOOL_REDIS_REPLICAS`` acknowledged a write within
    ``TOOLPOOL_REDIS_REPLICA_WAIT_MS``: it may not survive a failover, so it is not acted on.
    A ``redis.ConnectionError`` too, so that it is ridden out, retried or reported exactly as
    an unreachable Redis is."""

    def __init__(self, doing: str, acknowledged: int, wanted: int, wait_ms: int) -> None:
        self.doing = doing
        self.acknowledged = acknowledged
        self.wanted = wanted
        super().__init__(
            f"{acknowledged} of {wanted} replicas acknowledged {doing} within {wait_ms} ms "
            "(TOOLPOOL_REDIS_REPLICAS); it is not acted on until enough do"
        )


class Rider(Protocol):
    """A command that goes in a script's round trip, after it and before its WAIT (so the
    WAIT covers it too), whatever the script answers."""

    def queue(self, pipe: Pipeline) -> None:
        """Put its one command on ``pipe``."""

    def read(self, reply: object) -> None:
        """Take the command's reply (an error reply as an exception)."""


# A WAIT needs this much of a connection's socket timeout left for its reply to come back.
_REPLY_MARGIN_MS = 20


@dataclass(frozen=True)
class Acks:
    """The acknowledgements one process asks of its writes (``Settings.redis.replicas``)."""

    replicas: int = 0
    wait_ms: int = 500
    marker: str = Keys().ack_marker

    @classmethod
    def of(cls, settings: Settings, keys: Keys | None = None) -> Acks:
        """The acknowledgements ``settings`` ask for, with ``keys``' counter."""
        keys = keys or Keys(settings.redis.key_prefix)
        return cls(settings.redis.replicas, settings.redis.replica_wait_ms, keys.ack_marker)

    @property
    def wanted(self) -> bool:
        """Whether writes wait for replicas at all."""
        return self.replicas > 0

    def within(self, socket_timeout_s: float | None) -> Acks:
        """These acknowledgements, waiting no longer than a connection's socket timeout allows
        (a WAIT cut by the socket timeout would read as a dead Redis, not a slow replica)."""
        if socket_timeout_s is None:
            return self
        cap = max(1, int(socket_timeout_s * 1000) - _REPLY_MARGIN_MS)
        return self if self.wait_ms <= cap else replace(self, wait_ms=cap)

    def queue_wait(self, pipe: Pipeline | redis.asyncio.client.Pipeline) -> bool:
        """Queue the WAIT after the writes already on ``pipe``; False when none is wanted."""
        if not self.wanted:
            return False
        pipe.execute_command("WAIT", self.replicas, self.wait_ms)
        return True

    def queue_confirm(self, pipe: Pipeline | redis.asyncio.client.Pipeline) -> int:
        """Queue, after the reads on ``pipe``, what makes them safe to act on: a write of the
        counter and a WAIT (on the same connection, so on the server that answered the reads).
        Returns how many replies that adds (0 or 2); ``check`` the last."""
        if not self.wanted:
            return 0
        pipe.incr(self.marker)
        self.queue_wait(pipe)
        return 2

    def check(self, reply: object, doing: str) -> None:
        """Raise ``NotAcknowledged`` unless ``reply`` (a WAIT's) counts enough replicas; an
        error reply is raised as it is."""
        if not self.wanted:
            return
        if isinstance(reply, BaseException):
            raise reply
        acknowledged = int(reply)  # type: ignore[call-overload]
        if acknowledged < self.replicas:
            raise NotAcknowledged(doing, acknowledged, self.replicas, self.wait_ms)

    def confirm(self, client: redis.Redis, doing: str) -> None:
        """Make sure everything written before now (by anyone) is on enough replicas: one
        round trip, a write of the counter and a WAIT behind it."""
        if not self.wanted:
            return
        with client.pipeline(transaction=False) as pipe:
            self.queue_confirm(pipe)
            _, acknowledged = pipe.execute(raise_on_error=False)
        self.check(acknowledged, doing)

    def run_script(
        self,
        client: redis.Redis,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int],
        doing: str,
        rider: Rider | None = None,
    ) -> Any:
        """``script``'s reply, once enough replicas hold what it wrote: the script, ``rider``'s
        commands and the WAIT in one round trip (loading the script first if the server lost
        it). ``rider`` reads its reply only once the script's is acknowledged."""
        if not self.wanted and rider is None:
            return script(keys=keys, args=args)
        for attempt in (1, 2):
            with client.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
                if rider is not None:
                    rider.queue(pipe)
                waited = self.queue_wait(pipe)
                replies = pipe.execute(raise_on_error=False)
            reply = replies[0]
            if isinstance(reply, redis.exceptions.NoScriptError) and attempt == 1:
                client.script_load(script.script)
                continue
            if isinstance(reply, BaseException):
                raise reply
            if waited:
                self.check(replies[-1], doing)
            if rider is not None:
                rider.read(replies[1])
            return reply
        raise AssertionError("unreachable")  # pragma: no cover
