"""The orchestrator's side: submit a turn's tool calls, get one result per call, in order.

A turn is checked call by call before anything is enqueued (validation and approval are
sequential, and a rejection stops the turn); then its calls are partitioned into batches
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from redis import Redis
from redis.client import Pipeline

from executor import _texts as texts
from executor._errors import (
    InvalidArgumentsError,
    RedisUnavailable,
    SessionError,
    TurnError,
    UnknownToolError,
)
from executor._rq.jobs import (
    JobStatus,
    Queue,
    call_queue,
    enqueue_turn,
    job_status,
    named_queue,
)
from executor._settings import Settings
from executor.client._collector import LIVENESS_CHECK_S, Collector
from executor.client._outage import UNREACHABLE, connect, reaching, required_url, unreachable
from executor.client._routes import Routes
from executor.contract import ToolInfo, ToolRegistry
from executor.wire import (
    Acks,
    CallJob,
    ErrorType,
    EventLog,
    Keys,
    ResultStore,
    SessionStore,
    ToolCall,
    ToolResult,
    TurnPlan,
    check_session_name,
    new_turn_id,
    parse_call,
    partition,
    read_events,
)
from executor.wire import _refusals as refusals
from executor.wire._catalog import Catalog

log = logging.getLogger(__name__)

Approve = Callable[[ToolCall, ToolInfo], bool]
Check = Callable[[ToolCall, ToolInfo], "str | None"]


@dataclass
class Turn:
    """A submitted turn: its id and calls; pass it (or its id) to ``collect``."""

    turn_id: str
    calls: list[ToolCall]
    plan: TurnPlan
    stream_start: str = "-"
    #: Not collected yet: its wake-up list holds every result stored so far.
    fresh: bool = field(default=True, repr=False, compare=False)


@dataclass
class _Progress:
    """How far a submit got, for the error that says what runs when Redis went away."""

    plan_stored: bool = False


@dataclass
class Usage:
    """Tool calls submitted by this executor, against an optional limit ."""

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

    The tools are those the live workers on the queue publish (``tools()``); a call is
    checked against their published schema before anything is enqueued. ``registry`` replaces
    the published catalog with tools this process declares (the workers still have the last
    word). With no live worker on the queue, ``submit`` raises ``NoWorkerError`` at once, or
    after waiting up to ``wait_for_workers`` seconds for one.

    ``approve(call, tool)`` is asked, in order, for every call (read-only tools skip it while
    ``auto_approve_read_only``); False stops the turn. ``check(call, tool)`` may return a
    reason to block a call, which also stops the turn; ``tool`` is the call's ``ToolInfo``.
    ``max_tool_calls`` caps the calls this executor submits over its life. ``jsonl`` receives
    each turn's events, one JSON object a line.

    ``session`` (default ``settings.client.session``, ``TOOLPOOL_SESSION``) runs every turn in that
    session: its folder, lock scope and shell state, on the workers of the host it lives on;
    ``run(..., session=...)`` and ``submit(..., session=...)`` name one for a single turn.
    Without a session, calls run in the workers' own workspace and lock scope.
    """

    redis_url: str | None = None
    settings: Settings = field(default_factory=Settings.from_env)
    registry: ToolRegistry | None = None
    approve: Approve | None = None
    check: Check | None = None
    auto_approve_read_only: bool = True
    max_tool_calls: int | None = None
    jsonl: Path | IO[str] | None = None
    wait_for_workers: float = 0.0
    session: str | None = None

    def __post_init__(self) -> None:
        if self.session is None:
            self.session = self.settings.client.session or None
        if self.session is not None:
            check_session_name(self.session)
        url = required_url(self.redis_url, self.settings)
        self.redis_url = url
        self.keys = Keys(self.settings.redis.key_prefix)
        self.client = connect(url)
        self.results = ResultStore(
            self.client,
            self.keys,
            ttl=self.settings.worker.result_ttl,
            acks=Acks.of(self.settings, self.keys),
        )
        self.queue = call_queue(self.client, self.keys, self.settings.client.queue)
        self.events = EventLog(
            self.client, self.keys, maxlen=self.settings.worker.events_maxlen, worker="orchestrator"
        )
        self._collector = Collector(
            url,
            self.client,
            connect(url, blocking_s=LIVENESS_CHECK_S),
            self.results,
            self.keys,
            self.settings,
            self.events,
        )
        self.usage = Usage(self.max_tool_calls)
        self.sessions = SessionStore(self.client, self.keys)
        self._routes = Routes(
            self.client, self.keys, self.settings, wait_for_workers=self.wait_for_workers
        )
        self._queues: dict[str, Queue] = {}
        self._jsonl_handle: IO[str] | None = None
        if isinstance(self.jsonl, Path):
            self._jsonl_handle = self.jsonl.open("a", encoding="utf-8")
        elif self.jsonl is not None:
            self._jsonl_handle = self.jsonl

    def close(self) -> None:
        """Close the Redis connections (and the JSONL file this executor opened)."""
        self.client.close()
        self._collector.close()
        if isinstance(self.jsonl, Path) and self._jsonl_handle is not None:
            self._jsonl_handle.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the whole turn ------------------------------------------------------------------

    def run(
        self,
        calls: Iterable[ToolCall | dict[str, Any]],
        *,
        timeout: float | None = None,
        session: str | None = None,
    ) -> list[ToolResult]:
        """Submit a turn and wait for its results, in call order.

        At ``timeout`` (default ``settings.client.turn_timeout``) the turn is cancelled and every
        call still without a result gets a ``timeout`` result. ``session``: run the turn in
        this session (default: the executor's).
        """
        turn = self.submit(calls, session=session)
        try:
            return self.collect(turn, timeout=timeout)
        except BaseException:
            # A collect that answered every call leaves nothing to cancel (no round trip).
            # After an outage that outlasted the collect, Redis may still be away: the
            # RedisUnavailable raised by collect is the answer, not this clean-up's error.
            with contextlib.suppress(RedisUnavailable, *UNREACHABLE):
                if self._pending(turn):
                    self.cancel(turn)
            raise

    def submit(
        self, calls: Iterable[ToolCall | dict[str, Any]], *, session: str | None = None
    ) -> Turn:
        """Check, approve and enqueue a turn; return at once (``collect`` waits).

        ``session``: the turn runs in this session (default: the executor's). A session that
        does not exist or is being deleted answers every call ``unknown_session``.

        Raises ``TurnError``, and submits nothing, for an item that is no tool call (no tool
        name, keys of no known form) or two calls with one id; a call whose arguments are not
        a JSON object is answered ``invalid_arguments`` like any other bad call.

        Raises ``RedisUnavailable`` if Redis cannot be reached: before the turn's plan is
        stored nothing runs; after it, the error names the turn, whose enqueued calls run and
        whose other calls ``collect`` answers ``cancelled`` ("never enqueued").
        """
        parsed = _parse_calls(calls)
        _refuse_duplicate_ids(parsed)
        session = session or self.session
        if session is not None:
            check_session_name(session)
        turn_id = new_turn_id()
        progress = _Progress()
        try:
            return self._submit(turn_id, parsed, progress, session)
        except UNREACHABLE as exc:
            if not progress.plan_stored:
                raise unreachable(
                    self.redis_url,
                    exc,
                    "before the turn was submitted: none of its calls runs; "
                    "submit it again once Redis is back",
                ) from None
            raise unreachable(
                self.redis_url,
                exc,
                f"while enqueueing turn {turn_id}: the turn is enqueued whole or not at all; "
                f"collect({turn_id!r}) answers its calls, as never enqueued ('did not run') "
                "if the enqueue did not reach Redis",
                turn_id,
            ) from None

    def _submit(
        self, turn_id: str, parsed: list[ToolCall], progress: _Progress, session: str | None
    ) -> Turn:
        # Where this turn's events start, for the JSONL log only: no round trip without one.
        stream_start = self._stream_position() if self._jsonl_handle is not None else "-"
        queue, problem = self.queue.name, ""
        if session is not None:
            routed, problem = self._routes.session_queue(session)
            queue = routed or queue
        tools: dict[str, ToolInfo] = {}
        runnable: list[int] = []
        if problem:  # a session that cannot be used: every call answered, none enqueued
            answered = _unknown_session(parsed, range(len(parsed)), problem)
        else:
            answered, runnable, tools = self._screen(turn_id, parsed, queue)
        plan = _plan(turn_id, parsed, runnable, answered, tools, session, queue)
        # One round trip: the calls' ids claimed and the plan stored (before the jobs exist,
        # so a collector elsewhere can always read it). A claim that fails is rare: the plan
        # is then stored again without that call, still before anything is enqueued.
        kept = self._claim(turn_id, parsed, runnable, answered, session, plan)
        progress.plan_stored = True
        if kept != runnable:
            plan = _plan(turn_id, parsed, kept, answered, tools, session, queue)
            self._store_plan(self.client, plan)
        self._enqueue(plan, parsed)
        # The plan, the ids' claims and the queued calls, on enough replicas before the turn
        # is handed back (a no-op without TOOLPOOL_REDIS_REPLICAS).
        self.results.acks.confirm(self.client, f"the enqueue of turn {turn_id}")
        return Turn(turn_id=turn_id, calls=parsed, plan=plan, stream_start=stream_start)

    def _store_plan(self, target: Redis | Pipeline, plan: TurnPlan) -> None:
        target.set(
            self.keys.turn(plan.turn_id), plan.stored_json(), ex=self.settings.worker.result_ttl
        )

    def _enqueue(self, plan: TurnPlan, parsed: list[ToolCall]) -> None:
        """Store the plan's batches in one transaction: the first on the queue, the later
        ones waiting for the barrier that the batch before releases (``enqueue_turn``)."""
        batches = [
            [
                CallJob(
                    call=parsed[index],
                    turn_id=plan.turn_id,
                    index=index,
                    session=plan.session,
                    then=plan.then(index),
                )
                for index in batch_indexes
            ]
            for batch_indexes in plan.batches
        ]
        queue = self._queue_named(plan.queue or self.queue.name)
        enqueue_turn(
            queue,
            batches,
            doorbell=self.keys.doorbell(queue.name),
            barrier_key=self.keys.turn_barrier(plan.turn_id),
            barrier_ttl=self.settings.worker.result_ttl,
            result_ttl=self.settings.client.rq_record_ttl,
            failure_ttl=self.settings.worker.result_ttl,
        )

    def _queue_named(self, name: str) -> Queue:
        """The RQ queue ``name``, kept: a new one would ask Redis its version again."""
        if name == self.queue.name:
            return self.queue
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = named_queue(self.client, name)
        return found

    def collect(self, turn: Turn | str, *, timeout: float | None = None) -> list[ToolResult]:
        """Wait for every result of ``turn`` (a ``Turn`` or its id); return them in order.

        A call whose worker died gets a ``worker_lost`` result within about
        ``settings.client.call_liveness_s`` + 3 s (at once when its pool sees the worker die); at
        ``timeout`` every call still without one gets a ``timeout`` result. Never waits
        forever: while Redis is unreachable it keeps trying until ``timeout``, then raises
        ``RedisUnavailable`` (the calls may still run; collect the turn again later).
        """
        limit = self.settings.client.turn_timeout if timeout is None else timeout
        plan, results = self._wait(turn, limit, time_out=True)
        return in_call_order(plan, results)

    def poll(self, turn: Turn | str, *, wait: float = 0.0) -> list[ToolResult | None]:
        """The results of ``turn`` so far, in call order (``None`` for a call without one
        yet), once all are in or ``wait`` seconds have passed.

        Unlike ``collect``, it answers no call ``timeout``: polling a turn leaves its calls
        running. A call whose worker died is still answered ``worker_lost`` while it waits.
        """
        plan, results = self._wait(turn, wait, time_out=False)
        return so_far(plan, results)

    def _wait(
        self, turn: Turn | str, limit: float, *, time_out: bool
    ) -> tuple[TurnPlan, dict[str, ToolResult]]:
        deadline = time.monotonic() + limit
        if isinstance(turn, Turn):
            plan = turn.plan
        else:
            with reaching(self.redis_url, f"while loading turn {turn}", turn):
                plan = self._load_plan(turn)
        results = self._collector.wait(
            plan, deadline, limit, fresh=take_fresh(turn), time_out=time_out
        )
        if len(results) == len(plan.enqueued()):
            self.log_collected(turn)
        return plan, results

    @property
    def collector(self) -> Collector:
        """What waits for this executor's turns (``AsyncExecutor`` drives it on its loop)."""
        return self._collector

    @property
    def logs_events(self) -> bool:
        """Whether collected turns' events are copied to a JSONL log."""
        return self._jsonl_handle is not None

    def log_collected(self, turn: Turn | str) -> None:
        """Copy a collected turn's events to the JSONL log (a ``Turn`` this executor made)."""
        if isinstance(turn, Turn) and self._jsonl_handle is not None:
            copying = f"while copying turn {turn.turn_id}'s events"
            with reaching(self.redis_url, copying, turn.turn_id):
                self._log_turn_events(turn)

    def cancel(self, turn: Turn | str) -> None:
        """Stop a turn: queued calls do not run, running ones are told to stop.

        Calls that have not started get a ``cancelled`` result now; running calls see the
        flag within a heartbeat and end with their own result.
        """
        turn_id = turn.turn_id if isinstance(turn, Turn) else turn
        with reaching(self.redis_url, f"while cancelling turn {turn_id}", turn_id):
            self._cancel(turn.plan if isinstance(turn, Turn) else self._load_plan(turn))

    def _cancel(self, plan: TurnPlan) -> None:
        self.client.set(
            self.keys.turn_cancel(plan.turn_id), "1", ex=self.settings.worker.result_ttl
        )
        stored = self.results.get_many(plan.enqueued())
        # Later calls first: an earlier call's answer starts the next batch, whose jobs must
        # find theirs stored (a worker that takes one then answers with it and runs nothing).
        # In call order, a worker could take one between the two, and it would be skipped
        # here as started, its answer left to that worker for a moment after the cancel.
        for index, rq_id in sorted(plan.job_ids.items(), reverse=True):
            call_id = plan.call_ids[index]
            if call_id in stored or job_status(self.client, rq_id) is JobStatus.STARTED:
                continue
            self.results.publish(
                plan.turn_id,
                ToolResult.failure(
                    call_id,
                    plan.tools[index],
                    ErrorType.CANCELLED,
                    texts.turn_cancelled(plan.tools[index]),
                ),
                plan.then(index),
            )

    def tools(self, *, session: str | None = None) -> list[ToolInfo]:
        """The tools calls can name: the live workers' catalog (or ``registry``'s tools); in a
        session (default: the executor's), those of the workers of the session's host.

        For a model's tool list: ``export_tools(executor.tools(), "openai")``.
        """
        if self.registry is not None:
            return [ToolInfo.of(item) for item in self.registry]
        return self.catalog(session=session).tools()

    def catalog(self, *, session: str | None = None) -> Catalog:
        """The live workers on this executor's queue (in a session: on its host's queue) and
        the tools they serve, read now; ``SessionError`` for a session that cannot be used."""
        with reaching(self.redis_url, "while reading the workers' tool catalog"):
            queue = self.queue.name
            session = session or self.session
            if session is not None:
                routed, problem = self._routes.session_queue(session)
                if routed is None:
                    raise SessionError(problem[0].upper() + problem[1:] + ".")
                queue = routed
            return self._routes.read(queue)

    def full_output(self, call_id: str) -> str | None:
        """The full output of a truncated call, while it is kept."""
        with reaching(self.redis_url, f"while reading the full output of call {call_id}"):
            return self.results.full_output(call_id)

    # -- inside ----------------------------------------------------------------------------

    def _screen(
        self, turn_id: str, calls: Sequence[ToolCall], queue: str
    ) -> tuple[dict[int, ToolResult], list[int], dict[str, ToolInfo]]:
        """Check each call in order; return the answered ones, the runnable and their tools.

        Answered calls (invalid, unknown, rejected) keep their results in the turn's plan, not
        under their call id: a reused id must not read, or overwrite, another turn's result.
        """
        answered: dict[int, ToolResult] = {}
        runnable: list[int] = []
        tools: dict[str, ToolInfo] = {}
        stop_reason: tuple[str, str] | None = None  # the refused call's id, and why
        for index, call in enumerate(calls):
            if stop_reason is not None:
                answered[index] = ToolResult.failure(
                    call.id,
                    call.name,
                    ErrorType.REJECTED,
                    texts.turn_stopped(call.name, *stop_reason),
                )
                continue
            checked = self._check(call, queue)
            if isinstance(checked, ToolResult):
                answered[index] = checked
                continue
            tool = checked
            refusal = self._refusal(turn_id, call, tool)
            if refusal is not None:
                answered[index] = ToolResult.failure(
                    call.id, call.name, ErrorType.REJECTED, refusal
                )
                stop_reason = (call.id, refusal)
                continue
            runnable.append(index)
            tools[call.id] = tool
        return answered, runnable, tools

    def _check(self, call: ToolCall, queue: str) -> ToolInfo | ToolResult:
        """The tool ``call`` names, or the result that answers a call that cannot run."""
        try:
            tool = (
                ToolInfo.of(self.registry.get(call.name))
                if self.registry is not None
                else self._routes.tool(call.name, queue)
            )
        except UnknownToolError as exc:
            return refusals.unknown_tool(call, exc)
        if call.arguments_error is not None:  # not JSON, or not an object: never enqueued
            return refusals.invalid_arguments(call, [call.arguments_error])
        try:
            tool.validate_arguments(call.arguments)
        except InvalidArgumentsError as exc:
            return refusals.invalid_arguments(call, exc.problems)
        return tool

    def _claim(
        self,
        turn_id: str,
        calls: Sequence[ToolCall],
        runnable: list[int],
        answered: dict[int, ToolResult],
        session: str | None,
        plan: TurnPlan,
    ) -> list[int]:
        """Claim the runnable calls' ids for this turn and store ``plan`` (one round trip);
        return the calls claimed. A call whose id another turn holds is answered here.

        In a session, the calls are also listed as the session's: it cannot be deleted while
        they wait or run.
        """
        with self.client.pipeline(transaction=False) as pipe:
            for index in runnable:
                pipe.set(
                    self.keys.call_claim(calls[index].id),
                    turn_id,
                    nx=True,
                    ex=self.settings.worker.result_ttl,
                )
            if session is not None and runnable:
                self.sessions.add_calls(session, [calls[i].id for i in runnable], pipe=pipe)
            self._store_plan(pipe, plan)
            replies = pipe.execute()
        claimed = replies[: len(runnable)]
        if session is not None and runnable and not replies[len(runnable)]:
            # Deleted (or being deleted) since its host was looked up: nothing is enqueued.
            self._routes.forget(session)
            answered.update(_unknown_session(calls, runnable, texts.session_gone(session)))
            return []
        kept = []
        for index, ok in zip(runnable, claimed, strict=True):
            if ok:
                kept.append(index)
                continue
            call = calls[index]
            answered[index] = ToolResult.failure(
                call.id,
                call.name,
                ErrorType.REJECTED,
                texts.call_id_taken(call.id),
            )
        return kept

    def _refusal(self, turn_id: str, call: ToolCall, tool: ToolInfo) -> str | None:
        if self.check is not None:
            reason = self.check(call, tool)
            if reason:
                return texts.check_blocked(reason)
        if self.approve is not None and not (self.auto_approve_read_only and tool.is_read_only):
            approved = self.approve(call, tool)
            self._emit("approval", call, turn_id, approved=approved)
            if not approved:
                return texts.user_rejected()
        if not self.usage.take():
            return texts.call_limit_reached(self.usage.limit or 0)  # refused only under a limit
        return None

    def _pending(self, turn: Turn) -> bool:
        enqueued = turn.plan.enqueued()
        return len(self.results.get_many(enqueued)) < len(enqueued)

    def _load_plan(self, turn_id: str) -> TurnPlan:
        # With acknowledged writes, read with the acknowledgement: a plan only the old primary
        # had (its submit was refused) must not be answered, then be unknown after a failover.
        acks = self.results.acks
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.turn(turn_id))
            added = acks.queue_confirm(pipe)
            replies = pipe.execute(raise_on_error=False)
        if added:
            acks.check(replies[-1], f"the plan of turn {turn_id}")
        if isinstance(replies[0], BaseException):
            raise replies[0]
        return plan_from(turn_id, replies[0])

    def _stream_position(self) -> str:
        last: list[tuple[Any, Any]] = self.client.xrevrange(self.keys.events, count=1)  # type: ignore[assignment]
        if not last:
            return "-"
        entry_id = last[0][0]
        return "(" + (entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id))

    def _emit(self, event: str, call: ToolCall, turn_id: str, **data: Any) -> None:
        self.events.emit(event, call_id=call.id, turn_id=turn_id, tool=call.name, **data)

    def _log_turn_events(self, turn: Turn) -> None:
        """Copy this turn's events, in the order Redis received them, to the JSONL log."""
        if self._jsonl_handle is None:
            return
        for _, item in read_events(self.client, self.keys, since=turn.stream_start):
            if item.turn_id == turn.turn_id:
                self._jsonl_handle.write(item.to_json_line() + "\n")
        self._jsonl_handle.flush()


