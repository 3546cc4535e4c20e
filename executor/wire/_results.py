"""Where results and full outputs live in Redis, and how a waiter learns they arrived."""

from __future__ import annotations

from importlib import resources

import redis
from redis.client import Pipeline

from executor import _texts as texts
from executor._errors import ToolpoolError
from executor._rq import names as rq_names
from executor._rq.doorbell import EXPIRY_S, TOKENS_KEPT
from executor.wire._acks import Acks
from executor.wire._keys import Keys
from executor.wire._models import ToolResult
from executor.wire._turns import NextBatch

_STORED, _STORED_AND_RELEASED, _ALREADY_STORED = 1, 2, 0
# A result up to this size rides on its turn's wake-up list, so the collector it wakes has it
# without a read; a larger one is read from its key.
WAKE_RESULT_MAX_CHARS = 4096


def load_lua(name: str) -> str:
    """The text of ``executor/lua/<name>.lua``, shipped inside the package."""
    return resources.files("executor.wire").joinpath(f"lua/{name}.lua").read_text("utf-8")


class ResultStore:
    """One result per call: the first stored wins, later ones are dropped and reported.

    A turn's batches are ordered by a barrier: each result stored first counts towards its
    batch (``then``, the batch after it), and the one that completes the batch puts the next
    batch's jobs on the queue, in the same script. Whoever stores a call's result (its
    worker, the pool for a dead worker, a collector for a lost or timed-out call, a cancel)
    passes ``then``, so a batch is released exactly once, whichever result comes last.

    With ``acks`` wanted, ``publish`` answers once enough replicas hold the result;
    ``publish_into``'s caller queues the WAIT behind its pipeline (``acks.queue_wait``).
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, *, ttl: int = 3600, acks: Acks | None = None
    ) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl
        self.acks = acks or Acks(marker=keys.ack_marker)
        self._publish = client.register_script(load_lua("publish_result"))

    def publish(self, turn_id: str, result: ToolResult, then: NextBatch | None = None) -> bool:
        """Store ``result`` unless the call has one; True if this one was stored.

        ``then``: the batch after the call's (None in the turn's last batch), released once
        this batch's calls all have a result.
        """
        keys, args = self._publish_keys_args(turn_id, result, then)
        doing = f"the result of call {result.call_id}"
        return self.stored(self.acks.run_script(self.client, self._publish, keys, args, doing))

    def publish_into(
        self, pipe: Pipeline, turn_id: str, result: ToolResult, then: NextBatch | None = None
    ) -> None:
        """Queue the publish of ``result`` on ``pipe``; its reply goes to ``stored``.

        By the script's hash, so the pipeline needs no look-up first: a reply of
        ``NoScriptError`` (a Redis that lost its scripts) means publish it with ``publish``.
        """
        keys, args = self._publish_keys_args(turn_id, result, then)
        pipe.evalsha(self._publish.sha, len(keys), *keys, *args)

    @staticmethod
    def stored(code: object) -> bool:
        """What a publish answered: True if this result was stored, False if one was first."""
        if code in (_STORED, _STORED_AND_RELEASED):
            return True
        if code == _ALREADY_STORED:
            return False
        raise ToolpoolError(f"publish_result.lua answered an unknown code {code!r}")

    def _publish_keys_args(
        self, turn_id: str, result: ToolResult, then: NextBatch | None
    ) -> tuple[list[str], list[str | int]]:
        # Fields at their defaults are left out: a trivial call's result is half the size.
        stored = result.model_dump_json(exclude_defaults=True)
        wake = stored if len(stored) <= WAKE_RESULT_MAX_CHARS else result.call_id
        keys = [self.keys.result(result.call_id), self.keys.turn_done(turn_id)]
        args: list[str | int] = [stored, wake, self.ttl]
        if then is not None:
            keys += [
                self.keys.turn_barrier(turn_id),
                rq_names.queue_key(then.queue),
                rq_names.deferred_key(then.queue),
                self.keys.doorbell(then.queue),
                *(rq_names.job_key(job) for job in then.jobs),
            ]
            args += [then.batch, rq_names.timestamp(), TOKENS_KEPT, EXPIRY_S, *then.jobs]
        return keys, args

    @staticmethod
    def woken(payloads: list[bytes]) -> tuple[list[ToolResult], bool]:
        """What a turn's wake-up list gave: the results that rode on it, and whether some
        wake-up only named its call (its result must be read from its key)."""
        results: list[ToolResult] = []
        named = False
        for payload in payloads:
            if payload.startswith(b"{"):
                results.append(ToolResult.model_validate_json(payload))
            else:
                named = True
        return results, named

    def get(self, call_id: str) -> ToolResult | None:
        """The stored result of a call, if any."""
        raw = self.client.get(self.keys.result(call_id))
        return None if raw is None else ToolResult.model_validate_json(raw)

    def get_many(self, call_ids: list[str]) -> dict[str, ToolResult]:
        """The stored results among ``call_ids``."""
        if not call_ids:
            return {}
        return self.decoded(call_ids, self.client.mget([self.keys.result(c) for c in call_ids]))

    def get_acknowledged(self, call_ids: list[str]) -> dict[str, ToolResult]:
        """``get_many``, once enough replicas hold what it found (``acks``): the read and the
        acknowledgement in one round trip, on one connection. For results about to be handed
        to a client."""
        if not call_ids:
            return {}
        if not self.acks.wanted:
            return self.get_many(call_ids)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.mget([self.keys.result(c) for c in call_ids])
            self.acks.queue_confirm(pipe)
            raws, _, acknowledged = pipe.execute(raise_on_error=False)
        self.acks.check(acknowledged, f"the results of {len(call_ids)} calls")
        return self.decoded(call_ids, raws)

    @staticmethod
    def decoded(call_ids: list[str], raws: list[bytes | str | None]) -> dict[str, ToolResult]:
        """The results an MGET of ``call_ids``' result keys found, by call id."""
        return {
            call_id: ToolResult.model_validate_json(raw)
            for call_id, raw in zip(call_ids, raws, strict=True)
            if raw is not None
        }

    def keep_full_output(self, call_id: str, text: str, *, ttl: int, max_bytes: int) -> str:
        """Store a truncated call's full output; return the note for the truncation marker."""
        data = text.encode("utf-8")
        kept = None
        if len(data) > max_bytes:
            data = data[:max_bytes]
            kept = max_bytes
        note = texts.full_output_note(call_id, kept)
        self.client.set(self.keys.full_output(call_id), data, ex=ttl)
        return note

    def full_output(self, call_id: str) -> str | None:
        """The full output kept for a truncated call, while it has not expired."""
        raw: bytes | None = self.client.get(self.keys.full_output(call_id))  # type: ignore[assignment]
        return None if raw is None else raw.decode("utf-8", errors="replace")
