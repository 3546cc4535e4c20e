"""The fault run's load: orchestrator threads submitting random turns of the nine tools.

Writes aim at a few shared files with self-checking payloads (``checks.payload``),
edits append their call id to one edit log, and bash appends its call id to ``RAN_LOG``.
Each submitted call gets a ``CallRecord``; its result, when collected, is written into it.

With sessions, every fourth orchestrator (index 3, 7, ...) sends its turns without a session,
to the workers' own workspace; each other one sends each turn to a session it picks at random
(its seeded rng), so several orchestrators' turns meet in one session's lock and folder.
A call's record names the session it was sent to.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import redis

from executor import RedisUnavailable, Settings
from executor.client import Executor, Turn, TurnError
from executor.wire import Keys
from tests.support.fault.checks import EDIT_LOG, RAN_LOG, CallRecord, payload

SHARED = ["f0.txt", "f1.txt", "f2.txt", "f3.txt"]
_TOOLS = {
    "write_file": 3,
    "edit_file": 2,
    "bash": 2,
    "read_file": 2,
    "list_directory": 1,
    "glob": 1,
    "grep": 1,
    "calculator": 1,
    "get_weather": 0.5,
}


def counter_id(value: int) -> str:
    """The start of the call id of the counter's ``value``th write (``Load.count_up``)."""
    return f"n{value:07d}"


class Load:
    """Shares ``calls`` calls out among orchestrator threads (``orchestrate(index, url)``)."""

    def __init__(
        self,
        settings: Settings,
        keys: Keys,
        done: threading.Event,
        *,
        calls: int,
        seed: int,
        turn_timeout: float,
        sessions: list[str] | None = None,
    ) -> None:
        self.settings, self.keys, self.done = settings, keys, done
        self.seed, self.turn_timeout = seed, turn_timeout
        self.sessions = sessions or []
        self.records: dict[str, CallRecord] = {}
        # Each collected turn's answers, by turn id (the failover mode collects them again).
        self.answers: dict[str, dict[str, tuple[str, str | None, str]]] = {}
        self.counts = {"turns": 0, "submit_errors": 0, "collect_errors": 0}
        self._lock = threading.Lock()
        self._remaining = calls

    def _take(self, wanted: int) -> int:
        with self._lock:
            n = min(wanted, self._remaining)
            self._remaining -= n
            return n

    def _call(self, rng: random.Random, prefix: str, session: str | None) -> dict[str, Any]:
        tool = rng.choices(list(_TOOLS), weights=list(_TOOLS.values()))[0]
        call_id = f"{prefix}-{uuid.uuid4().hex[:10]}"
        path = rng.choice(SHARED)
        args: dict[str, Any] = {
            "write_file": lambda: {"path": path, "content": payload(call_id, rng.randint(1, 3000))},
            "edit_file": lambda: {
                "path": EDIT_LOG,
                "old_string": "END\n",
                "new_string": f"e={call_id}\nEND\n",
            },
            "bash": lambda: {
                "command": f"sleep {rng.uniform(0.0, 0.3):.3f}; echo {call_id} >> {RAN_LOG}"
            },
            "read_file": lambda: {"path": path},
            "list_directory": lambda: {"path": "."},
            "glob": lambda: {"pattern": "*.txt"},
            "grep": lambda: {"pattern": "sum=", "path": "."},
            "calculator": lambda: {"expression": f"{rng.randint(1, 999)} * {rng.randint(1, 999)}"},
            "get_weather": lambda: {"city": "Berlin"},
        }[tool]()
        self.records[call_id] = CallRecord(
            call_id, tool, str(args.get("path", "")), session=session or ""
        )
        return {"id": call_id, "name": tool, "arguments": args}

    def orchestrate(self, index: int, redis_url: str) -> None:
        """One orchestrator: turns of 1-4 calls until the calls run out or ``done`` is set."""
        rng = random.Random(self.seed * 1000 + index)
        executor = Executor(settings=self.settings.with_changes(redis_url=redis_url))
        try:
            while (n := self._take(rng.randint(1, 4))) and not self.done.is_set():
                session = self._session(rng, index)
                calls = [self._call(rng, f"o{index}", session) for _ in range(n)]
                now = time.time()
                for item in calls:
                    self.records[item["id"]].submitted_at = now
                turn = self._submit(executor, calls, session)
                if turn is not None:
                    self._collect(executor, turn, calls)
        finally:
            executor.close()

    def count_up(self, path: str, redis_url: str) -> None:
        """One orchestrator writing ``path`` over and over, each time the next value of a
        counter (``counter_id``), each write sent once the one before was answered."""
        executor = Executor(settings=self.settings.with_changes(redis_url=redis_url))
        value = 0
        try:
            while self._take(1) and not self.done.is_set():
                value += 1
                call_id = f"{counter_id(value)}-{uuid.uuid4().hex[:8]}"
                self.records[call_id] = CallRecord(call_id, "write_file", path)
                self.records[call_id].submitted_at = time.time()
                calls = [
                    {
                        "id": call_id,
                        "name": "write_file",
                        "arguments": {"path": path, "content": payload(call_id, 1)},
                    }
                ]
                turn = self._submit(executor, calls, None)
                if turn is not None:
                    self._collect(executor, turn, calls)
        finally:
            executor.close()

    def _session(self, rng: random.Random, index: int) -> str | None:
        """The session of the next turn of orchestrator ``index``; None for no session."""
        if not self.sessions or index % 4 == 3:
            return None
        return rng.choice(self.sessions)

    def _submit(
        self, executor: Executor, calls: list[dict[str, Any]], session: str | None
    ) -> Turn | str | None:
        try:
            turn = executor.submit(calls, session=session)
            self._count("turns")
            return turn
        except (redis.RedisError, RedisUnavailable) as exc:
            self._count("submit_errors")
            if isinstance(exc, RedisUnavailable) and exc.turn_id is not None:
                return exc.turn_id  # the plan is stored: collect answers every call
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
                results = executor.collect(turn, timeout=self.turn_timeout)
                break
            except TurnError:
                # The submit failed after claiming the ids but before storing the plan; the
                # plan is stored before any job, so none of these calls was enqueued: the
                # orchestrator got a clear error and nothing ran.
                self._count("submit_errors")
                for item in calls:
                    self.records.pop(item["id"], None)
                return
            except (redis.RedisError, RedisUnavailable):
                self._count("collect_errors")
                time.sleep(0.2)
        else:
            return
        answered = time.time()
        turn_id = turn if isinstance(turn, str) else turn.turn_id
        self.answers[turn_id] = {
            r.call_id: (r.status.value, r.error_type.value if r.error_type else None, r.content)
            for r in results
        }
        for result in results:
            record = self.records.get(result.call_id)
            if record is not None:
                record.answered_at = answered
                record.status = result.status.value
                record.error_type = result.error_type.value if result.error_type else None
                record.message = result.content[:200] if result.error_type else ""

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1
