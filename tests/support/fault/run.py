"""The fault run: worker pools and orchestrators under load while faults are injected.

    .venv/bin/python -m tests.support.fault.run [--calls N] [--workers N] [--orchestrators N]
        [--seconds S] [--lease-ms MS] [--max-faults N] [--fault-gap S] [--seed N]
        [--turn-timeout S] [--sessions N]
        [--failover [--replicas N] [--ha-replicas N] [--follow sentinel|proxy]
                    [--no-worker-faults]]

A private redis-server (append-only, fsync always, a free port, never 6379), three pools run
as ``python -m workers.cli worker`` (one direct, two through loopback TCP proxies that the
run can cut), and orchestrator threads submitting random turns of the nine tools; writes aim
at a few shared files with self-checking payloads. Faults, one of each first, then at random:
SIGKILL of a worker, SIGKILL of an exclusive holder, SIGSTOP of a holder beyond its lease,
a proxied worker cut off from Redis beyond its lease, and one Redis restart (SIGKILL, same
port and AOF dir). Then the checks of ``checks`` run and a table is printed; the exit code
is 1 if any check found a violation that is not a known, reported fault.

With ``--sessions N`` (N > 0), the pools also serve sessions, all from one sessions root under
one host name, and the run creates sessions s0..s(N-1) once the pools are up, each seeded
with the workspace's starting files; most orchestrators send their turns to the sessions
(``load``), and the checks run per lock scope and per folder.

With ``--failover``, the Redis is a primary and ``--ha-replicas`` replicas (default 1) under
three Sentinels (``failover``):
every pool and orchestrator reaches it by the Sentinel URL (``--follow proxy``: through a
proxy that follows the primary), with ``TOOLPOOL_REDIS_REPLICAS=--replicas``; the faults are
the four failovers and, unless ``--no-worker-faults``, the worker faults that need no proxy;
one more orchestrator writes an increasing counter, and the checks of ``failover`` run too.

The parts, beside this module (the configuration, the run and ``main``): ``procs`` (the Redis
server, the worker pools, the scan for leftovers), ``load`` (the orchestrators and their
calls), ``inject`` (the faults), ``observe`` (the file observer), ``checks`` (the checks and the
table) and ``proxy`` (the proxy a fault cuts).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from executor import Sessions, Settings
from executor._rq.jobs import call_queue, named_queue
from executor.client import Executor
from executor.lock import RWLock
from executor.wire import (
    DEFAULT_SCOPE,
    Keys,
    SessionStore,
    ToolResult,
    read_events,
    session_scope,
)
from tests.support.fault.checks import (
    EDIT_LOG,
    EDIT_LOG_START,
    RAN_LOG,
    CallRecord,
    EndState,
    Sighting,
    check_end,
    check_files,
    check_folders,
    check_holds,
    check_results,
    known_fault,
    payload,
    recovery_times,
    report,
)
from tests.support.fault.failover import (
    COUNTER,
    FailoverInjector,
    FailoverRedis,
    check_after_answer,
    check_counter,
    check_fences,
    check_recollect,
    heal_times,
)
from tests.support.fault.inject import Injector
from tests.support.fault.load import SHARED, Load, counter_id
from tests.support.fault.observe import Observer, watch
from tests.support.fault.procs import Pools, aof_redis, proc_scan
from workers._embedded_redis import RedisServer

HOST = "fault-host"  # the one host name of the pools' sessions: they share the disk


@dataclass
class Config:
    calls: int = 300
    workers: int = 6
    orchestrators: int = 2
    seconds: float = 600.0
    lease_ms: int = 1500
    max_faults: int | None = None
    fault_gap: float = 1.0
    seed: int = 0
    turn_timeout: float = 120.0
    sessions: int = 0  # sessions s0..s(N-1); 0: none, every call in the workspace
    failover: bool = False  # a primary and a replica under Sentinels, and failovers
    replicas: int = 0  # TOOLPOOL_REDIS_REPLICAS of every process
    ha_replicas: int = 1  # with failover: replica nodes under the Sentinels
    follow: str = "sentinel"  # how the processes find the primary: "sentinel" or "proxy"
    worker_faults: bool = True  # with failover: worker faults between the failovers


@dataclass
class Outcome:
    violations: list[str]
    text: str
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def unexpected(self) -> list[str]:
        """Violations that belong to no known, reported fault."""
        return [v for v in self.violations if known_fault(v) is None]


class Harness:
    """Runs one fault run; ``run()`` returns the outcome."""

    def __init__(self, config: Config) -> None:
        self.cfg = config
        self.rng = random.Random(config.seed)
        self.mark = uuid.uuid4().hex
        self.tmp = Path(tempfile.mkdtemp(prefix="toolpool-fault-"))
        self.ws = self.tmp / "ws"
        self.ws.mkdir()
        self.session_names = [f"s{i}" for i in range(config.sessions)]
        self.sessions_root = self.tmp / "sessions"
        if config.sessions:
            self.sessions_root.mkdir()
        if config.failover and config.sessions:
            raise ValueError("the failover mode runs without sessions")
        self.redis: RedisServer | FailoverRedis = (
            FailoverRedis(self.tmp, follow=config.follow, replicas=config.ha_replicas)
            if config.failover
            else aof_redis()
        )
        self.shared = [*SHARED, COUNTER] if config.failover else SHARED
        self.keys = Keys()
        self.settings = Settings(
            workspace=self.ws,
            lock_lease_ms=config.lease_ms,
            call_liveness_s=2.0,
            call_heartbeat_s=0.5,
            events_maxlen=1_000_000,
            turn_timeout=120.0,
            redis_replicas=config.replicas,
        )
        self._load_done = threading.Event()
        self.pools = Pools(
            self.redis,
            self.ws,
            self.tmp / "pools.log",
            self.mark,
            sessions_root=self.sessions_root if config.sessions else None,
            host=HOST,
            proxies=not config.failover,
            replicas=config.replicas,
        )
        self.load = Load(
            self.settings,
            self.keys,
            self._load_done,
            calls=config.calls,
            seed=config.seed,
            turn_timeout=config.turn_timeout,
            sessions=self.session_names,
        )
        self.scopes = [DEFAULT_SCOPE, *(session_scope(n) for n in self.session_names)]
        self.injector = (
            FailoverInjector(
                self.redis,
                self.pools,
                self._load_done,
                self.rng,
                lease_ms=config.lease_ms,
                gap=config.fault_gap,
                worker_faults=config.worker_faults,
                scopes=self.scopes,
            )
            if isinstance(self.redis, FailoverRedis)
            else Injector(
                self.redis,
                self.pools,
                self._load_done,
                self.rng,
                lease_ms=config.lease_ms,
                gap=config.fault_gap,
                max_faults=config.max_faults,
                scopes=self.scopes,
            )
        )
        self.sightings: list[Sighting] = []
        self.observers = [Observer(self.ws, self.shared, self.sightings)] + [
            Observer(self.sessions_root / n, SHARED, self.sightings, folder=n)
            for n in self.session_names
        ]
        self.records = self.load.records
        self.faults = self.injector.faults

    def run(self) -> Outcome:
        started = time.monotonic()
        self.redis.start()
        try:
            _seed(self.ws)
            url = self.url
            self.pools.url = url
            self.pools.start(self.cfg.workers, self.cfg.lease_ms)
            self._create_sessions()
            threads = [
                threading.Thread(target=self.load.orchestrate, args=(i, url), daemon=True)
                for i in range(self.cfg.orchestrators)
            ]
            if self.cfg.failover:
                counter = threading.Thread(
                    target=self.load.count_up, args=(COUNTER, url), daemon=True
                )
                threads.append(counter)
            helpers = [
                threading.Thread(target=watch, args=(self.observers, self._load_done), daemon=True),
                threading.Thread(target=self.injector.loop, daemon=True),
            ]
            load_start = time.monotonic()
            for thread in [*threads, *helpers]:
                thread.start()
            for thread in threads:
                thread.join(timeout=max(0.0, self.cfg.seconds - (time.monotonic() - load_start)))
            self._load_done.set()
            for thread in [*threads, *helpers]:
                thread.join(timeout=60.0)
            load_s = time.monotonic() - load_start
            return self._finish(load_s, started)
        finally:
            self.pools.stop()
            self.redis.stop()

    @property
    def url(self) -> str:
        """The URL of the run's processes (in the failover mode, the one following failovers)."""
        return self.redis.url if isinstance(self.redis, FailoverRedis) else self.redis.tcp_url

    def _create_sessions(self) -> None:
        """Create the sessions on the pools' host, each empty, then seed it like the workspace."""
        if not self.session_names:
            return
        settings = self.settings.with_changes(redis_url=self.redis.tcp_url)
        with Sessions(settings=settings) as sessions:
            deadline = time.monotonic() + 60.0
            # Every worker has registered on the pool queue; its catalog entry (with its host)
            # may come a moment later.
            while sessions.hosts().get(HOST, 0) < self.cfg.workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no worker serves host {HOST}: {sessions.hosts()}")
                time.sleep(0.1)
            for name in self.session_names:
                sessions.create(name, host=HOST, idle_ttl=0, timeout=60.0)
                _seed(self.sessions_root / name)

    def _finish(self, load_s: float, started: float) -> Outcome:
        if isinstance(self.redis, FailoverRedis):
            self.redis.ha.wait_ready()  # the last failover over: tcp_url is the last primary
        client = redis.Redis.from_url(self.redis.tcp_url)
        state = self._settle(client)
        events = [e for _, e in read_events(client, self.keys)]
        records = {k: r for k, r in self.records.items() if r.submitted_at}
        ids = list(records)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for call_id, raw in zip(
                chunk, client.mget([self.keys.result(c) for c in chunk]), strict=True
            ):
                if raw is not None:
                    stored = ToolResult.model_validate_json(raw)
                    records[call_id].stored = (
                        stored.status.value,
                        stored.error_type.value if stored.error_type else None,
                    )
        client.close()
        state.processes_left = self.pools.stop()
        folders = {"": self.ws, **{n: self.sessions_root / n for n in self.session_names}}
        finals = {
            name: {n: (folder / n).read_text() for n in [*self.shared, EDIT_LOG]}
            for name, folder in folders.items()
        }
        ran = {name: _ran(folder) for name, folder in folders.items()}
        bash_ran = [call_id for ids in ran.values() for call_id in ids]
        edit_logs = [texts[EDIT_LOG] for texts in finals.values()]
        sessions = bool(self.session_names)
        files = (
            check_folders(finals, self.sightings, records, ran)
            if sessions
            else check_files(finals[""], self.sightings, records)
        )
        checks = [
            *check_holds(events, records, self.faults, self.sightings, sessions=sessions),
            check_results(records, events, edit_logs, bash_ran),
            files,
            check_end(state),
        ]
        times = recovery_times(events, self.faults, self._scope_of(records))
        if self.cfg.failover:
            healed, heal = heal_times(self.faults, events, self.cfg.lease_ms)
            times.update(heal)
            checks += [
                check_counter(self.sightings, finals[""].get(COUNTER)),
                check_fences(events, records),
                check_after_answer(records, events),
                check_recollect(self.load.answers, self._recollect()),
                healed,
            ]
        figures = {
            "calls": len(records),
            "turns": self.load.counts["turns"],
            "workers / orchestrators": f"{self.cfg.workers} / {self.cfg.orchestrators}",
            "lease": f"{self.cfg.lease_ms} ms",
            "load time": f"{load_s:.1f} s",
            "calls/s": f"{len(records) / max(load_s, 1e-9):.1f}",
            "events": len(events),
            "submit errors (Redis down)": self.load.counts["submit_errors"],
            "collect retries (Redis down)": self.load.counts["collect_errors"],
            "total time": f"{time.monotonic() - started:.1f} s",
        }
        if sessions:
            figures["sessions"] = self._session_figures(records)
        if self.cfg.failover:
            redis_text = (
                f"primary + {self.cfg.ha_replicas} replica(s) + 3 Sentinels, "
                f"followed by {self.cfg.follow}, "
                f"TOOLPOOL_REDIS_REPLICAS={self.cfg.replicas}"
            )
            if 0 < self.cfg.replicas < self.cfg.ha_replicas:
                # The replica that acknowledged a write may be one Sentinel does not promote;
                # it then resyncs from the new primary and drops the write.
                redis_text += " (fewer than the replica nodes: not every ack survives)"
            figures["redis"] = redis_text
        text = report(checks, self.faults, times, figures)
        self._dump(events, records)
        text += f"\nrecords, faults and events: {self.tmp / 'run.json'}"
        return Outcome([v for c in checks for v in c.violations], text, figures)

    def _scope_of(self, records: dict[str, CallRecord]) -> dict[str, str] | None:
        return {c: r.session for c, r in records.items()} if self.session_names else None

    def _recollect(self) -> dict[str, dict[str, tuple[str, str | None, str]] | str]:
        """Every collected turn collected again, through the processes' URL."""
        again: dict[str, dict[str, tuple[str, str | None, str]] | str] = {}
        executor = Executor(settings=self.settings.with_changes(redis_url=self.url))
        try:
            for turn_id in list(self.load.answers):
                try:
                    results = executor.collect(turn_id, timeout=10.0)
                except Exception as error:  # every failure is a finding here
                    again[turn_id] = repr(error)[:200]
                    continue
                again[turn_id] = {
                    r.call_id: (
                        r.status.value,
                        r.error_type.value if r.error_type else None,
                        r.content,
                    )
                    for r in results
                }
        finally:
            executor.close()
        return again

    def _session_figures(self, records: dict[str, CallRecord]) -> str:
        """Calls per session and without one; holder faults per scope."""
        calls = Counter(r.session for r in records.values())
        shares = ", ".join(f"{n} {calls[n]}" for n in self.session_names)
        holders = [f for f in self.faults if f.kind in ("kill_holder", "stop_holder", "cut_holder")]
        in_sessions = sum(1 for f in holders if (r := records.get(f.call_id)) and r.session)
        return (
            f"{len(self.session_names)} on host {HOST} (calls: {shares}, none {calls['']}; "
            f"holder faults in a session {in_sessions} of {len(holders)})"
        )

    def _dump(self, events: list[Any], records: dict[str, CallRecord]) -> None:
        data = {
            "faults": [vars(f) for f in self.faults],
            "records": [vars(r) for r in records.values()],
            "events": [e.model_dump() for e in events],
            "sightings": [vars(s) for s in self.sightings],
        }
        (self.tmp / "run.json").write_text(json.dumps(data, default=str))

    def _settle(self, client: redis.Redis) -> EndState:
        locks = [
            RWLock.from_url(self.redis.tcp_url, scope, lease_ms=self.cfg.lease_ms)
            for scope in self.scopes
        ]
        queues = [call_queue(client, self.keys, "default")]
        if self.session_names:
            queues.append(named_queue(client, self.keys.host_queue_name("default", HOST)))
        store = SessionStore(client, self.keys)
        deadline = time.monotonic() + 20.0
        while True:
            statuses = [lock.status() for lock in locks]
            state = EndState(
                lock_holders=sum(len(s.holders) for s in statuses),
                lock_waiters=sum(len(s.queue) for s in statuses),
                queued_jobs=sum(q.count for q in queues),
                started_jobs=sum(
                    q.started_job_registry.count + q.deferred_job_registry.count for q in queues
                ),
                bash_left=[p for p, _, comm in proc_scan(self.mark) if comm in ("bash", "sleep")],
                session_calls=sum(len(store.pending_calls(n)) for n in self.session_names),
            )
            state.stuck_jobs = [
                job
                for q in queues
                for job in [
                    *q.started_job_registry.get_job_ids(),
                    *q.deferred_job_registry.get_job_ids(),
                ]
            ]
            busy = state.lock_holders or state.lock_waiters or state.queued_jobs
            if (
                not (busy or state.started_jobs or state.bash_left or state.session_calls)
                or time.monotonic() > deadline
            ):
                for lock in locks:
                    lock.close()
                return state
            time.sleep(0.1)


