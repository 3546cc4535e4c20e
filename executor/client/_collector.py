"""Waiting for a turn's results: liveness of its calls, its deadline, and Redis outages.

``collect`` blocks on the turn's wake-up list and reads the stored results (the truth). Once a
second it looks for calls that can no longer produce a result: a started call whose worker
stopped renewing its liveness key, a job RQ ended without a result, a call never enqueued;
each gets its answer, written first-wins like a worker's (and counted by its batch's barrier
like a worker's, so the turn goes on). At the deadline every call still without a result
gets ``timeout``. While Redis is unreachable it keeps trying until the deadline, then raises
``RedisUnavailable``.

The waiting itself is written once, as steps (``_steps``: a generator that yields what it
needs done: read results, wait for a wake-up, check liveness, time out, pause) and two drivers
run it: ``wait`` with blocking calls, for ``Executor``; ``wait_async`` on ``redis.asyncio``,
for ``AsyncExecutor``, whose event loop must never block (its rare liveness checks and time-out
use RQ, which has no asyncio API, and run on a thread).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from executor import _texts as texts
from executor._rq.jobs import JobStatus, end_job, job_status
from executor._settings import Settings
from executor.client._outage import UNREACHABLE, Outage, unreachable
from executor.wire import (
    Acks,
    ErrorType,
    EventLog,
    Keys,
    ResultStore,
    ToolResult,
    TurnPlan,
)

# How often a waiting client looks for calls whose worker died.
LIVENESS_CHECK_S = 1.0
# Most wake-ups taken in one round trip after the first.
_WAKE_TAKE = 1000
# Turns whose answers a collector remembers, so that collecting one again answers the same
# even if Redis lost a result meanwhile (a failover without acknowledged writes).
_ANSWERED_TURNS = 4096


@dataclass
class _Watch:
    """What the collector has seen of one pending call."""

    missing_since: float | None = None


@dataclass(frozen=True)
class _Read:
    """Read the stored results of ``call_ids``."""

    call_ids: list[str]


@dataclass(frozen=True)
class _Wake:
    """Wait up to ``wait`` s on the wake-up list ``key``, then take what it holds."""

    key: str
    wait: float


@dataclass(frozen=True)
class _Pause:
    """Pause before trying an unreachable Redis again."""

    seconds: float


@dataclass(frozen=True)
class _Run:
    """Run a check that uses the blocking clients (RQ has no asyncio API)."""

    run: Callable[[], None]


_Step = _Read | _Wake | _Pause | _Run


class _Stepper:
    """Hands a driver the steps of one wait, one at a time, and takes back each step's
    answer, or the unreachable Redis it met; ``results`` once the steps are done."""

    def __init__(self, steps: Generator[_Step, Any, dict[str, ToolResult]]) -> None:
        self._steps = steps
        self._answer: Any = None
        self._failure: BaseException | None = None
        self.results: dict[str, ToolResult] = {}

    def next(self) -> _Step | None:
        """The next step, or None when the waiting is over."""
        try:
            if self._failure is not None:
                return self._steps.throw(self._failure)
            return self._steps.send(self._answer)
        except StopIteration as done:
            self.results = done.value
            return None
        finally:
            self._answer, self._failure = None, None

    def answer(self, value: Any) -> None:
        self._answer = value

    def fail(self, failure: BaseException) -> None:
        self._failure = failure


async def _get_many_async(
    client: redis.asyncio.Redis, keys: Keys, call_ids: list[str], acks: Acks
) -> dict[str, ToolResult]:
    """``ResultStore.get_acknowledged`` on ``redis.asyncio``."""
    if not call_ids:
        return {}
    async with client.pipeline(transaction=False) as pipe:
        pipe.mget([keys.result(c) for c in call_ids])
        added = acks.queue_confirm(pipe)
        replies = await pipe.execute(raise_on_error=False)
    if added:
        acks.check(replies[-1], f"the results of {len(call_ids)} calls")
    if isinstance(replies[0], BaseException):
        raise replies[0]
    return ResultStore.decoded(call_ids, replies[0])


async def _wake_async(
    blocking: redis.asyncio.Redis, done_key: str, wait: float, acks: Acks
) -> list[bytes]:
    async with blocking.pipeline(transaction=False) as pipe:
        pipe.blpop([done_key], timeout=wait)
        pipe.lpop(done_key, _WAKE_TAKE)
        added = acks.queue_confirm(pipe)
        replies = await pipe.execute(raise_on_error=False)
    return _taken_acknowledged(replies, added, acks)


def _taken_acknowledged(replies: list[Any], added: int, acks: Acks) -> list[bytes]:
    """The payloads of a wake-up pipeline (BLPOP, LPOP and, with ``added``, the confirm):
    raises if a command failed or the results that rode on it are not acknowledged. Taken
    wake-ups are not put back: their results are read again from their keys."""
    if added:
        acks.check(replies[-1], "the results a wake-up carried")
    for reply in replies[:2]:
        if isinstance(reply, BaseException):
            raise reply
    return _taken(replies[0], replies[1])


def _taken(first: tuple[bytes, bytes] | None, rest: list[bytes] | None) -> list[bytes]:
    """The payloads of a BLPOP (``first``: key and payload, or None) and the LPOP after it."""
    return [] if first is None else [first[1], *(rest or [])]


@dataclass
class Collector:
    """Waits for turns' results on behalf of an ``Executor`` (its connections and stores)."""

    _url: str
    _client: redis.Redis
    _blocking: redis.Redis  # for BLPOP: its socket timeout allows LIVENESS_CHECK_S more
    _results: ResultStore
    _keys: Keys
    _settings: Settings
    _events: EventLog
    # What this collector handed out, by turn: the first answer of a call is its answer.
    _answered: collections.OrderedDict[str, dict[str, ToolResult]] = field(
        default_factory=collections.OrderedDict
    )

    def close(self) -> None:
        self._blocking.close()

    def wait(
        self,
        plan: TurnPlan,
        deadline: float,
        limit: float,
        *,
        fresh: bool = False,
        time_out: bool = True,
    ) -> dict[str, ToolResult]:
        """The results of ``plan``'s enqueued calls, by call id; every one by ``deadline``
        (those still without one then answered ``timeout``), or with ``time_out`` False, those
        there are by then.

        ``fresh``: the turn was just submitted and its wake-up list never read, so wait on
        that list before the first read of the results (no read that can only find nothing).
        """
        stepper = _Stepper(self._steps(plan, deadline, limit, fresh=fresh, time_out=time_out))
        while (step := stepper.next()) is not None:
            try:
                if isinstance(step, _Read):
                    stepper.answer(self._results.get_acknowledged(step.call_ids))
                elif isinstance(step, _Wake):
                    stepper.answer(self._wake(step.key, step.wait))
                elif isinstance(step, _Pause):
                    time.sleep(step.seconds)
                else:
                    step.run()
            except UNREACHABLE as exc:
                stepper.fail(exc)
        return self._remember(plan, stepper.results)

    async def wait_async(
        self,
        plan: TurnPlan,
        deadline: float,
        limit: float,
        client: redis.asyncio.Redis,
        blocking: redis.asyncio.Redis,
        *,
        fresh: bool = False,
        time_out: bool = True,
    ) -> dict[str, ToolResult]:
        """``wait``, awaited: results read and wake-ups waited for on ``client`` and
        ``blocking`` (``redis.asyncio``); the liveness checks and the time-out on a thread."""
        stepper = _Stepper(self._steps(plan, deadline, limit, fresh=fresh, time_out=time_out))
        while (step := stepper.next()) is not None:
            try:
                if isinstance(step, _Read):
                    found = await _get_many_async(
                        client, self._keys, step.call_ids, self._results.acks
                    )
                    stepper.answer(found)
                elif isinstance(step, _Wake):
                    stepper.answer(
                        await _wake_async(blocking, step.key, step.wait, self._results.acks)
                    )
                elif isinstance(step, _Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    await asyncio.to_thread(step.run)
            except UNREACHABLE as exc:
                stepper.fail(exc)
        return self._remember(plan, stepper.results)

    def _remember(self, plan: TurnPlan, found: dict[str, ToolResult]) -> dict[str, ToolResult]:
        """``found``, with the answers handed out before kept as they were; remembered."""
        answered = self._answered.pop(plan.turn_id, {})
        merged = {**found, **answered}
        self._answered[plan.turn_id] = merged
        while len(self._answered) > _ANSWERED_TURNS:
            self._answered.popitem(last=False)
        return merged

    def _steps(
        self, plan: TurnPlan, deadline: float, limit: float, *, fresh: bool, time_out: bool
    ) -> Generator[_Step, Any, dict[str, ToolResult]]:
        """The waiting, as steps for a driver to carry out; returns the results by call id.

        Each ``_Read`` is answered with the results found, each ``_Wake`` with the wake-up
        list's payloads; an unreachable Redis is thrown in at the step that met it.
        """
        waiting_for = plan.enqueued()
        # Answers handed out before stand (``_remember``): only the others are waited for.
        results: dict[str, ToolResult] = dict(self._answered.get(plan.turn_id, {}))
        watches = {call_id: _Watch() for call_id in waiting_for}
        next_check = time.monotonic() + LIVENESS_CHECK_S
        done_key = self._keys.turn_done(plan.turn_id)
        outage = Outage()
        read = not fresh or not waiting_for
        while True:
            try:
                if read or time.monotonic() >= deadline:
                    pending = [c for c in waiting_for if c not in results]
                    found = yield _Read(pending)
                    results.update(found)
                read = True
                if len(results) == len(waiting_for):
                    return results
                now = time.monotonic()
                if now >= deadline:
                    if time_out:
                        yield _Run(lambda: self._time_out(plan, results, limit))
                    return results
                if now >= next_check:
                    yield _Run(lambda: self._check(plan, results, watches))
                    next_check = time.monotonic() + LIVENESS_CHECK_S
                    continue
                # The wake-up list: a small result rides on it (no read after); a large one,
                # or a wake-up another collector took, is read from its key.
                wait = max(0.01, min(LIVENESS_CHECK_S, deadline - now, next_check - now))
                payloads = yield _Wake(done_key, wait)
                rode, named = self._results.woken(payloads)
                results.update((r.call_id, r) for r in rode if r.call_id in watches)
                read = named or not rode
                outage.over()
            except UNREACHABLE as exc:
                # Ride out a restart or a short cut: the workers carry on and store their
                # results when Redis is back. Liveness is judged afresh after it.
                for watch in watches.values():
                    watch.missing_since = None
                if time.monotonic() >= deadline:
                    raise unreachable(
                        self._url,
                        exc,
                        f"for {outage.lasted():.1f} s while collecting turn "
                        f"{plan.turn_id}, until the collect's timeout ({limit:g} s): its calls "
                        f"may still run; collect({plan.turn_id!r}) again once Redis is back",
                        plan.turn_id,
                    ) from None
                yield _Pause(max(0.0, min(outage.pause(), deadline - time.monotonic())))

    def _check(
        self, plan: TurnPlan, results: dict[str, ToolResult], watches: dict[str, _Watch]
    ) -> None:
        self._find_lost(plan, results, watches)

    def _wake(self, done_key: str, wait: float) -> list[bytes]:
        """Wait up to ``wait`` s for the turn's wake-up list, then take all it holds (one
        round trip)."""
        acks = self._results.acks
        with self._blocking.pipeline(transaction=False) as pipe:
            pipe.blpop([done_key], timeout=wait)
            pipe.lpop(done_key, _WAKE_TAKE)
            added = acks.queue_confirm(pipe)
            replies = pipe.execute(raise_on_error=False)
        return _taken_acknowledged(replies, added, acks)

    def _find_lost(
        self, plan: TurnPlan, results: dict[str, ToolResult], watches: dict[str, _Watch]
    ) -> None:
        """Answer calls whose job can no longer produce a result, and unblock their turn.

        A started call whose worker stopped renewing it gets ``worker_lost``; a job RQ ended
        without a result (failed, stopped) gets it at once. Each answer counts towards its
        batch's barrier like a worker's, so the turn's next batch starts.
        """
        for index, rq_id in plan.job_ids.items():
            call_id = plan.call_ids[index]
            if call_id in results:
                continue
            status = job_status(self._client, rq_id)
            watch = watches[call_id]
            if status is JobStatus.DEFERRED:
                # Waiting for the batch before it, whose calls are watched here: the last of
                # their results releases it.
                continue
            ended_without_result = status in (JobStatus.FAILED, JobStatus.STOPPED)
            if not ended_without_result:
                alive = self._client.exists(self._keys.running(call_id))
                if status not in (JobStatus.STARTED, JobStatus.CANCELED, None) or alive:
                    watch.missing_since = None
                    continue
                now = time.monotonic()
                watch.missing_since = watch.missing_since or now
                # The key's expiry already proves call_liveness_s without a heartbeat; the
                # grace only covers a job RQ has started whose worker has not set it yet (or
                # a submit elsewhere still enqueueing).
                if now - watch.missing_since < 2 * self._settings.client.call_heartbeat_s:
                    continue
            if status is None:
                # No job and no run: the submit lost Redis before it enqueued this call.
                answer = ToolResult.failure(
                    call_id,
                    plan.tools[index],
                    ErrorType.CANCELLED,
                    texts.never_enqueued(plan.tools[index]),
                )
                self._results.publish(plan.turn_id, answer, plan.then(index))
                stored = self._results.get(call_id)
                if stored is not None:
                    results[call_id] = stored
                continue
            lost = ToolResult.failure(
                call_id,
                plan.tools[index],
                ErrorType.WORKER_LOST,
                texts.worker_lost(plan.tools[index]),
            )
            if self._results.publish(plan.turn_id, lost, plan.then(index)):
                self._events.emit(
                    "call_lost", call_id=call_id, turn_id=plan.turn_id, tool=plan.tools[index]
                )
            end_job(self._client, rq_id)
            stored = self._results.get(call_id)
            if stored is not None:
                results[call_id] = stored

    def _time_out(self, plan: TurnPlan, results: dict[str, ToolResult], limit: float) -> None:
        for index in plan.job_ids:
            call_id = plan.call_ids[index]
            if call_id in results:
                continue
            self._results.publish(
                plan.turn_id,
                ToolResult.failure(
                    call_id,
                    plan.tools[index],
                    ErrorType.TIMEOUT,
                    texts.turn_timeout(plan.tools[index], limit),
                ),
                plan.then(index),
            )
        results.update(self._results.get_many([c for c in plan.enqueued() if c not in results]))
