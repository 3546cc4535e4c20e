"""The lock's Lua scripts for one scope: loaded once, called with the scope's keys, replies typed.

Each script lives in ``lua/<name>.lua``; the shared helpers in ``lua/_prelude.lua`` are put in
front of every body once, when a ``LockScripts`` is built. Every reply code maps to a member of
an ``IntEnum`` below, and a code that maps to none raises ``LockProtocolError`` (a newer script
or a damaged one must not be taken for a known outcome).
"""

from __future__ import annotations

import enum
import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, TypeVar

import redis
from redis.client import Pipeline

from executor._errors import LockProtocolError
from executor.lock._models import (
    HolderStatus,
    LockCounters,
    LockStatus,
    Mode,
    OwnerInfo,
    Policy,
    WaiterStatus,
    fence_of,
    fence_parts,
)
from executor.wire import Acks, LockKeys, Rider

SCRIPT_NAMES = ("acquire", "release", "cancel", "renew", "check_fence", "status")
# How long release.lua remembers that a token's loss was counted: longer than a holder keeps
# retrying its report (executor.lock._keeper, 10 minutes).
LOST_MARK_MS = 30 * 60 * 1000
ReleaseReason = Literal["release", "force", "lost"]


class AcquireOutcome(enum.IntEnum):
    """What acquire.lua did."""

    MODE_CONFLICT = -1
    QUEUED = 0
    GRANTED = 1
    ALREADY_HELD = 2
    WOULD_WAIT = 3
    STALE = 4


class ReleaseOutcome(enum.IntEnum):
    """What release.lua did."""

    NOT_HELD = 0
    RELEASED = 1
    WAITER_REMOVED = 2


class CancelOutcome(enum.IntEnum):
    """What cancel.lua did."""

    ABSENT = 0
    LEFT_QUEUE = 1
    DROPPED_GRANT = 2


class RenewOutcome(enum.IntEnum):
    """What renew.lua did."""

    LOST = 0
    RENEWED = 1


class FenceOutcome(enum.IntEnum):
    """What check_fence.lua found."""

    INVALID = 0
    VALID = 1


_E = TypeVar("_E", bound=enum.IntEnum)


def decode_outcome(kind: type[_E], script: str, code: Any) -> _E:
    """Map a script's reply code to a member of ``kind``; a code it does not know raises."""
    try:
        return kind(int(code))
    except (TypeError, ValueError):
        raise LockProtocolError(
            f"Lock script {script!r} returned {code!r}, which this version of toolpool does "
            "not know; check that every client runs the same toolpool version."
        ) from None


@dataclass(frozen=True)
class AcquireReply:
    """acquire.lua's answer: ``value`` is the fence (granted; 0 for shared) or the queue
    position (queued); ``epoch`` the epoch of the primary that answered."""

    outcome: AcquireOutcome
    value: int
    server_time_ms: int
    epoch: int = 0

    @property
    def granted(self) -> bool:
        return self.outcome in (AcquireOutcome.GRANTED, AcquireOutcome.ALREADY_HELD)


