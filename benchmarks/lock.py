"""Measure toolpool's distributed reader/writer lock on a private redis-server.

Usage: ``python -m benchmarks.lock [--runs 2000] [--hand-offs 300] [--seconds 3]
[--fair-attempts 20] [--rp-attempts 3]``. Starts its own redis-server (unix socket, nothing
persisted), then prints:

- uncontended acquire+release latency, shared and exclusive (p50, p99);
- hand-off latency: a holder here releases, a waiter blocked in another process is granted
  (``time.monotonic()`` is one clock for every process on Linux, so the two ends compare);
- throughput under contention at 8 and 16 processes, 25% exclusive, zero-length holds;
- a writer's wait while six reader processes hold continuously with overlapping 20-40 ms holds,
  for the fair lock and, in the same run, for ``policy="read_preferring"`` (readers first);
- the wake-ups spent draining 20 writers queued in 20 processes.

Children are started with multiprocessing's "spawn" method (fresh interpreters, no inherited
threads or connections) and released together by one Redis list they BLPOP on.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import redis

from executor.lock import LockTimeout, Mode, Policy, RWLock
from workers._embedded_redis import RedisServer

READY_KEY = "bench:ready"
GO_KEY = "bench:go"
STOP_KEY = "bench:stop"
RESULT_KEY = "bench:result"
TURN_KEY = "bench:turn"
GRANTED_KEY = "bench:granted"
_PATIENCE_S = 60.0
_WRITER_TIMEOUT_S = 5.0
_READERS = 6
_SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Row:
    """One line of the printed table."""

    measurement: str
    figure: str
    detail: str = ""


# -- children (run in spawned processes; module-level so that spawn can import them) -------


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=_PATIENCE_S + 5)


def _wait_for_go(control: redis.Redis) -> float:
    """Join the barrier; returns the end of the measuring window the parent sent."""
    control.rpush(READY_KEY, "1")
    reply = control.blpop([GO_KEY], timeout=_PATIENCE_S)
    if reply is None:
        raise SystemExit("the benchmark never released the start barrier")
    return float(reply[1])


def _contender(url: str, scope: str, seed: int, exclusive_share: float) -> None:
    lock = RWLock.from_url(url, scope, lease_ms=5000)
    control = _client(url)
    rng = random.Random(seed)
    end = _wait_for_go(control)
    grants = exclusive = 0
    waits: list[float] = []
    while True:
        mode: Mode = "exclusive" if rng.random() < exclusive_share else "shared"
        lease = lock.acquire(mode, timeout=_PATIENCE_S)
        if time.monotonic() > end:
            lease.release()
            break
        lease.release()
        grants += 1
        exclusive += mode == "exclusive"
        waits.append(lease.waited_s)
    control.rpush(
        RESULT_KEY, json.dumps({"grants": grants, "exclusive": exclusive, "waits": waits})
    )
    lock.close()
    control.close()


def _reader(url: str, scope: str, policy: Policy, seed: int) -> None:
    lock = RWLock.from_url(url, scope, lease_ms=2000, recheck_s=0.25, policy=policy)
    control = _client(url)
    rng = random.Random(seed)
    _wait_for_go(control)
    while True:
        lease = lock.acquire("shared", timeout=_PATIENCE_S)
        time.sleep(rng.uniform(0.020, 0.040))
        stop = control.exists(STOP_KEY)
        lease.release()
        if stop:
            break
    lock.close()
    control.close()


def _hand_off_waiter(url: str, scope: str, runs: int) -> None:
    # A re-check far away: every grant measured comes from the release's signal.
    lock = RWLock.from_url(url, scope, recheck_s=10.0)
    control = _client(url)
    for _ in range(runs):
        if control.blpop([TURN_KEY], timeout=_PATIENCE_S) is None:
            raise SystemExit("no turn came")
        lease = lock.acquire("exclusive", timeout=_PATIENCE_S)
        granted_at = time.monotonic()
        lease.release()
        control.rpush(GRANTED_KEY, repr(granted_at))
    lock.close()
    control.close()


def _queued_writer(url: str, scope: str) -> None:
    lock = RWLock.from_url(url, scope, recheck_s=30.0)
    control = _client(url)
    lease = lock.acquire("exclusive", timeout=_PATIENCE_S)
    lease.release()
    control.rpush(RESULT_KEY, json.dumps({"signals": lease.signals, "at": time.monotonic()}))
    lock.close()
    control.close()


# -- the parent's side ----------------------------------------------------------------------


class _Children:
    """Spawned children of one measurement; joined (or killed by PID) on exit."""

    def __init__(self, control: redis.Redis) -> None:
        self.control = control
        self.processes: list[BaseProcess] = []

    def start(self, target: Callable[..., None], *args: Any) -> None:
        process = _SPAWN.Process(target=target, args=args, daemon=True)
        process.start()
        self.processes.append(process)

    def release_together(self, window_s: float = float("inf")) -> None:
        """Let every child go at once; each is told when the measuring window ends."""
        _wait(lambda: self.control.llen(READY_KEY) >= len(self.processes), "children ready")
        self.control.delete(READY_KEY)
        end = time.monotonic() + window_s
        self.control.rpush(GO_KEY, *[repr(end)] * len(self.processes))

    def results(self) -> list[dict[str, Any]]:
        found = []
        for _ in self.processes:
            reply = self.control.blpop([RESULT_KEY], timeout=_PATIENCE_S)
            if reply is None:
                raise SystemExit("a child sent no result")
            found.append(json.loads(reply[1]))
        return found

    def __enter__(self) -> _Children:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.join(_PATIENCE_S if exc[0] is None else 0.1)
            if process.is_alive():
                process.kill()
                process.join()
            if exc[0] is None and process.exitcode != 0:
                raise SystemExit(f"a child exited with {process.exitcode}")
        self.control.delete(STOP_KEY, READY_KEY, GO_KEY, RESULT_KEY)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.0005)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _p50_p99(values: list[float]) -> tuple[str, str]:
    return f"p50 {_ms(statistics.median(values))}", f"p99 {_ms(_percentile(values, 0.99))}"


def _uncontended(url: str, runs: int) -> list[Row]:
    rows = []
    lock = RWLock.from_url(url, "uncontended")
    for mode in ("shared", "exclusive"):
        times = []
        for _ in range(runs + 50):
            started = time.perf_counter()
            lock.acquire(mode, timeout=1).release()
            times.append(time.perf_counter() - started)
        p50, p99 = _p50_p99(times[50:])  # the first 50 warm connections and scripts up
        rows.append(Row(f"uncontended {mode} acquire+release", p50, f"{p99}, {runs} runs"))
    lock.close()
    return rows


def _hand_off(url: str, control: redis.Redis, runs: int) -> list[Row]:
    lock = RWLock.from_url(url, "hand-off")
    latencies = []
    with _Children(control) as children:
        children.start(_hand_off_waiter, url, "hand-off", runs)
        for _ in range(runs):
            lease = lock.acquire("exclusive", timeout=_PATIENCE_S)
            control.rpush(TURN_KEY, "1")
            _wait(lambda: len(lock.status().queue) == 1, "the waiter to queue")
            released_at = time.monotonic()
            lease.release()
            reply = control.blpop([GRANTED_KEY], timeout=_PATIENCE_S)
            if reply is None:
                raise SystemExit("the waiter was never granted")
            latencies.append(float(reply[1]) - released_at)
    lock.close()
    p50, p99 = _p50_p99(latencies)
    return [Row("hand-off: release -> grant in another process", p50, f"{p99}, {runs} runs")]


def _throughput(url: str, control: redis.Redis, processes: int, seconds: float) -> list[Row]:
    scope = f"throughput-{processes}"
    with _Children(control) as children:
        for i in range(processes):
            children.start(_contender, url, scope, i, 0.25)
        children.release_together(seconds)
        results = children.results()
    grants = sum(r["grants"] for r in results)
    exclusive = sum(r["exclusive"] for r in results)
    waits = [w for r in results for w in r["waits"]]
    p50, p99 = _p50_p99(waits)
    return [
        Row(
            f"throughput, {processes} processes, 25% exclusive",
            f"{grants / seconds:,.0f} grants/s",
            f"{exclusive} excl + {grants - exclusive} shared in {seconds:g} s; wait {p50}, {p99}",
        )
    ]


def _writer_under_readers(url: str, control: redis.Redis, policy: Policy, attempts: int) -> Row:
    scope = f"readers-{policy}"
    lock = RWLock.from_url(url, scope, lease_ms=2000, recheck_s=0.25, policy=policy)
    waits: list[float] = []
    starved = 0

    def readers_hold() -> bool:
        status = lock.status()
        return status.mode == "shared" and len(status.holders) >= _READERS - 1

    with _Children(control) as children:
        for i in range(_READERS):
            children.start(_reader, url, scope, policy, i)
        children.release_together()
        for _ in range(attempts):
            _wait(readers_hold, "the readers to hold together")
            try:
                lease = lock.acquire("exclusive", timeout=_WRITER_TIMEOUT_S)
            except LockTimeout:
                starved += 1
                continue
            waits.append(lease.waited_s)
            lease.release()
        control.set(STOP_KEY, "1")
    lock.close()
    figure = f"mean {_ms(statistics.mean(waits))}" if waits else "never granted"
    detail = f"max {_ms(max(waits))}, " if waits else ""
    return Row(
        f"writer wait vs {_READERS} readers, {policy}",
        figure,
        f"{detail}no grant in {_WRITER_TIMEOUT_S:g} s: {starved}/{attempts}",
    )


def _herd(url: str, control: redis.Redis, writers: int) -> Row:
    scope = "herd"
    lock = RWLock.from_url(url, scope)
    holder = lock.acquire("exclusive")
    with _Children(control) as children:
        for _ in range(writers):
            children.start(_queued_writer, url, scope)
        _wait(lambda: len(lock.status().queue) == writers, "the writers to queue")
        before = lock.status().counters.wakeups
        released_at = time.monotonic()
        holder.release()
        results = children.results()
    wakeups = lock.status().counters.wakeups - before
    lock.close()
    signals = sum(r["signals"] for r in results)
    drained = max(r["at"] for r in results) - released_at
    return Row(
        f"drain {writers} queued writer processes",
        f"{wakeups} wake-ups",
        f"{writers} hand-offs, {signals} signals consumed, drained in {_ms(drained)}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="uncontended acquire+release runs")
    parser.add_argument("--hand-offs", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    parser.add_argument("--fair-attempts", type=int, default=20)
    parser.add_argument(
        "--rp-attempts", type=int, default=3, help="read-preferring writer attempts (5 s each)"
    )
    args = parser.parse_args()
    with RedisServer() as server:
        url = server.url
        control = _client(url)
        version = control.info("server")["redis_version"]
        rows = _uncontended(url, args.runs)
        rows += _hand_off(url, control, args.hand_offs)
        rows += _throughput(url, control, 8, args.seconds)
        rows += _throughput(url, control, 16, args.seconds)
        rows.append(_writer_under_readers(url, control, "fair", args.fair_attempts))
        rows.append(_writer_under_readers(url, control, "read_preferring", args.rp_attempts))
        rows.append(_herd(url, control, 20))
        control.close()
    print(f"redis-server {version} on a unix socket; Python {sys.version.split()[0]}\n")
    width = max(len(row.measurement) for row in rows)
    figure_width = max(len(row.figure) for row in rows)
    print(f"{'measurement':<{width}}  {'figure':<{figure_width}}  detail")
    print("-" * (width + figure_width + 50))
    for row in rows:
        print(f"{row.measurement:<{width}}  {row.figure:<{figure_width}}  {row.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
