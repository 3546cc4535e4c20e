"""The fault run: worker pools and orchestrators under load while faults are injected.

    .venv/bin/python scripts/fault_run.py [--calls N] [--workers N] [--orchestrators N]
        [--seconds S] [--lease-ms MS] [--max-faults N] [--seed N]

A private redis-server (append-only, fsync always, a free port, never 6379), three pools run
as ``python -m workers.cli worker`` (one direct, two through loopback TCP proxies that the
run can cut), and orchestrator threads submitting random turns of the nine tools; writes aim
at a few shared files with self-checking payloads. Faults, one of each first, then at random:
SIGKILL of a worker, SIGKILL of an exclusive holder, SIGSTOP of a holder beyond its lease,
a proxied worker cut off from Redis beyond its lease, and one Redis restart (SIGKILL, same
port and AOF dir). Then the checks of ``_fault_checks`` run and a table is printed; the exit
code is 1 if any check found a violation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fault_checks import (
    EDIT_LOG,
    EDIT_LOG_START,
    CallRecord,
    EndState,
    Fault,
    Sighting,
    check_end,
    check_files,
    check_holds,
    check_results,
    edit_ids,
    known_fault,
    payload,
    payload_writer,
    recovery_times,
    report,
)  # fmt: skip
from _tcp_proxy import TcpProxy

from executor.client import Executor, Turn, TurnError
from executor.embedded_redis import find_redis_server
from executor.events import read_events
from executor.jobs import call_queue
from executor.keys import Keys
from executor.lock import RWLock
from executor.settings import Settings

SHARED = ["f0.txt", "f1.txt", "f2.txt", "f3.txt"]
RAN_LOG = "ran.log"  # bash appends its call id: proof that a command ran (bash is not fenced)
MARK = "TOOLPOOL_FAULT_RUN"
FAULT_KINDS = ["kill_random", "kill_holder", "stop_holder", "cut_holder", "redis_restart"]
_TOOLS = {"write_file": 3, "edit_file": 2, "bash": 2, "read_file": 2, "list_directory": 1,
          "glob": 1, "grep": 1, "calculator": 1, "get_weather": 0.5}  # fmt: skip


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


@dataclass
class Outcome:
    violations: list[str]
    text: str
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def unexpected(self) -> list[str]:
        """Violations that belong to no known, reported fault."""
        return [v for v in self.violations if known_fault(v) is None]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    if port == 6379:
        raise RuntimeError("the kernel offered 6379; refusing")
    return port


class _Redis:
    """redis-server with AOF (fsync always) on one port and dir, restartable."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
                "--save", "", "--daemonize", "no",
                "--logfile", str(self.folder / "redis.log")]  # fmt: skip
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        probe = redis.Redis(port=self.port, socket_timeout=1.0)
        deadline = time.monotonic() + 15.0
        while True:
            with contextlib.suppress(redis.RedisError):
                if probe.ping():
                    break
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
        probe.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def _proc_scan(mark: str) -> list[tuple[int, int, str]]:
    """(pid, ppid, comm) of every process whose environment carries ``mark``."""
    needle = f"\0{MARK}={mark}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in b"\0" + (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found.append((int(entry.name), ppid, comm))
    return found