def plan_from(turn_id: str, stored: bytes | str | None) -> TurnPlan:
    """The plan of ``turn_id`` as read from its key; ``TurnError`` if there was none."""
    if stored is None:
        raise TurnError(f"No turn {turn_id!r} is known (never submitted, or expired).")
    return TurnPlan.model_validate_json(stored)


def take_fresh(turn: Turn | str) -> bool:
    """Whether ``turn`` was never collected (and from now on, it has been)."""
    if not isinstance(turn, Turn):
        return False
    fresh, turn.fresh = turn.fresh, False
    return fresh


def in_call_order(plan: TurnPlan, results: dict[str, ToolResult]) -> list[ToolResult]:
    """One result per call of the turn, in call order: answered ones from the plan; each
    names the turn (``turn_id``)."""
    return [
        _of_turn(plan, plan.answered[index] if index in plan.answered else results[call_id])
        for index, call_id in enumerate(plan.call_ids)
    ]


def so_far(plan: TurnPlan, results: dict[str, ToolResult]) -> list[ToolResult | None]:
    """``in_call_order`` for a turn still running: ``None`` for a call without a result."""
    found = [
        plan.answered[index] if index in plan.answered else results.get(call_id)
        for index, call_id in enumerate(plan.call_ids)
    ]
    return [None if result is None else _of_turn(plan, result) for result in found]


