"""Agents that each work in a session of their own: turns of a coding agent's usual mix.

Used by ``benchmarks.many_sessions``. An agent is a thread with an ``Executor`` bound to its
session; it runs ``turns`` turns one after another, each of four calls as a coding agent makes
them: ``write_file`` of a note, ``read_file`` and ``grep`` of it (concurrency-safe: one batch)
and a ``bash`` of ``true``. So a turn is three batches in order, in the session's own lock
scope. All agents are released together by one barrier; a turn's latency runs from its
``run`` being called to its results returned.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.sides import BenchError
from executor import Executor, Settings, ToolResult, ToolStatus

CALLS_A_TURN = 4
# A note of about 1 KB, different each turn, so that each write changes the file.
_LINE = "turn {turn}: the agent notes what it changed and what it will try next\n"
_LINES = 14
_PATIENCE_S = 120.0


@dataclass(frozen=True)
class LoadRun:
    """One run of ``agents`` agents of ``turns`` turns each: wall time (first turn's start to
    last turn's end), every turn's latency in seconds, and the calls that did not succeed
    (with the first of them, as an example)."""

    agents: int
    turns: int
    wall_s: float
    latencies_s: tuple[float, ...]
    failed: int
    # The first failed call seen ("name: what it answered"), "" if none failed.
    example: str = ""

    @property
    def calls(self) -> int:
        return self.agents * self.turns * CALLS_A_TURN

    @property
    def rate(self) -> float:
        """Calls a second over the whole run."""
        return self.calls / self.wall_s


def percentile(values: list[float] | tuple[float, ...], share: float) -> float:
    """The nearest-rank percentile of ``values``: the smallest value with at least ``share``
    of them at or below it (``share`` 0.5: the median, 0.99: p99)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(share * len(ordered)))) - 1]


def turn_calls(prefix: str, turn: int) -> list[dict[str, Any]]:
    """The calls of one turn; their ids start with ``prefix`` (ids may be used once)."""
    note = _LINE.format(turn=turn) * _LINES
    return [
        {
            "id": f"{prefix}-t{turn}-w",
            "name": "write_file",
            "arguments": {"path": "notes.txt", "content": note},
        },
        {"id": f"{prefix}-t{turn}-r", "name": "read_file", "arguments": {"path": "notes.txt"}},
        {"id": f"{prefix}-t{turn}-g", "name": "grep", "arguments": {"pattern": r"turn \d+:"}},
        {"id": f"{prefix}-t{turn}-b", "name": "bash", "arguments": {"command": "true"}},
    ]


def failures(results: list[ToolResult]) -> list[ToolResult]:
    """The calls of a turn that did not succeed (a bash that did not exit 0 included)."""
    return [
        result
        for result in results
        if result.status is not ToolStatus.OK
        or (result.name == "bash" and not result.content.startswith("exit code: 0"))
    ]


@dataclass
class _Agent:
    """What one agent's thread saw: (start, end, failed calls) per turn, or its error."""

    turns: list[tuple[float, float, int]]
    error: BaseException | None = None
    failed: ToolResult | None = None


def run_agents(settings: Settings, sessions: list[str], turns: int, tag: str) -> LoadRun:
    """An agent in each of ``sessions``, ``turns`` turns each, released together."""
    barrier = threading.Barrier(len(sessions))
    agents = [_Agent(turns=[]) for _ in sessions]

    def agent(index: int) -> None:
        seen = agents[index]
        try:
            with Executor(settings=settings, session=sessions[index]) as executor:
                executor.catalog()  # the session's route and its host's tools, before the clock
                barrier.wait(timeout=_PATIENCE_S)
                for turn in range(turns):
                    calls = turn_calls(f"{tag}-a{index}", turn)
                    started = time.perf_counter()
                    results = executor.run(calls, timeout=_PATIENCE_S)
                    ended, failed = time.perf_counter(), failures(results)
                    seen.turns.append((started, ended, len(failed)))
                    seen.failed = seen.failed or next(iter(failed), None)
        except BaseException as exc:  # handed to the main thread, which raises it
            seen.error = exc
            barrier.abort()

    threads = [
        threading.Thread(target=agent, args=(index,), name=f"agent-{index}", daemon=True)
        for index in range(len(sessions))
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + _PATIENCE_S * (turns + 2)
    for thread in threads:
        thread.join(max(0.1, deadline - time.monotonic()))
    for index, seen in enumerate(agents):
        if seen.error is not None and not isinstance(seen.error, threading.BrokenBarrierError):
            raise BenchError(f"agent {index} failed: {seen.error!r}") from seen.error
    if any(thread.is_alive() for thread in threads) or any(len(a.turns) < turns for a in agents):
        raise BenchError(f"the agents did not all finish {turns} turn(s) in time")
    spans = [span for seen in agents for span in seen.turns]
    return LoadRun(
        agents=len(sessions),
        turns=turns,
        wall_s=max(end for _, end, _ in spans) - min(start for start, _, _ in spans),
        latencies_s=tuple(end - start for start, end, _ in spans),
        failed=sum(failed for *_, failed in spans),
        example=next(
            (f"{a.failed.name}: {a.failed.content[:300]!r}" for a in agents if a.failed), ""
        ),
    )
