"""The child processes of the lock's multi-process proofs (tests/test_lock_processes.py).

Each child is a real OS process started with
``python -m tests.support.lock_proc '<ChildConfig JSON>'`` (the repository root on its
``PYTHONPATH``). It builds its own ``RWLock`` from the URL (``RWLock.from_url``: its own
clients, and the process's own lease keeper thread), plays one role, and reports:

- every hold it had, one JSON line each, to its own file (``ChildConfig.out``): mode, token,
  fence, start and end on ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process
  on a Linux host, so holds of different processes can be compared), and what release said;
- events the parent waits for (held, lost, checked) on its Redis list ``events_key(name)``.

Children that must start together wait on one barrier: each pushes its name to ``READY_KEY``
and blocks on ``GO_KEY``, where the parent pushes one item per child when all are ready.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict

from executor import FenceError
from executor.lock import Lease, LockTimeout, Mode, OwnerInfo, Policy, RWLock

Role = Literal["contender", "reader", "waiter", "holder", "long_holder"]

# The harness's own keys, beside the lock's (the proofs run on a private, flushed server).
READY_KEY = "lockproc:ready"
GO_KEY = "lockproc:go"
STOP_KEY = "lockproc:stop"
# A child that outlives its parent's interest gives up on a barrier or an order after this.
_ORPHAN_S = 60


def events_key(name: str) -> str:
    """The list a child pushes its events to."""
    return f"lockproc:events:{name}"


def control_key(name: str) -> str:
    """The list a child waits on for the parent's next order."""
    return f"lockproc:control:{name}"


class ChildConfig(BaseModel):
    """What one child does; sent as JSON on its command line."""

    model_config = ConfigDict(frozen=True)

    role: Role
    name: str
    url: str
    scope: str
    out: str
    policy: Policy = "fair"
    lease_ms: int = 1000
    recheck_s: float = 0.25
    waiter_ttl_ms: int | None = None
    #: waiter, holder: the mode to ask for; contender: ignored (random per hold).
    mode: Mode = "exclusive"
    #: waiter: the lease token to use, so the parent can find it in the queue.
    token: str | None = None
    timeout: float = 20.0
    #: contender: how many holds.
    iterations: int = 20
    #: contender, reader, waiter, long_holder: each hold lasts uniform(low, high) ms.
    hold_ms: tuple[float, float] = (0.0, 0.0)
    #: contender: the chance that a hold is exclusive.
    exclusive_share: float = 0.3
    seed: int = 0
    #: wait on the start barrier before the first acquire.
    barrier: bool = False
    #: long_holder: how often it checks its fence while it holds.
    check_every_ms: float = 100.0


class _Child:
    """One child's lock, clients and reports."""

    def __init__(self, config: ChildConfig) -> None:
        self.config = config
        self.random = random.Random(config.seed)
        self.lock = RWLock.from_url(
            config.url,
            config.scope,
            lease_ms=config.lease_ms,
            recheck_s=config.recheck_s,
            waiter_ttl_ms=config.waiter_ttl_ms,
            policy=config.policy,
        )
        # Barrier and orders block for long; reports come from the keeper thread too.
        self.control = redis.Redis.from_url(config.url, socket_timeout=_ORPHAN_S + 5)
        self.owner = OwnerInfo.current(worker=config.name, tool="lock_proc")
        self._out_path = Path(config.out)

    def close(self) -> None:
        # A lost lease is reported to Redis by the keeper thread; a child that exited at once
        # would take the report with it (the keeper's thread is a daemon).
        deadline = time.monotonic() + 5.0
        while self.lock.keeper.pending_reports and time.monotonic() < deadline:
            time.sleep(0.01)
        self.lock.close()
        self.control.close()

    def record(self, **fields: Any) -> None:
        # Appended and closed per record: a child killed later leaves every record complete.
        with self._out_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"name": self.config.name, **fields}) + "\n")

    def event(self, kind: str, **fields: Any) -> None:
        payload = json.dumps({"kind": kind, "at": time.monotonic(), **fields})
        self.control.rpush(events_key(self.config.name), payload)

    def wait_for_go(self) -> None:
        self.control.rpush(READY_KEY, self.config.name)
        if self.control.blpop([GO_KEY], timeout=_ORPHAN_S) is None:
            raise TimeoutError("the parent never released the start barrier")

    def hold_s(self) -> float:
        low, high = self.config.hold_ms
        return self.random.uniform(low, high) / 1000

    def acquire(self, mode: Mode) -> Lease:
        return self.lock.acquire(
            mode, self.config.timeout, owner=self.owner, token=self.config.token
        )

    def hold(self, lease: Lease, seconds: float, *, stop_check: bool = False) -> bool:
        """Hold ``lease`` for ``seconds``, record it, release; True when told to stop."""
        start = time.monotonic()
        time.sleep(seconds)  # the work done under the lock
        stop = bool(stop_check and self.control.exists(STOP_KEY))
        end = time.monotonic()
        held = lease.release()
        self.record(
            mode=lease.mode,
            token=lease.token,
            fence=lease.fence,
            start=start,
            end=end,
            held=held,
            waited=lease.waited_s,
            signals=lease.signals,
        )
        return stop


