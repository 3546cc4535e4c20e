"""What the lock says about itself: who asked (``OwnerInfo``) and the ``LockStatus`` snapshot."""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import BaseModel, ConfigDict

Mode = Literal["shared", "exclusive"]
Policy = Literal["fair", "read_preferring"]

SHARED: Mode = "shared"
EXCLUSIVE: Mode = "exclusive"
FAIR: Policy = "fair"
READ_PREFERRING: Policy = "read_preferring"


class OwnerInfo(BaseModel):
    """Who holds or waits for the lock; stored as JSON beside the token for status reads."""

    # Unknown fields from a newer writer are ignored rather than refused: status must still read.
    model_config = ConfigDict(frozen=True, extra="ignore")

    worker: str = ""
    host: str = ""
    pid: int = 0
    call_id: str = ""
    tool: str = ""

    @classmethod
    def current(cls, *, worker: str = "", call_id: str = "", tool: str = "") -> OwnerInfo:
        """This process (host and pid filled in), with the worker, call and tool given."""
        return cls(
            worker=worker, host=socket.gethostname(), pid=os.getpid(), call_id=call_id, tool=tool
        )


class HolderStatus(BaseModel):
    """One holder of the lock, as a status read saw it."""

    model_config = ConfigDict(frozen=True)

    token: str
    mode: Mode
    fence: int | None
    owner: OwnerInfo
    acquired_at_ms: int
    remaining_ms: int


class WaiterStatus(BaseModel):
    """One queued waiter, as a status read saw it; ``position`` starts at 1 (the head)."""

    model_config = ConfigDict(frozen=True)

    token: str
    mode: Mode
    position: int
    age_ms: int
    owner: OwnerInfo
    deadline_in_ms: int


# A fence is the primary's epoch above a 24-bit grant number: a fence of a newer primary is
# higher than every fence of an older one (executor/lock/lua/_prelude.lua, epoch_of_primary).
_SEQ_BITS = 24


def fence_of(epoch: int, seq: int) -> int:
    """The fence of an exclusive grant: ``epoch`` above ``seq``."""
    return (epoch << _SEQ_BITS) | seq


def fence_parts(fence: int) -> tuple[int, int]:
    """A fence's epoch and grant number (the two numbers the scripts keep)."""
    return fence >> _SEQ_BITS, fence & ((1 << _SEQ_BITS) - 1)


class LockCounters(BaseModel):
    """The scope's counters since its keys were created (a Redis restart resets them)."""

    model_config = ConfigDict(frozen=True)

    grants_shared: int = 0
    grants_exclusive: int = 0
    releases: int = 0
    cancels: int = 0
    forced_releases: int = 0
    expired_holders: int = 0
    expired_waiters: int = 0
    lost_leases: int = 0
    wakeups: int = 0
    epochs: int = 0  # new primaries (or data lost by a restart) seen by the lock's scripts


class LockStatus(BaseModel):
    """A consistent snapshot of one scope's lock: holders, queue, counters."""

    model_config = ConfigDict(frozen=True)

    scope: str
    policy: Policy
    server_time_ms: int
    last_fence: int
    holders: tuple[HolderStatus, ...]
    queue: tuple[WaiterStatus, ...]
    counters: LockCounters

    @property
    def mode(self) -> Mode | None:
        """How the lock is held now, or None when it is free."""
        if not self.holders:
            return None
        return self.holders[0].mode