def _of_turn(plan: TurnPlan, result: ToolResult) -> ToolResult:
    """``result`` naming its turn. Set here, where results are handed back, and not where
    they are stored: a stored result stays readable by a worker of an older version."""
    if result.turn_id == plan.turn_id:
        return result
    return result.model_copy(update={"turn_id": plan.turn_id})


def _plan(
    turn_id: str,
    parsed: list[ToolCall],
    runnable: list[int],
    answered: dict[int, ToolResult],
    tools: dict[str, ToolInfo],
    session: str | None,
    queue: str,
) -> TurnPlan:
    """The turn's plan: its runnable calls in batches (consecutive concurrency-safe calls
    together, every other call alone), the answers of the others, where its jobs go."""
    batches = partition([parsed[i] for i in runnable], lambda c: tools[c.id].is_concurrency_safe)
    return TurnPlan(
        turn_id=turn_id,
        call_ids=[c.id for c in parsed],
        tools=[c.name for c in parsed],
        # partition() numbered the runnable calls 0..n-1; map back to the turn's indexes.
        batches=[[runnable[i] for i in batch.indexes] for batch in batches],
        answered=dict(answered),
        session=session,
        queue=queue,
    )


def _parse_calls(calls: Iterable[ToolCall | dict[str, Any]]) -> list[ToolCall]:
    """The turn's calls as ``ToolCall``s; ``TurnError`` naming the first that is none.

    A call whose arguments cannot be read is kept (``arguments_error``) and answered
    ``invalid_arguments``; only what has no tool name to answer to fails the whole turn.
    """
    parsed = []
    for number, item in enumerate(calls, 1):
        try:
            parsed.append(parse_call(item))
        except ValueError as exc:
            raise TurnError(f"Call {number} is not a tool call: {exc}") from None
    return parsed


def _unknown_session(
    calls: Sequence[ToolCall], indexes: Iterable[int], problem: str
) -> dict[int, ToolResult]:
    """``unknown_session`` answers for the calls at ``indexes``: none of them ran."""
    return {
        index: ToolResult.failure(
            calls[index].id,
            calls[index].name,
            ErrorType.UNKNOWN_SESSION,
            texts.session_refused(calls[index].name, problem),
        )
        for index in indexes
    }


def _refuse_duplicate_ids(calls: Sequence[ToolCall]) -> None:
    seen: set[str] = set()
    for call in calls:
        if call.id in seen:
            raise TurnError(f"Call id {call.id!r} appears twice in one turn; ids must be unique.")
        seen.add(call.id)
