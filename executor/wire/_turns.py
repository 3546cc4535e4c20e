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


class NextBatch(BaseModel):
    """What follows a call's batch: the barrier that counts the batch's results, and the jobs
    the call that stores the batch's last result puts on the queue."""

    model_config = ConfigDict(extra="forbid")

    #: The call's batch, by position in the turn (the field of the turn's barrier).
    batch: int
    #: The RQ queue of the turn, and the jobs of the batch after this one.
    queue: str
    jobs: list[str]


class CallJob(BaseModel):
    """What one RQ job carries: the call and where it belongs. Only JSON."""

    model_config = ConfigDict(extra="forbid")

    call: ToolCall
    turn_id: str
    index: int
    #: The session the call runs in (its folder, lock scope and shell state); None: the
    #: worker's own workspace and scope.
    session: str | None = None
    #: The batch after this call's: None for the turn's last batch, on which nothing waits.
    then: NextBatch | None = None


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

    def then(self, index: int) -> NextBatch | None:
        """What follows the batch of call ``index``; None in the last batch (or not enqueued)."""
        for position, batch in enumerate(self.batches[:-1]):
            if index in batch:
                following = self.batches[position + 1]
                return NextBatch(
                    batch=position, queue=self.queue, jobs=[self.job_ids[i] for i in following]
                )
        return None

    def enqueued(self) -> list[str]:
        """The call ids of the turn that went to the workers, in call order."""
        return [self.call_ids[index] for index in sorted(self.job_ids)]