class Harness:
    """Runs one fault run; ``run()`` returns the outcome."""

    def __init__(self, config: Config) -> None:
        self.cfg = config
        self.rng = random.Random(config.seed)
        self.mark = uuid.uuid4().hex
        self.tmp = Path(tempfile.mkdtemp(prefix="toolpool-fault-"))
        self.ws = self.tmp / "ws"
        self.ws.mkdir()
        (self.tmp / "redis").mkdir()
        self.redis = _Redis(self.tmp / "redis")
        self.keys = Keys()
        self.settings = Settings(
            workspace=self.ws, lock_lease_ms=config.lease_ms, call_liveness_s=2.0,
            call_heartbeat_s=0.5, events_maxlen=1_000_000, turn_timeout=120.0,
        )  # fmt: skip
        self.records: dict[str, CallRecord] = {}
        self.faults: list[Fault] = []
        self.sightings: list[Sighting] = []
        self.supervisors: list[tuple[subprocess.Popen[bytes], TcpProxy | None]] = []
        self.stopped_pids: set[int] = set()
        self.counts = {"turns": 0, "submit_errors": 0, "collect_errors": 0}
        self._lock = threading.Lock()
        self._load_done = threading.Event()
        self._remaining = config.calls

    # -- set-up and tear-down -----------------------------------------------------------

    def _start_pools(self) -> None:
        direct = max(1, self.cfg.workers - 2)
        plan: list[tuple[int, TcpProxy | None]] = [(direct, None)]
        for _ in range(min(2, self.cfg.workers - 1)):
            plan.append((1, TcpProxy("127.0.0.1", self.redis.port).start()))
        closed = _free_port()  # nothing listens: get_weather fails fast with a named error
        env = {**os.environ, MARK: self.mark, "TOOLPOOL_LOCK_LEASE_MS": str(self.cfg.lease_ms),
               "TOOLPOOL_CALL_LIVENESS_S": "2", "TOOLPOOL_CALL_HEARTBEAT_S": "0.5",
               "TOOLPOOL_EVENTS_MAXLEN": "1000000", "TOOLPOOL_HTTP_TIMEOUT": "1",
               "TOOLPOOL_WEATHER_URL": f"http://127.0.0.1:{closed}",
               "TOOLPOOL_GEOCODING_URL": f"http://127.0.0.1:{closed}"}  # fmt: skip
        with (self.tmp / "pools.log").open("ab") as log:
            for count, proxy in plan:
                url = proxy.url if proxy else self.redis.url
                command = [sys.executable, "-m", "workers.cli", "worker", "--workers", str(count),
                           "--redis", url, "--workspace", str(self.ws), "--grace", "5"]  # fmt: skip
                process = subprocess.Popen(
                    command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
                self.supervisors.append((process, proxy))
        deadline = time.monotonic() + 60.0
        while len(self._workers()) < self.cfg.workers or self._registered() < self.cfg.workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start; see {self.tmp / 'pools.log'}")
            time.sleep(0.1)

    def _registered(self) -> int:
        client = redis.Redis.from_url(self.redis.url)
        try:
            return int(client.scard("rq:workers:toolpool.default"))
        finally:
            client.close()

    def _workers(self, proxied: bool | None = None) -> list[int]:
        """Live worker pids (children of our supervisors), optionally by kind of pool."""
        wanted = {p.pid for p, proxy in self.supervisors
                  if proxied is None or (proxy is not None) == proxied}  # fmt: skip
        return [pid for pid, ppid, comm in _proc_scan(self.mark)
                if ppid in wanted and comm.startswith("python")]  # fmt: skip

    def _stop_pools(self) -> list[int]:
        for process, _ in self.supervisors:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process, proxy in self.supervisors:
            try:
                process.wait(timeout=20.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if proxy is not None:
                proxy.stop()
        deadline = time.monotonic() + 10.0
        while (left := _proc_scan(self.mark)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, _, _ in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return [pid for pid, _, _ in left]

    # -- load ------------------------------------------------------------------------------

    def _take(self, wanted: int) -> int:
        with self._lock:
            n = min(wanted, self._remaining)
            self._remaining -= n
            return n

    def _call(self, rng: random.Random, prefix: str) -> dict[str, Any]:
        tool = rng.choices(list(_TOOLS), weights=list(_TOOLS.values()))[0]
        call_id = f"{prefix}-{uuid.uuid4().hex[:10]}"
        path = rng.choice(SHARED)
        args: dict[str, Any] = {
            "write_file": lambda: {"path": path, "content": payload(call_id, rng.randint(1, 3000))},
            "edit_file": lambda: {"path": EDIT_LOG, "old_string": "END\n",
                                  "new_string": f"e={call_id}\nEND\n"},
            "bash": lambda: {"command": f"sleep {rng.uniform(0.0, 0.3):.3f}; "
                                        f"echo {call_id} >> {RAN_LOG}"},
            "read_file": lambda: {"path": path},
            "list_directory": lambda: {"path": "."},
            "glob": lambda: {"pattern": "*.txt"},
            "grep": lambda: {"pattern": "sum=", "path": "."},
            "calculator": lambda: {"expression": f"{rng.randint(1, 999)} * {rng.randint(1, 999)}"},
            "get_weather": lambda: {"city": "Berlin"},
        }[tool]()  # fmt: skip
        self.records[call_id] = CallRecord(call_id, tool, str(args.get("path", "")))
        return {"id": call_id, "name": tool, "arguments": args}

    def _orchestrate(self, index: int) -> None:
        rng = random.Random(self.cfg.seed * 1000 + index)
        executor = Executor(settings=self.settings.with_changes(redis_url=self.redis.url))
        try:
            while (n := self._take(rng.randint(1, 4))) and not self._load_done.is_set():
                calls = [self._call(rng, f"o{index}") for _ in range(n)]
                now = time.time()
                for item in calls:
                    self.records[item["id"]].submitted_at = now
                turn = self._submit(executor, calls)
                if turn is not None:
                    self._collect(executor, turn, calls)
        finally:
            executor.close()

    def _submit(self, executor: Executor, calls: list[dict[str, Any]]) -> Turn | str | None:
        try:
            turn = executor.submit(calls)
            self._count("turns")
            return turn
        except redis.RedisError:
            self._count("submit_errors")
        # A refused submit may have stored part of the turn: find it through the call claims.
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            try:
                claims = [executor.client.get(self.keys.call_claim(c["id"])) for c in calls]
                break
            except redis.RedisError:
                time.sleep(0.2)
        else:
            claims = []
        turn_ids = {c.decode() for c in claims if isinstance(c, bytes)}
        if not turn_ids:
            for item in calls:  # never submitted: the orchestrator got a clear error
                self.records.pop(item["id"], None)
            return None
        return turn_ids.pop()

    def _collect(self, executor: Executor, turn: Turn | str, calls: list[dict[str, Any]]) -> None:
        deadline = time.monotonic() + 180.0
        while time.monotonic() < deadline:
            try:
                results = executor.collect(turn, timeout=self.cfg.turn_timeout)
                break
            except TurnError:
                # The submit failed after claiming the ids but before storing the plan; the
                # plan is stored before any job, so none of these calls was enqueued: the
                # orchestrator got a clear error and nothing ran.
                self._count("submit_errors")
                for item in calls:
                    self.records.pop(item["id"], None)
                return
            except redis.RedisError:
                self._count("collect_errors")
                time.sleep(0.2)
        else:
            return
        for result in results:
            record = self.records.get(result.call_id)
            if record is not None:
                record.status = result.status.value
                record.error_type = result.error_type.value if result.error_type else None
                record.message = result.content[:200] if result.error_type else ""

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    # -- the file observer ------------------------------------------------------------------

    def _observe(self) -> None:
        """Record when each write first shows; a rename lands between two reads' opens."""
        last: dict[str, str | None] = {}
        opened: dict[str, float] = {}  # when the previous read of each file began
        edits_seen: set[str] = set()
        while not self._load_done.is_set():
            for name in [*SHARED, EDIT_LOG]:
                began = time.time()
                try:
                    text = (self.ws / name).read_text()
                except OSError:
                    continue
                seen, before = time.time(), opened.get(name, began)
                opened[name] = began
                if name == EDIT_LOG:
                    ids = edit_ids(text)
                    if ids is None:
                        self.sightings.append(Sighting(name, "TORN", before, seen))
                        continue
                    for call_id in set(ids) - edits_seen:
                        self.sightings.append(Sighting(name, call_id, before, seen))
                    edits_seen.update(ids)
                    continue
                writer = payload_writer(text) or "TORN"
                if last.get(name) != writer:
                    last[name] = writer
                    self.sightings.append(Sighting(name, writer, before, seen))
            time.sleep(0.002)

    # -- faults ------------------------------------------------------------------------------

    def _holder(self, lock: RWLock, pids: list[int], search_s: float = 4.0) -> tuple[int, str, str]:
        """(pid, call id, token) of an exclusive holder among ``pids``, or (0, "", "")."""
        deadline = time.monotonic() + search_s
        while time.monotonic() < deadline and not self._load_done.is_set():
            with contextlib.suppress(redis.RedisError):
                for holder in lock.status().holders:
                    if holder.mode == "exclusive" and holder.owner.pid in pids:
                        return holder.owner.pid, holder.owner.call_id, holder.token
            time.sleep(0.003)
        return 0, "", ""

    @staticmethod
    def _holds(lock: RWLock, token: str) -> bool:
        with contextlib.suppress(redis.RedisError):
            return any(h.token == token for h in lock.status().holders)
        return False

    def _inject(self, kind: str, lock: RWLock) -> Fault | None:
        lease = self.cfg.lease_ms / 1000
        live = [p for p in self._workers() if p not in self.stopped_pids]
        if kind == "kill_random":
            pid = self.rng.choice(live)
            os.kill(pid, signal.SIGKILL)
            return Fault(kind, time.time(), time.time(), pid)
        if kind in ("kill_holder", "stop_holder"):
            pid, call_id, token = self._holder(lock, live)
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
            proxied = [p for p in self._workers(proxied=True) if p not in self.stopped_pids]
            pid, call_id, token = self._holder(lock, proxied)
            proxies = [(process.pid, proxy) for process, proxy in self.supervisors if proxy]
            owning = [proxy for sup, proxy in proxies if pid in self._workers_of(sup)]
            target = owning[0] if owning else self.rng.choice(proxies)[1]
            start = time.time()
            target.cut()
            holding = bool(pid) and self._holds(lock, token)
            time.sleep(lease * 2 + 0.5)
            target.restore()
            return Fault(kind if holding else "cut_idle", start, time.time(), pid, call_id)
        start = time.time()  # redis_restart
        self.redis.kill()
        time.sleep(lease * 1.5)
        self.redis.start()
        return Fault(kind, start, time.time(), note=f"down {time.time() - start:.2f} s")

    def _workers_of(self, supervisor: int) -> list[int]:
        return [pid for pid, ppid, _ in _proc_scan(self.mark) if ppid == supervisor]

    def _inject_loop(self) -> None:
        lock = RWLock.from_url(self.redis.url, lease_ms=self.cfg.lease_ms)
        plan = list(FAULT_KINDS)
        self.rng.shuffle(plan)
        try:
            while not self._load_done.wait(self.cfg.fault_gap):
                limit = self.cfg.max_faults
                if not plan and limit is not None and len(self.faults) >= limit:
                    return
                kind = plan[0] if plan else self.rng.choice(FAULT_KINDS[:4])
                fault = self._inject(kind, lock)
                if fault is not None:
                    self.faults.append(fault)
                    if plan and fault.kind == plan[0]:
                        plan.pop(0)
        finally:
            lock.close()

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> Outcome:
        started = time.monotonic()
        self.redis.start()
        try:
            for name in SHARED:
                (self.ws / name).write_text(payload("init", 1))
            (self.ws / EDIT_LOG).write_text(EDIT_LOG_START)
            self._start_pools()
            threads = [threading.Thread(target=self._orchestrate, args=(i,), daemon=True)
                       for i in range(self.cfg.orchestrators)]  # fmt: skip
            helpers = [threading.Thread(target=self._observe, daemon=True),
                       threading.Thread(target=self._inject_loop, daemon=True)]  # fmt: skip
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
            self._stop_pools()
            self.redis.kill()

    def _finish(self, load_s: float, started: float) -> Outcome:
        client = redis.Redis.from_url(self.redis.url)
        state = self._settle(client)
        events = [e for _, e in read_events(client, self.keys)]
        records = {k: r for k, r in self.records.items() if r.submitted_at}
        ids = list(records)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for call_id, raw in zip(chunk, client.mget([self.keys.result(c) for c in chunk]),
                                    strict=True):  # fmt: skip
                if raw is not None:
                    from executor.models import ToolResult

                    stored = ToolResult.model_validate_json(raw)
                    records[call_id].stored = (stored.status.value, stored.error_type.value
                                               if stored.error_type else None)  # fmt: skip
        client.close()
        state.processes_left = self._stop_pools()
        finals = {n: (self.ws / n).read_text() for n in [*SHARED, EDIT_LOG]}
        ran = self.ws / RAN_LOG
        bash_ran = ran.read_text().split() if ran.exists() else []
        checks = [
            check_holds(events, records, self.faults, self.sightings),
            check_results(records, events, finals[EDIT_LOG], bash_ran),
            check_files(finals, self.sightings, records),
            check_end(state),
        ]
        figures = {
            "calls": len(records), "turns": self.counts["turns"],
            "workers / orchestrators": f"{self.cfg.workers} / {self.cfg.orchestrators}",
            "lease": f"{self.cfg.lease_ms} ms", "load time": f"{load_s:.1f} s",
            "calls/s": f"{len(records) / max(load_s, 1e-9):.1f}", "events": len(events),
            "submit errors (Redis down)": self.counts["submit_errors"],
            "collect retries (Redis down)": self.counts["collect_errors"],
            "total time": f"{time.monotonic() - started:.1f} s",
        }  # fmt: skip
        text = report(checks, self.faults, recovery_times(events, self.faults), figures)
        self._dump(events, records)
        text += f"\nrecords, faults and events: {self.tmp / 'run.json'}"
        return Outcome([v for c in checks for v in c.violations], text, figures)

    def _dump(self, events: list[Any], records: dict[str, CallRecord]) -> None:
        data = {
            "faults": [vars(f) for f in self.faults],
            "records": [vars(r) for r in records.values()],
            "events": [e.model_dump() for e in events],
            "sightings": [vars(s) for s in self.sightings],
        }
        (self.tmp / "run.json").write_text(json.dumps(data, default=str))

    def _settle(self, client: redis.Redis) -> EndState:
        lock = RWLock.from_url(self.redis.url, lease_ms=self.cfg.lease_ms)
        queue = call_queue(client, self.keys, "default")
        deadline = time.monotonic() + 20.0
        while True:
            status = lock.status()
            state = EndState(
                lock_holders=len(status.holders), lock_waiters=len(status.queue),
                queued_jobs=queue.count, started_jobs=queue.started_job_registry.count
                + queue.deferred_job_registry.count,
                bash_left=[p for p, _, comm in _proc_scan(self.mark) if comm in ("bash", "sleep")],
            )  # fmt: skip
            state.stuck_jobs = [*queue.started_job_registry.get_job_ids(),
                                *queue.deferred_job_registry.get_job_ids()]  # fmt: skip
            busy = state.lock_holders or state.lock_waiters or state.queued_jobs
            if not (busy or state.started_jobs or state.bash_left) or time.monotonic() > deadline:
                lock.close()
                return state
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    config = Config(args.calls, args.workers, args.orchestrators, args.seconds, args.lease_ms,
                    args.max_faults, args.fault_gap, args.seed, args.turn_timeout)  # fmt: skip
    outcome = Harness(config).run()
    print(outcome.text, flush=True)
    return 1 if outcome.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