def _contender(child: _Child) -> None:
    """Take the lock ``iterations`` times, each in a random mode, for a short random hold."""
    for _ in range(child.config.iterations):
        exclusive = child.random.random() < child.config.exclusive_share
        lease = child.acquire("exclusive" if exclusive else "shared")
        child.hold(lease, child.hold_s())


def _reader(child: _Child) -> None:
    """Hold the lock shared again and again, with no pause between holds, until told to stop."""
    while True:
        lease = child.acquire("shared")
        if child.hold(lease, child.hold_s(), stop_check=True):
            return


def _waiter(child: _Child) -> None:
    """Ask once; record the grant (or the timeout), hold briefly, release."""
    asked = time.monotonic()
    try:
        lease = child.acquire(child.config.mode)
    except LockTimeout:
        child.record(mode=child.config.mode, granted=False, asked=asked, gave_up=time.monotonic())
        return
    child.hold(lease, child.hold_s())


def _holder(child: _Child) -> None:
    """Hold until killed or paused; on the order "check", report what its fence checks say."""
    lease = child.acquire(child.config.mode)
    lease.on_lost(lambda lost: child.event("lost", reason=lost.lost_reason))
    child.event("held", token=lease.token, fence=lease.fence)
    reply = child.control.blpop([control_key(child.config.name)], timeout=_ORPHAN_S)
    if reply is None:
        raise TimeoutError("no order came")
    assert lease.fence is not None
    lease_check = lease.check_fence()
    server_check = child.lock.check_fence(lease.token, lease.fence)
    try:
        lease.assert_fenced()
    except FenceError as error:
        refused = str(error)
    else:
        refused = ""
    child.event(
        "checked",
        lease_check=lease_check,
        server_check=server_check,
        refused=refused,
        lost=lease.lost,
        released=lease.release(),
    )


def _long_holder(child: _Child) -> None:
    """Hold for ``hold_ms`` (several leases), proving the fence every ``check_every_ms``."""
    lease = child.acquire("exclusive")
    lost = threading.Event()
    lease.on_lost(lambda _: lost.set())
    child.event("held", token=lease.token, fence=lease.fence)
    start = time.monotonic()
    until = start + child.hold_s()
    checks = failed = 0
    while not lost.wait(child.config.check_every_ms / 1000):
        checks += 1
        failed += 0 if lease.check_fence() else 1
        if time.monotonic() >= until:
            break
    lease.assert_fenced()
    end = time.monotonic()
    held = lease.release()
    child.record(
        mode=lease.mode,
        token=lease.token,
        fence=lease.fence,
        start=start,
        end=end,
        held=held,
        checks=checks,
        failed_checks=failed,
        lost=lost.is_set(),
    )


_ROLES = {
    "contender": _contender,
    "reader": _reader,
    "waiter": _waiter,
    "holder": _holder,
    "long_holder": _long_holder,
}


def main(argv: list[str]) -> int:
    """Run the role that the JSON config in ``argv[1]`` names; 0 on success."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    config = ChildConfig.model_validate_json(argv[1])
    child = _Child(config)
    try:
        if config.barrier:
            child.wait_for_go()
        _ROLES[config.role](child)
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        child.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
