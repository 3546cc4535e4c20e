"""The orchestrator's side: submit a turn's tool calls, get one result per call, in order.

A turn is checked call by call before anything is enqueued (seed 001: validation and approval
are sequential, and a rejection stops the turn); then its calls are partitioned into batches
(consecutive concurrency-safe calls together, every other call alone) and the whole turn is
enqueued at once, each batch depending on every job of the batch before it. So the order
holds even if the orchestrator goes away, and any process can ``collect`` the results.

Every call gets exactly one result: the first stored wins (a worker's, or one this client
writes when the worker died, the deadline passed or the turn was cancelled).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq.job import JobStatus

from executor.contract import Tool
from executor.errors import ConfigurationError, ToolpoolError
from executor.events import EventLog, read_events
from executor.jobs import call_queue, end_lost_job, enqueue_call, enqueue_ready, job_status
from executor.keys import Keys
from executor.models import ErrorType, ToolCall, ToolResult, ToolStatus, parse_call
from executor.registry import ToolRegistry
from executor.results import ResultStore
from executor.runner import check_call
from executor.settings import Settings, shown_url
from executor.turns import CallJob, TurnPlan, job_id, new_turn_id, partition

log = logging.getLogger(__name__)

Approve = Callable[[ToolCall, Tool], bool]
Check = Callable[[ToolCall, Tool], "str | None"]

# How often a waiting client looks for calls whose worker died.
_LIVENESS_CHECK_S = 1.0
# A Redis that stops answering (paused, cut off) fails a command after this long, not never.
_REDIS_TIMEOUT_S = 10.0
# Between attempts while collect() rides out an outage: short first (a restart takes ~1 s).
_OUTAGE_POLL_S = (0.1, 2.0)

# What an unreachable Redis raises; AuthenticationError is a ConnectionError that waiting
# does not cure, so it is let through as it is.
_UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)


class TurnError(ToolpoolError):
    """A turn that cannot be submitted as given (e.g. two calls with one id)."""


class RedisUnavailable(ToolpoolError):
    """Redis could not be reached; ``turn_id`` names the turn concerned, if one exists."""

    def __init__(self, message: str, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.turn_id = turn_id


@dataclass
class Turn:
    """A submitted turn: its id and calls; pass it (or its id) to ``collect``."""

    turn_id: str
    calls: list[ToolCall]
    plan: TurnPlan
    stream_start: str = "-"


@dataclass
class _Progress:
    """How far a submit got, for the error that says what runs when Redis went away."""

    plan_stored: bool = False
    enqueued: int = 0
    total: dict[int, str] = field(default_factory=dict)


@dataclass
class _Watch:
    """What collect() has seen of one pending call."""

    missing_since: float | None = None
    deferred_since: float | None = None


@dataclass
class _Outage:
    """How long Redis has been away during a collect, and how long to pause before retrying."""

    since: float | None = None
    attempts: int = 0

    def pause(self) -> float:
        self.since = self.since or time.monotonic()
        self.attempts += 1
        first, most = _OUTAGE_POLL_S
        return float(min(most, first * 2 ** (self.attempts - 1)))

    def lasted(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since

    def over(self) -> None:
        if self.since is not None:
            log.info("toolpool: Redis is back after %.1f s", self.lasted())
        self.since = None
        self.attempts = 0


@dataclass
class Usage:
    """Tool calls submitted by this executor, against an optional limit (seed 001)."""

    limit: int | None = None
    used: int = 0

    def take(self) -> bool:
        """Count one call; False if the limit is reached."""
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True


@dataclass
class Executor:
    """Runs turns of tool calls on toolpool's workers through Redis.

    ``approve(call, tool)`` is asked, in order, for every call (read-only tools skip it while
    ``auto_approve_read_only``); False stops the turn. ``check(call, tool)`` may return a
    reason to block a call, which also stops the turn. ``max_tool_calls`` caps the calls this
    executor submits over its life. ``jsonl`` receives each turn's events, seed 001's log.
    """

    redis_url: str | None = None
    settings: Settings = field(default_factory=Settings.from_env)
    registry: ToolRegistry | None = None
    approve: Approve | None = None
    check: Check | None = None
    auto_approve_read_only: bool = True
    max_tool_calls: int | None = None
    jsonl: Path | IO[str] | None = None

    def __post_init__(self) -> None:
        url = self.redis_url or self.settings.redis_url
        if not url:
            raise ConfigurationError("No Redis URL: pass redis_url=... or set TOOLPOOL_REDIS_URL.")
        self.redis_url = url
        self.keys = Keys(self.settings.key_prefix)
        # One quick retry replaces a connection a Redis restart closed; waiting out a longer
        # outage is collect()'s job, against its own deadline, not redis-py's backoff.
        self.client = redis.Redis.from_url(
            url, socket_timeout=_REDIS_TIMEOUT_S, socket_connect_timeout=_REDIS_TIMEOUT_S,
            retry=Retry(NoBackoff(), 1),
        )  # fmt: skip
        # Waits for results block on it (BLPOP of at most _LIVENESS_CHECK_S).
        self._blocking = redis.Redis.from_url(
            url, socket_timeout=_LIVENESS_CHECK_S + _REDIS_TIMEOUT_S,
            socket_connect_timeout=_REDIS_TIMEOUT_S, retry=Retry(NoBackoff(), 1),
        )  # fmt: skip
        self.results = ResultStore(self.client, self.keys, ttl=self.settings.result_ttl)
        self.queue = call_queue(self.client, self.keys, self.settings.queue)
        self.usage = Usage(self.max_tool_calls)
        if self.registry is None:
            from workers import builtin_registry  # the tools' flags, not their code paths

            self.registry = builtin_registry()
        self._jsonl_handle: IO[str] | None = None
        if isinstance(self.jsonl, Path):
            self._jsonl_handle = self.jsonl.open("a", encoding="utf-8")
        elif self.jsonl is not None:
            self._jsonl_handle = self.jsonl
        self.events = EventLog(self.client, self.keys, maxlen=self.settings.events_maxlen,
                               worker="orchestrator")  # fmt: skip

    def close(self) -> None:
        """Close the Redis connections (and the JSONL file this executor opened)."""
        self.client.close()
        self._blocking.close()
        if isinstance(self.jsonl, Path) and self._jsonl_handle is not None:
            self._jsonl_handle.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the whole turn ------------------------------------------------------------------

    def run(
        self, calls: Iterable[ToolCall | dict[str, Any]], *, timeout: float | None = None
    ) -> list[ToolResult]:
        """Submit a turn and wait for its results, in call order.

        At ``timeout`` (default ``settings.turn_timeout``) the turn is cancelled and every
        call still without a result gets a ``timeout`` result.
        """
        turn = self.submit(calls)
        try:
            return self.collect(turn, timeout=timeout)
        finally:
            # After an outage that outlasted the collect, Redis may still be away: the
            # RedisUnavailable raised by collect is the answer, not this clean-up's error.
            with contextlib.suppress(RedisUnavailable, *_UNREACHABLE):
                if self._pending(turn):
                    self.cancel(turn)

    def submit(self, calls: Iterable[ToolCall | dict[str, Any]]) -> Turn:
        """Check, approve and enqueue a turn; return at once (``collect`` waits).

        Raises ``RedisUnavailable`` if Redis cannot be reached: before the turn's plan is
        stored nothing runs; after it, the error names the turn, whose enqueued calls run and
        whose other calls ``collect`` answers ``cancelled`` ("never enqueued").
        """
        parsed = [parse_call(item) for item in calls]
        _refuse_duplicate_ids(parsed)
        turn_id = new_turn_id()
        progress = _Progress()
        try:
            return self._submit(turn_id, parsed, progress)
        except _UNREACHABLE as exc:
            if not progress.plan_stored:
                raise self._unreachable(
                    exc, "before the turn was submitted: none of its calls runs; submit it "
                    "again once Redis is back",
                ) from None  # fmt: skip
            raise self._unreachable(
                exc, f"while enqueueing turn {turn_id}: the {progress.enqueued} of its "
                f"{len(progress.total)} calls enqueued by then run; collect({turn_id!r}) "
                "answers the others as never enqueued ('did not run')", turn_id,
            ) from None  # fmt: skip

    def _submit(self, turn_id: str, parsed: list[ToolCall], progress: _Progress) -> Turn:
        stream_start = self._stream_position()
        answered, runnable, tools = self._screen(turn_id, parsed)
        batches = partition([parsed[i] for i in runnable],
                            lambda c: tools[c.id].is_concurrency_safe)  # fmt: skip
        plan = TurnPlan(
            turn_id=turn_id,
            call_ids=[c.id for c in parsed],
            tools=[c.name for c in parsed],
            # partition() numbered the runnable calls 0..n-1; map back to the turn's indexes.
            batches=[[runnable[i] for i in batch.indexes] for batch in batches],
            job_ids={index: job_id(turn_id, index) for index in runnable},
            answered=answered,
        )
        # Stored before the jobs exist, so a collector elsewhere can always read the plan.
        self.client.set(self.keys.turn(turn_id), plan.model_dump_json(),
                        ex=self.settings.result_ttl)  # fmt: skip
        progress.plan_stored = True
        progress.total = plan.job_ids
        previous: list[str] = []
        for batch_indexes in plan.batches:
            for index in batch_indexes:
                job = CallJob(call=parsed[index], turn_id=turn_id, index=index)
                enqueue_call(self.queue, job, after=previous, result_ttl=self.settings.result_ttl)
                progress.enqueued += 1
            previous = [plan.job_ids[index] for index in batch_indexes]
        return Turn(turn_id=turn_id, calls=parsed, plan=plan, stream_start=stream_start)

    def collect(self, turn: Turn | str, *, timeout: float | None = None) -> list[ToolResult]:
        """Wait for every result of ``turn`` (a ``Turn`` or its id); return them in order.

        A call whose worker died gets a ``worker_lost`` result within about
        ``settings.call_liveness_s`` + 3 s (at once when its pool sees the worker die); at
        ``timeout`` every call still without one gets a ``timeout`` result. Never waits
        forever: while Redis is unreachable it keeps trying until ``timeout``, then raises
        ``RedisUnavailable`` (the calls may still run; collect the turn again later).
        """
        limit = self.settings.turn_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        if isinstance(turn, Turn):
            plan = turn.plan
        else:
            with self._reaching(f"while loading turn {turn}", turn):
                plan = self._load_plan(turn)
        results = self._wait(plan, deadline, limit, self._blocking)
        if isinstance(turn, Turn):
            with self._reaching(f"while copying turn {plan.turn_id}'s events", plan.turn_id):
                self._log_turn_events(turn)
        return [
            plan.answered[index] if index in plan.answered else results[call_id]
            for index, call_id in enumerate(plan.call_ids)
        ]

    def cancel(self, turn: Turn | str) -> None:
        """Stop a turn: queued calls do not run, running ones are told to stop.

        Calls that have not started get a ``cancelled`` result now; running calls see the
        flag within a heartbeat and end with their own result.
        """
        turn_id = turn.turn_id if isinstance(turn, Turn) else turn
        with self._reaching(f"while cancelling turn {turn_id}", turn_id):
            self._cancel(turn.plan if isinstance(turn, Turn) else self._load_plan(turn))

    def _cancel(self, plan: TurnPlan) -> None:
        self.client.set(self.keys.turn_cancel(plan.turn_id), "1", ex=self.settings.result_ttl)
        stored = self.results.get_many(_enqueued(plan))
        for index, rq_id in plan.job_ids.items():
            call_id = plan.call_ids[index]
            if call_id in stored or job_status(self.client, rq_id) is JobStatus.STARTED:
                continue
            self.results.publish(
                plan.turn_id,
                _error(call_id, plan.tools[index], ErrorType.CANCELLED,
                       f"{plan.tools[index]!r} did not run: its turn was cancelled."),
            )  # fmt: skip

    def full_output(self, call_id: str) -> str | None:
        """The full output of a truncated call, while it is kept."""
        with self._reaching(f"while reading the full output of call {call_id}"):
            return self.results.full_output(call_id)

    # -- inside ----------------------------------------------------------------------------

    def _screen(
        self, turn_id: str, calls: Sequence[ToolCall]
    ) -> tuple[dict[int, ToolResult], list[int], dict[str, Tool]]:
        """Check each call in order; return the answered ones, the runnable and their tools.

        Answered calls (invalid, unknown, rejected) keep their results in the turn's plan, not
        under their call id: a reused id must not read, or overwrite, another turn's result.
        """
        assert self.registry is not None
        answered: dict[int, ToolResult] = {}
        runnable: list[int] = []
        tools: dict[str, Tool] = {}
        stop_reason: str | None = None
        for index, call in enumerate(calls):
            if stop_reason is not None:
                answered[index] = _error(call.id, call.name, ErrorType.REJECTED,
                                         f"{call.name!r} did not run: {stop_reason}")  # fmt: skip
                continue
            checked = check_call(call, self.registry, self.settings)
            if isinstance(checked, ToolResult):
                answered[index] = checked
                continue
            tool, _ = checked
            refusal = self._refusal(turn_id, call, tool)
            if refusal is not None:
                answered[index] = _error(call.id, call.name, ErrorType.REJECTED, refusal)
                stop_reason = f"the turn stopped at call {call.id} ({refusal})"
                continue
            runnable.append(index)
            tools[call.id] = tool
        return answered, self._claim(turn_id, calls, runnable, answered), tools

    def _claim(
        self,
        turn_id: str,
        calls: Sequence[ToolCall],
        runnable: list[int],
        answered: dict[int, ToolResult],
    ) -> list[int]:
        """Claim the runnable calls' ids for this turn (one round trip); return those claimed."""
        with self.client.pipeline(transaction=False) as pipe:
            for index in runnable:
                pipe.set(self.keys.call_claim(calls[index].id), turn_id, nx=True,
                         ex=self.settings.result_ttl)  # fmt: skip
            claimed = pipe.execute()
        kept = []
        for index, ok in zip(runnable, claimed, strict=True):
            if ok:
                kept.append(index)
                continue
            call = calls[index]
            answered[index] = _error(
                call.id, call.name, ErrorType.REJECTED,
                f"Call id {call.id!r} was already used by another turn; each call needs a "
                "unique id.",
            )  # fmt: skip
        return kept

    def _refusal(self, turn_id: str, call: ToolCall, tool: Tool) -> str | None:
        if self.check is not None:
            reason = self.check(call, tool)
            if reason:
                return f"Tool blocked: {reason}"
        if self.approve is not None and not (self.auto_approve_read_only and tool.is_read_only):
            approved = self.approve(call, tool)
            self._emit("approval", call, turn_id, approved=approved)
            if not approved:
                return "The user rejected this call."
        if not self.usage.take():
            return f"The tool call limit ({self.usage.limit}) of this run is reached."
        return None

    def _wait(
        self, plan: TurnPlan, deadline: float, limit: float, blocking: redis.Redis
    ) -> dict[str, ToolResult]:
        waiting_for = _enqueued(plan)
        results: dict[str, ToolResult] = {}
        watches = {call_id: _Watch() for call_id in waiting_for}
        next_check = time.monotonic()
        done_key = self.keys.turn_done(plan.turn_id)
        outage = _Outage()
        next_check += _LIVENESS_CHECK_S
        while True:
            try:
                pending = [c for c in waiting_for if c not in results]
                results.update(self.results.get_many(pending))
                if len(results) == len(waiting_for):
                    return results
                now = time.monotonic()
                if now >= deadline:
                    self._time_out(plan, results, limit)
                    return results
                if now >= next_check:
                    self._find_lost(plan, results, watches)
                    enqueue_ready(self.queue)  # a dependent RQ left ready would wait 10 minutes
                    next_check = time.monotonic() + _LIVENESS_CHECK_S
                    continue
                # The list is only a wake-up: the stored results are the truth.
                wait = max(0.01, min(_LIVENESS_CHECK_S, deadline - now, next_check - now))
                blocking.blpop([done_key], timeout=wait)
                outage.over()
            except _UNREACHABLE as exc:
                # Ride out a restart or a short cut: the workers carry on and store their
                # results when Redis is back. Liveness is judged afresh after it.
                for watch in watches.values():
                    watch.missing_since = watch.deferred_since = None
                if time.monotonic() >= deadline:
                    raise self._unreachable(
                        exc, f"for {outage.lasted():.1f} s while collecting turn "
                        f"{plan.turn_id}, until the collect's timeout ({limit:g} s): its calls "
                        f"may still run; collect({plan.turn_id!r}) again once Redis is back",
                        plan.turn_id,
                    ) from None  # fmt: skip
                time.sleep(max(0.0, min(outage.pause(), deadline - time.monotonic())))

    def _find_lost(
        self, plan: TurnPlan, results: dict[str, ToolResult], watches: dict[str, _Watch]
    ) -> None:
        """Answer calls whose job can no longer produce a result, and unblock their turn.

        A started call whose worker stopped renewing it gets ``worker_lost``; a job RQ ended
        without a result (failed, stopped) gets it at once; and a call still waiting on
        earlier calls that all have results has its parents' jobs ended (their worker died
        after storing the result, before RQ recorded the job's end).
        """
        for index, rq_id in plan.job_ids.items():
            call_id = plan.call_ids[index]
            if call_id in results:
                continue
            status = job_status(self.client, rq_id)
            watch = watches[call_id]
            if status is JobStatus.DEFERRED:
                # Parents normally end milliseconds after storing their result; only a
                # deferral that outlasts a liveness period means a parent's worker died.
                now = time.monotonic()
                watch.deferred_since = watch.deferred_since or now
                if now - watch.deferred_since >= self.settings.call_liveness_s:
                    self._end_answered_parents(plan, index, results)
                continue
            ended_without_result = status in (JobStatus.FAILED, JobStatus.STOPPED)
            if not ended_without_result:
                alive = self.client.exists(self.keys.running(call_id))
                if status not in (JobStatus.STARTED, JobStatus.CANCELED, None) or alive:
                    watch.missing_since = None
                    continue
                now = time.monotonic()
                watch.missing_since = watch.missing_since or now
                # The key's expiry already proves call_liveness_s without a heartbeat; the
                # grace only covers a job RQ has started whose worker has not set it yet (or
                # a submit elsewhere still enqueueing).
                if now - watch.missing_since < 2 * self.settings.call_heartbeat_s:
                    continue
            if status is None:
                # No job and no run: the submit lost Redis before it enqueued this call.
                answer = _error(
                    call_id, plan.tools[index], ErrorType.CANCELLED,
                    f"{plan.tools[index]!r} did not run: it was never enqueued (Redis could not "
                    "be reached while its turn was submitted). Call it again.",
                )  # fmt: skip
                self.results.publish(plan.turn_id, answer)
                stored = self.results.get(call_id)
                if stored is not None:
                    results[call_id] = stored
                continue
            lost = _error(
                call_id, plan.tools[index], ErrorType.WORKER_LOST,
                f"The worker running {plan.tools[index]!r} stopped (it was killed or lost "
                "its connection) before it stored a result. The call may have run in part; "
                "check its effects before calling it again.",
            )  # fmt: skip
            if self.results.publish(plan.turn_id, lost):
                self._emit_raw("call_lost", call_id, plan.turn_id, plan.tools[index])
            end_lost_job(self.client, rq_id)
            stored = self.results.get(call_id)
            if stored is not None:
                results[call_id] = stored

    def _end_answered_parents(
        self, plan: TurnPlan, index: int, results: dict[str, ToolResult]
    ) -> None:
        position = next(i for i, batch in enumerate(plan.batches) if index in batch)
        if position == 0:
            return
        parents = plan.batches[position - 1]
        parent_ids = [plan.call_ids[i] for i in parents]
        known = {**results, **self.results.get_many([c for c in parent_ids if c not in results])}
        if all(call_id in known for call_id in parent_ids):
            for parent in parents:
                end_lost_job(self.client, plan.job_ids[parent])

    def _time_out(self, plan: TurnPlan, results: dict[str, ToolResult], limit: float) -> None:
        for index in plan.job_ids:
            call_id = plan.call_ids[index]
            if call_id in results:
                continue
            self.results.publish(
                plan.turn_id,
                _error(call_id, plan.tools[index], ErrorType.TIMEOUT,
                       f"No result for {plan.tools[index]!r} within {limit:g} s. The call "
                       "may still run or have run; check its effects before calling again."),
            )  # fmt: skip
        results.update(self.results.get_many([c for c in _enqueued(plan) if c not in results]))

    @contextlib.contextmanager
    def _reaching(self, doing: str, turn_id: str | None = None) -> Iterator[None]:
        """Turn an unreachable Redis into ``RedisUnavailable`` saying what was being done."""
        try:
            yield
        except _UNREACHABLE as exc:
            raise self._unreachable(exc, doing, turn_id) from None

    def _unreachable(
        self, exc: BaseException, doing: str, turn_id: str | None = None
    ) -> RedisUnavailable:
        return RedisUnavailable(
            f"Redis at {shown_url(str(self.redis_url))} could not be reached {doing}. "
            f"({type(exc).__name__}: {exc})",
            turn_id,
        )  # fmt: skip

    def _pending(self, turn: Turn) -> bool:
        enqueued = _enqueued(turn.plan)
        return len(self.results.get_many(enqueued)) < len(enqueued)

    def _load_plan(self, turn_id: str) -> TurnPlan:
        raw = self.client.get(self.keys.turn(turn_id))
        if raw is None:
            raise TurnError(f"No turn {turn_id!r} is known (never submitted, or expired).")
        return TurnPlan.model_validate_json(raw)

    def _stream_position(self) -> str:
        last: list[tuple[Any, Any]] = self.client.xrevrange(self.keys.events, count=1)  # type: ignore[assignment]
        if not last:
            return "-"
        entry_id = last[0][0]
        return "(" + (entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id))

    def _emit(self, event: str, call: ToolCall, turn_id: str, **data: Any) -> None:
        self._emit_raw(event, call.id, turn_id, call.name, **data)

    def _emit_raw(self, event: str, call_id: str, turn_id: str, tool: str, **data: Any) -> None:
        self.events.emit(event, call_id=call_id, turn_id=turn_id, tool=tool, **data)

    def _log_turn_events(self, turn: Turn) -> None:
        """Copy this turn's events, in the order Redis received them, to the JSONL log."""
        if self._jsonl_handle is None:
            return
        for _, item in read_events(self.client, self.keys, since=turn.stream_start):
            if item.turn_id == turn.turn_id:
                self._jsonl_handle.write(item.to_json_line() + "\n")
        self._jsonl_handle.flush()


def _enqueued(plan: TurnPlan) -> list[str]:
    """The call ids of the turn that went to the workers."""
    return [plan.call_ids[index] for index in sorted(plan.job_ids)]


def _refuse_duplicate_ids(calls: Sequence[ToolCall]) -> None:
    seen: set[str] = set()
    for call in calls:
        if call.id in seen:
            raise TurnError(f"Call id {call.id!r} appears twice in one turn; ids must be unique.")
        seen.add(call.id)


def _error(call_id: str, name: str, error_type: ErrorType, message: str) -> ToolResult:
    return ToolResult(
        call_id=call_id, name=name, status=ToolStatus.ERROR, content=message,
        original_chars=len(message), error_type=error_type, error_message=message,
    )  # fmt: skip
