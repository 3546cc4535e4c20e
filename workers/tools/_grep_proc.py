"""grep's helper process: the regex search runs where it can be stopped.

Python's ``re`` cannot be interrupted from another thread, so a pattern that backtracks
catastrophically (``(a+)+$`` against a long line of a's) would pin a CPU of the worker for
good: the runner's time limit abandons the tool's thread, not its work. The search therefore
runs in a small helper process. The helper stops itself with SIGALRM when the call's budget is
spent (``re`` checks for signals, which only the main thread of a process receives) and
answers "over budget", staying alive for the next call. If it does not answer in time, or the
call is cancelled, the worker kills it and starts another for the next grep.

Helpers are kept between calls (one per grep running at the same time, a few at most): a new
one costs about 20 ms, as it imports only the standard library and the search modules. A
helper exits by itself when its worker closes the pipe, which happens when the worker exits.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from workers.tools._grep_search import Findings, search

# How long the helper gets, past its own alarm, to answer before it is killed.
_ANSWER_GRACE_S = 0.5
_POLL_S = 0.05
_MAX_IDLE = 4
_ROOT = str(Path(__file__).resolve().parents[2])
# -S -E: the standard library alone, which is all the search modules import (the packages'
# faces load their tools on first use, so importing this module loads none).
_BOOT = """\
import sys
sys.path.insert(0, sys.argv[1])
from workers.tools._grep_proc import serve
serve()
"""


class SearchOverBudget(Exception):
    """The search ran out of time, in file ``current`` (empty if none was open yet)."""

    def __init__(self, current: str, seconds: float) -> None:
        super().__init__(f"over budget after {seconds:g} s in {current!r}")
        self.current = current
        self.seconds = seconds


class SearchCancelled(Exception):
    """The call was cancelled while its search ran; the helper was killed."""


class SearchFailed(Exception):
    """The helper failed or vanished; the message says how."""


def run_search(
    pattern: str,
    base: str,
    shown: str,
    *,
    is_dir: bool,
    root: str | None = None,
    budget: float,
    cancelled: threading.Event,
) -> Findings:
    """Run ``_grep_search.search`` in a helper process, for at most ``budget`` seconds."""
    request = {
        "pattern": pattern,
        "base": base,
        "shown": shown,
        "is_dir": is_dir,
        "root": root,
        "budget": max(budget, 0.01),
    }
    helper = _POOL.take()
    try:
        answer = helper.ask(request, budget + _ANSWER_GRACE_S, cancelled)
    except BaseException:
        helper.close()
        raise
    _POOL.give(helper)
    outcome = answer.pop("outcome")
    if outcome == "failed":
        raise SearchFailed(str(answer["error"]))
    found = Findings(**answer)
    if outcome == "over_budget":
        raise SearchOverBudget(found.current, budget)
    return found


class _Helper:
    """One helper process and the pipes to it (a JSON line each way per search)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-S", "-E", "-c", _BOOT, _ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def ask(
        self, request: dict[str, Any], wait_s: float, cancelled: threading.Event
    ) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError:
            raise SearchFailed("grep's search process had ended") from None
        deadline = time.monotonic() + wait_s
        while True:
            if cancelled.is_set():
                raise SearchCancelled
            left = deadline - time.monotonic()
            if left <= 0:
                # The alarm did not stop it (a C loop that never checks for signals).
                raise SearchOverBudget("", wait_s - _ANSWER_GRACE_S)
            ready, _, _ = select.select([stdout], [], [], min(_POLL_S, left))
            if ready:
                line = stdout.readline()
                if not line:
                    raise SearchFailed(f"grep's search process ended ({self.process.wait()})")
                answer: dict[str, Any] = json.loads(line)
                return answer

    def close(self) -> None:
        """Kill the helper and reap it."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class _Pool:
    """Idle helpers of this process; a forked child starts its own rather than share them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Helper] = []
        atexit.register(self.close_all)

    def take(self) -> _Helper:
        with self._lock:
            while self._idle:
                helper = self._idle.pop()
                if helper.owner != os.getpid():
                    # Inherited through a fork: the parent's helper, with the parent's pipes.
                    continue
                if helper.alive():
                    return helper
                helper.close()
        return _Helper()

    def give(self, helper: _Helper) -> None:
        with self._lock:
            if helper.owner == os.getpid() and len(self._idle) < _MAX_IDLE:
                self._idle.append(helper)
                return
        helper.close()

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for helper in idle:
            if helper.owner == os.getpid():
                helper.close()


_POOL = _Pool()


# ------------------------------------------------------------------------ the helper side


class _OverBudget(Exception):
    """Raised by the alarm inside the running search."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise _OverBudget


def serve() -> None:
    """The helper's main loop: one JSON request per line on stdin, one answer per line out."""
    # Ctrl-C at a terminal is meant for the worker, which then closes our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _alarm)
    for line in sys.stdin.buffer:
        answer = _answer(json.loads(line))
        sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
        sys.stdout.buffer.flush()


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    found = Findings()
    outcome = "done"
    try:
        signal.setitimer(signal.ITIMER_REAL, float(request["budget"]))
        try:
            search(
                request["pattern"],
                request["base"],
                request["shown"],
                is_dir=request["is_dir"],
                root=request.get("root"),
                findings=found,
            )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _OverBudget:
        outcome = "over_budget"
    except Exception as exc:  # whatever it is, the worker must hear of it
        return {"outcome": "failed", "error": f"{type(exc).__name__}: {exc}"}
    return {"outcome": outcome, **asdict(found)}