@functools.cache
def script_source(name: str) -> str:
    """The full text registered for a script: the prelude, then the script's body."""
    if name not in SCRIPT_NAMES:
        raise ValueError(f"Unknown lock script {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    folder = resources.files("executor.lock").joinpath("lua")
    prelude = folder.joinpath("_prelude.lua").read_text(encoding="utf-8")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return prelude + "\n" + body


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LockScripts:
    """One scope's scripts, registered once on one client; one method per script."""

    def __init__(
        self,
        client: redis.Redis,
        keys: LockKeys,
        *,
        policy: Policy,
        wake_ttl_ms: int,
        acks: Acks | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.policy = policy
        #: Replicas a grant, renewal, release or cancel must reach before it is acted on.
        self.acks = acks or Acks()
        self._keys = keys.script_keys()
        self._common: list[str | int] = [policy, keys.wake_prefix, wake_ttl_ms]
        # redis-py's Script hashes the text once and falls back from EVALSHA to EVAL when the
        # server's script cache is empty (after a restart), so registering here is enough.
        self._scripts = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}

    def _call(self, name: str, *args: str | int) -> Any:
        return self._scripts[name](keys=self._keys, args=[*self._common, *args])

    def _acked(self, name: str, doing: str, *args: str | int, rider: Rider | None = None) -> Any:
        """A script that changes the lock: its reply once ``acks`` replicas hold the change
        (and ``rider``'s command, sent in the same round trip)."""
        script = self._scripts[name]
        args = (*self._common, *args)
        return self.acks.run_script(self.client, script, self._keys, args, doing, rider)

    def acquire(
        self,
        token: str,
        mode: Mode,
        *,
        lease_ms: int,
        waiter_ttl_ms: int,
        may_enqueue: bool,
        owner_json: str,
        rider: Rider | None = None,
    ) -> AcquireReply:
        """Take the lock, or queue (or re-check a queued token); see acquire.lua. ``rider``:
        a command sent in the same round trip, whatever the grant."""
        reply = self._acked(
            "acquire",
            f"a {mode} grant of the lock on scope {self.keys.scope!r}",
            token,
            mode,
            lease_ms,
            waiter_ttl_ms,
            "1" if may_enqueue else "0",
            owner_json,
            rider=rider,
        )
        outcome = decode_outcome(AcquireOutcome, "acquire", reply[0])
        value, epoch = int(reply[1]), int(reply[3])
        granted = outcome in (AcquireOutcome.GRANTED, AcquireOutcome.ALREADY_HELD)
        if granted and mode == "exclusive":
            value = fence_of(epoch, value)
        return AcquireReply(outcome=outcome, value=value, server_time_ms=int(reply[2]), epoch=epoch)

    def release(self, token: str, reason: ReleaseReason = "release") -> ReleaseOutcome:
        """End a hold ("release", "force" or "lost"); see release.lua."""
        doing = f"the release of lease {token} on scope {self.keys.scope!r}"
        reply = self._acked("release", doing, token, reason, self.keys.lost_prefix, LOST_MARK_MS)
        return decode_outcome(ReleaseOutcome, "release", reply)

    def release_into(self, pipe: Pipeline, token: str) -> None:
        """Queue a plain release of ``token`` on ``pipe`` (its owner sends it, with other
        commands, in one round trip); read its reply with ``release_outcome``. By the
        script's hash: a ``NoScriptError`` reply means release it with ``release``."""
        script = self._scripts["release"]
        args = [*self._common, token, "release", self.keys.lost_prefix, LOST_MARK_MS]
        pipe.evalsha(script.sha, len(self._keys), *self._keys, *args)

    @staticmethod
    def release_outcome(reply: Any) -> ReleaseOutcome:
        """What a release queued by ``release_into`` did."""
        return decode_outcome(ReleaseOutcome, "release", reply)

    def cancel(self, token: str) -> CancelOutcome:
        """Leave the queue (or drop a grant whose reply was lost); see cancel.lua."""
        doing = f"leaving the lock's queue on scope {self.keys.scope!r}"
        return decode_outcome(CancelOutcome, "cancel", self._acked("cancel", doing, token))

    def renew(self, token: str, lease_ms: int) -> RenewOutcome:
        """Extend a live lease; never revives one; see renew.lua."""
        doing = f"the renewal of lease {token} on scope {self.keys.scope!r}"
        reply = self._acked("renew", doing, token, lease_ms)
        return decode_outcome(RenewOutcome, "renew", reply[0])

    def check_fence(self, token: str, fence: int) -> bool:
        """Whether ``token`` holds the lock exclusively with ``fence``; see check_fence.lua."""
        epoch, seq = fence_parts(fence)
        reply = self._call("check_fence", token, epoch, seq)
        code = decode_outcome(FenceOutcome, "check_fence", reply)
        return code is FenceOutcome.VALID

    def status(self) -> LockStatus:
        """A consistent snapshot of the scope; see status.lua."""
        now_raw, fence_raw, holders_raw, waiters_raw, stats_raw = self._call("status")
        now = int(now_raw)
        holders = []
        for i in range(0, len(holders_raw), 3):
            info = json.loads(_text(holders_raw[i + 2]))
            mode: Mode = info.get("mode", "exclusive")
            fence = fence_of(int(info.get("epoch", 0)), int(info.get("seq", 0)))
            holders.append(
                HolderStatus(
                    token=_text(holders_raw[i]),
                    mode=mode,
                    fence=fence if mode == "exclusive" else None,
                    owner=OwnerInfo.model_validate(info.get("owner", {})),
                    acquired_at_ms=int(info.get("acquired_at_ms", 0)),
                    remaining_ms=int(float(_text(holders_raw[i + 1]))) - now,
                )
            )
        queue = []
        for position, i in enumerate(range(0, len(waiters_raw), 3), start=1):
            info = json.loads(_text(waiters_raw[i + 2]))
            queue.append(
                WaiterStatus(
                    token=_text(waiters_raw[i]),
                    mode=info.get("mode", "exclusive"),
                    position=position,
                    age_ms=now - int(info.get("enqueued_at_ms", now)),
                    owner=OwnerInfo.model_validate(info.get("owner", {})),
                    deadline_in_ms=int(float(_text(waiters_raw[i + 1]))) - now,
                )
            )
        stats = {_text(stats_raw[i]): int(stats_raw[i + 1]) for i in range(0, len(stats_raw), 2)}
        known = {k: v for k, v in stats.items() if k in LockCounters.model_fields}
        return LockStatus(
            scope=self.keys.scope,
            policy=self.policy,
            server_time_ms=now,
            last_fence=fence_of(int(_text(fence_raw[0])), int(_text(fence_raw[1]))),
            holders=tuple(holders),
            queue=tuple(queue),
            counters=LockCounters(**known),
        )
