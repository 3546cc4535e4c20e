"""A turn's tool calls: partitioned into batches and planned as jobs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from executor.wire._models import ToolCall, ToolResult


@dataclass(frozen=True)
class Batch:
    """Calls that run together: several concurrency-safe calls, or one exclusive call."""

    concurrency_safe: bool
    indexes: tuple[int, ...]


def partition(calls: Sequence[ToolCall], is_safe: Callable[[ToolCall], bool]) -> list[Batch]:
    """Partition a turn: consecutive safe calls share a batch; each other call is alone.

    Batches run in order; the calls of a safe batch run in parallel.
    """
    batches: list[Batch] = []
    for index, call in enumerate(calls):
        safe = is_safe(call)
        if safe and batches and batches[-1].concurrency_safe:
            last = batches.pop()
            batches.append(Batch(True, (*last.indexes, index)))
        else:
            batches.append(Batch(safe, (index,)))
    return batches


def new_turn_id() -> str:
    """A fresh turn id."""
    return uuid.uuid4().hex


def job_id(turn_id: str, index: int) -> str:
    """The RQ job id of call ``index`` of a turn."""
    return f"tp-{turn_id}-{index}"


class CallJob(BaseModel):
    """What one RQ job carries: the call and where it belongs. Only JSON."""

    model_config = ConfigDict(extra="forbid")

    call: ToolCall
    turn_id: str
    index: int
    #: The session the call runs in (its folder, lock scope and shell state); None: the
    #: worker's own workspace and scope.
    session: str | None = None
    #: True when the call is in its turn's last batch: no call of the turn waits on it.
    last_batch: bool = False


class TurnPlan(BaseModel):
    """A submitted turn, stored so that any process can collect its results.

    ``job_ids`` are the calls sent to the workers (their results are stored by call id):
    every call in ``batches``, so it is not stored but derived (``stored_json``);
    ``answered`` are the calls answered before that (invalid, unknown, rejected).
    """

    model_config = ConfigDict(extra="forbid")

    turn_id: str
    call_ids: list[str]
    tools: list[str]
    batches: list[list[int]]
    job_ids: dict[int, str] = Field(default_factory=dict)
    answered: dict[int, ToolResult] = Field(default_factory=dict)
    submitted_at: float = Field(default_factory=time.time)
    #: The session the turn ran in, and the RQ queue its calls went to.
    session: str | None = None
    queue: str = ""

    @model_validator(mode="after")
    def _derive_job_ids(self) -> TurnPlan:
        if not self.job_ids:
            self.job_ids = {i: job_id(self.turn_id, i) for batch in self.batches for i in batch}
        return self

    def stored_json(self) -> str:
        """The plan as stored in Redis: without what is derived or left at its default (a
        turn of one call is a key of about 150 bytes, kept for the results' lifetime)."""
        return self.model_dump_json(exclude={"job_ids"}, exclude_defaults=True)

    def enqueued(self) -> list[str]:
        """The call ids of the turn that went to the workers, in call order."""
        return [self.call_ids[index] for index in sorted(self.job_ids)]
