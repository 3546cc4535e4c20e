"""A worker's claim on the call it runs: kept at the lock grant and by the heartbeat, and never
taken from another delivery of the same call (``lua/claim_hold.lua``).

A failover can drop a claim and put the call's job back on its queue, so two deliveries may
each have claimed the call. ``CallClaims.hold`` settles it where it matters: at the lock
grant, only the delivery it answers ``held`` runs the tool; the other answers with the call's
stored result, or waits for the run that holds the claim.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.client import Pipeline

from executor._errors import ToolpoolError
from executor.wire._keys import Keys
from executor.wire._models import ToolResult
from executor.wire._results import load_lua

_TAKEN, _HELD, _ANSWERED = 0, 1, 2


@dataclass(frozen=True)
class ClaimHold:
    """What ``CallClaims.hold`` found: the claim is this worker's (``held``), another
    worker's (``holder``), or the call is answered (``answer``); and whether its turn is
    cancelled."""

    held: bool
    cancelled: bool
    holder: str | None = None
    answer: ToolResult | None = None


class CallClaims:
    """The claims of calls on one Redis: held by one worker at a time, renewed by it."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._hold = client.register_script(load_lua("claim_hold"))

    def hold(self, call_id: str, turn_id: str, worker: str, liveness_ms: int) -> ClaimHold:
        """Renew ``worker``'s claim on ``call_id`` (or take it again where it lapsed), unless
        the call is answered or another worker holds it; one round trip."""
        keys = self._hold_keys(call_id, turn_id)
        reply = self._hold(keys=keys, args=[worker, liveness_ms], client=self._client)
        return _parse(reply)

    def queue_hold(
        self, pipe: Pipeline, call_id: str, turn_id: str, worker: str, liveness_ms: int
    ) -> None:
        """Queue ``hold`` on ``pipe`` (by the script's hash), to go with other commands in one
        round trip; read its reply with ``read_hold``."""
        keys = self._hold_keys(call_id, turn_id)
        pipe.evalsha(self._hold.sha, len(keys), *keys, worker, liveness_ms)

    @staticmethod
    def read_hold(reply: object) -> ClaimHold | None:
        """What a queued ``hold`` found; None if it did not run (an error reply, such as a
        server that lost the script): then ask with ``hold``."""
        if isinstance(reply, BaseException):
            return None
        return _parse(reply)

    def _hold_keys(self, call_id: str, turn_id: str) -> list[str]:
        return [
            self._keys.running(call_id),
            self._keys.result(call_id),
            self._keys.turn_cancel(turn_id),
        ]


def _parse(reply: object) -> ClaimHold:
    if not isinstance(reply, list) or len(reply) != 3:
        raise ToolpoolError(f"claim_hold.lua answered {reply!r}, not [code, cancelled, value]")
    code, cancelled, value = reply
    text = value.decode() if isinstance(value, bytes) else str(value)
    if code == _HELD:
        return ClaimHold(held=True, cancelled=bool(cancelled))
    if code == _TAKEN:
        return ClaimHold(held=False, cancelled=bool(cancelled), holder=text)
    if code == _ANSWERED:
        answer = ToolResult.model_validate_json(text)
        return ClaimHold(held=False, cancelled=bool(cancelled), answer=answer)
    raise ToolpoolError(f"claim_hold.lua answered an unknown code {code!r}")