def _seed(folder: Path) -> None:
    """The starting files: each shared file an ``init`` payload, the edit log empty."""
    for name in SHARED:
        (folder / name).write_text(payload("init", 1))
    (folder / COUNTER).write_text(payload(f"{counter_id(0)}-init", 1))
    (folder / EDIT_LOG).write_text(EDIT_LOG_START)


def _ran(folder: Path) -> list[str]:
    """The ids bash appended to ``folder``'s ``RAN_LOG``."""
    ran = folder / RAN_LOG
    return ran.read_text().split() if ran.exists() else []


def main(argv: list[str] | None = None) -> int:
    """The command line: run once with the options in ``argv``; 1 on a new violation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--orchestrators", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1200.0, help="load time limit")
    parser.add_argument("--lease-ms", type=int, default=1500)
    parser.add_argument("--max-faults", type=int, default=None)
    parser.add_argument("--fault-gap", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--turn-timeout", type=float, default=120.0)
    parser.add_argument(
        "--sessions", type=int, default=0, help="sessions to spread the turns over (0: none)"
    )
    parser.add_argument(
        "--failover", action="store_true", help="a primary and a replica under Sentinels"
    )
    parser.add_argument("--replicas", type=int, default=0, help="TOOLPOOL_REDIS_REPLICAS")
    parser.add_argument(
        "--ha-replicas", type=int, default=1, help="with --failover: replica nodes (1 or 2)"
    )
    parser.add_argument("--follow", choices=["sentinel", "proxy"], default="sentinel")
    parser.add_argument("--no-worker-faults", action="store_true", help="failovers only")
    args = parser.parse_args(argv)
    config = Config(
        calls=args.calls,
        workers=args.workers,
        orchestrators=args.orchestrators,
        seconds=args.seconds,
        lease_ms=args.lease_ms,
        max_faults=args.max_faults,
        fault_gap=args.fault_gap,
        seed=args.seed,
        turn_timeout=args.turn_timeout,
        sessions=args.sessions,
        failover=args.failover,
        replicas=args.replicas,
        ha_replicas=args.ha_replicas,
        follow=args.follow,
        worker_faults=not args.no_worker_faults,
    )
    outcome = Harness(config).run()
    print(outcome.text, flush=True)
    return 1 if outcome.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
