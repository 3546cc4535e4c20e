"""The fault run's faults: one of each kind first, in random order, then at random.

SIGKILL of a worker, SIGKILL of an exclusive holder, SIGSTOP of a holder beyond its lease, a
proxied worker cut off from Redis beyond its lease, and one Redis restart (SIGKILL, same port
and AOF dir). A fault aimed at a holder that released first is recorded as what it turned out
to be (``kill_random``, ``cut_idle``) or not at all (a SIGSTOP that missed).

A holder is looked for in every lock scope of the run (the workers' own and, with sessions,
each session's), starting each look at the next scope, so each scope's holders get hit.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time

import redis

from executor.lock import RWLock
from executor.wire import DEFAULT_SCOPE
from tests.support.fault.checks import Fault
from tests.support.fault.procs import Pools, Server, crash_restart
from workers._embedded_redis import RedisServer

FAULT_KINDS = ["kill_random", "kill_holder", "stop_holder", "cut_holder", "redis_restart"]


class Injector:
    """Injects faults into ``pools`` and ``redis_server`` every ``gap`` s until ``done``."""

    def __init__(
        self,
        redis_server: Server,
        pools: Pools,
        done: threading.Event,
        rng: random.Random,
        *,
        lease_ms: int,
        gap: float,
        max_faults: int | None,
        scopes: list[str] | None = None,
    ) -> None:
        self.redis, self.pools, self.done, self.rng = redis_server, pools, done, rng
        self.lease_ms, self.gap, self.max_faults = lease_ms, gap, max_faults
        self.scopes = scopes or [DEFAULT_SCOPE]
        self.faults: list[Fault] = []
        self.stopped_pids: set[int] = set()
        self._next_scope = 0

    def loop(self) -> None:
        locks = [
            RWLock.from_url(self.redis.tcp_url, scope, lease_ms=self.lease_ms)
            for scope in self.scopes
        ]
        plan = list(FAULT_KINDS)
        self.rng.shuffle(plan)
        try:
            while not self.done.wait(self.gap):
                limit = self.max_faults
                if not plan and limit is not None and len(self.faults) >= limit:
                    return
                kind = plan[0] if plan else self.rng.choice(FAULT_KINDS[:4])
                fault = self._inject(kind, locks)
                if fault is not None:
                    self.faults.append(fault)
                    if plan and fault.kind == plan[0]:
                        plan.pop(0)
        finally:
            for lock in locks:
                lock.close()

    def _holder(
        self, locks: list[RWLock], pids: list[int], search_s: float = 4.0
    ) -> tuple[int, str, str, RWLock]:
        """(pid, call id, token, lock) of an exclusive holder among ``pids`` in any of
        ``locks``, or (0, "", "", the first lock)."""
        deadline = time.monotonic() + search_s
        while time.monotonic() < deadline and not self.done.is_set():
            self._next_scope = (self._next_scope + 1) % len(locks)
            for lock in locks[self._next_scope :] + locks[: self._next_scope]:
                with contextlib.suppress(redis.RedisError):
                    for holder in lock.status().holders:
                        if holder.mode == "exclusive" and holder.owner.pid in pids:
                            return holder.owner.pid, holder.owner.call_id, holder.token, lock
            time.sleep(0.003)
        return 0, "", "", locks[0]

    @staticmethod
    def _holds(lock: RWLock, token: str) -> bool:
        with contextlib.suppress(redis.RedisError):
            return any(h.token == token for h in lock.status().holders)
        return False

    def _inject(self, kind: str, locks: list[RWLock]) -> Fault | None:
        lease = self.lease_ms / 1000
        live = [p for p in self.pools.workers() if p not in self.stopped_pids]
        if kind == "kill_random":
            pid = self.rng.choice(live)
            os.kill(pid, signal.SIGKILL)
            return Fault(kind, time.time(), time.time(), pid)
        if kind in ("kill_holder", "stop_holder"):
            pid, call_id, token, lock = self._holder(locks, live)
            if not pid:
                return None
            start = time.time()
            if kind == "kill_holder":
                os.kill(pid, signal.SIGKILL)
                # It may have released between the status read and the signal.
                holding = self._holds(lock, token)
                return Fault(kind if holding else "kill_random", start, start, pid, call_id)
            os.kill(pid, signal.SIGSTOP)
            if not self._holds(lock, token):
                os.kill(pid, signal.SIGCONT)
                return None
            self.stopped_pids.add(pid)
            time.sleep(lease * 1.6 + 0.3)
            os.kill(pid, signal.SIGCONT)
            self.stopped_pids.discard(pid)
            return Fault(kind, start, time.time(), pid, call_id)
        if kind == "cut_holder":
            proxied = [p for p in self.pools.workers(proxied=True) if p not in self.stopped_pids]
            pid, call_id, token, lock = self._holder(locks, proxied)
            proxies = [(process.pid, proxy) for process, proxy in self.pools.supervisors if proxy]
            owning = [proxy for sup, proxy in proxies if pid in self.pools.workers_of(sup)]
            target = owning[0] if owning else self.rng.choice(proxies)[1]
            start = time.time()
            target.cut()
            holding = bool(pid) and self._holds(lock, token)
            time.sleep(lease * 2 + 0.5)
            target.restore()
            return Fault(kind if holding else "cut_idle", start, time.time(), pid, call_id)
        start = time.time()  # redis_restart
        assert isinstance(self.redis, RedisServer), "a Redis restart needs the embedded server"
        crash_restart(self.redis, down_s=lease * 1.5)
        return Fault(kind, start, time.time(), note=f"down {time.time() - start:.2f} s")
