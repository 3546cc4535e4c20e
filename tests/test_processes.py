"""Background processes of a session, on a real redis-server with real worker processes.

A process started by ``process_start`` belongs to its session: a later call on another worker
process reads and drives it, a server it runs is reachable from the session's later commands
on the loopback and from no other session, a REPL keeps its state from one call to the next,
and it starts where the session's shell left off. Which worker ran a call is read from its
``lock_acquired`` event.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import pytest
import redis

from executor import Executor, Sessions, Settings, ToolResult, ToolStatus
from tests.support.procs import MakeWorkers
from tests.support.sessions import call, host_settings, ok, worker_of

pytestmark = pytest.mark.proof

_ids = itertools.count(1)


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return host_settings(redis_url, tmp_path, "h1")


def _one(executor: Executor, name: str, **arguments: object) -> tuple[str, ToolResult]:
    """Run one call; its id and its result."""
    call_id = f"{name}-{next(_ids)}"
    [result] = executor.run([call(call_id, name, **arguments)], timeout=120)
    return call_id, result


def _text(executor: Executor, name: str, **arguments: object) -> str:
    return ok(_one(executor, name, **arguments)[1])


def _page_bytes(text: str) -> tuple[int, int, int]:
    """(start, end, size) from a page's "output bytes START-END of SIZE:" line."""
    found = re.search(r"output bytes (\d+)-(\d+) of (\d+):", text)
    assert found, text
    start, end, size = (int(part) for part in found.groups())
    return start, end, size


def test_a_server_in_the_background_serves_later_calls_on_another_worker_only_in_its_session(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    """Oracle: the page fetched by a call that ran on a worker process other than the one
    that started the server; the same fetch from another session refused (curl's exit 7);
    the server's log read in small pages equals its output file, byte for byte."""
    first = make_workers(settings)
    [starter] = first.start(1)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
        sessions.create("other")
    root = Path(settings.worker.sessions_root or "")
    (root / "s" / "page.html").write_text("hello page\n")
    with Executor(settings=settings, session="s") as executor:
        start_id, started = _one(
            executor,
            "process_start",
            command="python3 -u -m http.server 8765 --bind 127.0.0.1",
            wait=5,
        )
        assert "Started background process p1" in ok(started)
        assert worker_of(client, start_id) == starter.name

        # The starting worker is gone; only a new process can serve the next calls.
        [second] = make_workers(settings).start(1)
        first.stop_all()
        fetch_id, fetched = _one(
            executor,
            "bash",
            command="for i in $(seq 50); do curl -sf http://127.0.0.1:8765/page.html && "
            "exit 0; sleep 0.2; done; exit 1",
            timeout=30,
        )
        assert "hello page" in ok(fetched)
        assert worker_of(client, fetch_id) == second.name
        for number in range(3):
            ok(_one(executor, "bash", command=f"curl -sf http://127.0.0.1:8765/?n={number}")[1])

        # The log, read back in pages of 64 bytes, is the output file.
        output_file = root / ".toolpool-host" / "s" / "p1" / "output"
        pages, offset = [], 0
        while True:
            text = _text(executor, "process_output", process="p1", offset=offset, max_bytes=64)
            if "no output past byte" in text:
                break
            start, end, _ = _page_bytes(text)
            assert start == offset
            pages.append((start, end))
            offset = end
        assert offset == output_file.stat().st_size
        assert len(pages) >= 3
        assert b"GET /page.html" in output_file.read_bytes()

    with Executor(settings=settings, session="other") as other:
        refused = _text(
            other, "bash", command="curl -sS http://127.0.0.1:8765/page.html; echo rc=$?"
        )
        assert "rc=7" in refused, refused  # connection refused: nothing listens in its network
        listed = _text(other, "process_list")
        assert "no background processes" in listed

    with Executor(settings=settings, session="s") as executor:
        stopped = _text(executor, "process_stop", process="p1")
        assert "p1 is stopped: stopped by process_stop (SIGTERM)" in stopped, stopped


def test_a_repl_keeps_a_variable_from_one_call_to_the_next(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    """Oracle: the value printed by the second input is the one the first input set; a fresh
    interpreter per call would answer a NameError."""
    make_workers(settings).start(2)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
    with Executor(settings=settings, session="s") as executor:
        started = _text(executor, "process_start", command="python3 -q", wait=10)
        assert ">>>" in started, started
        _text(executor, "process_input", process="p1", text="x = 41")
        answered = _text(executor, "process_input", process="p1", text="print(x + 1)", wait=10)
        assert "\n42\n" in answered + "\n", answered
        ended = _text(executor, "process_input", process="p1", text="raise SystemExit(3)")
        listed = _text(executor, "process_list")
    assert "exit code 3" in listed or "exit code 3" in ended, (ended, listed)


def test_a_process_starts_where_the_sessions_shell_left_off(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    """Oracle: the process prints the folder and the variable the previous bash call left;
    a process started in the folder's root with a bare environment would print neither."""
    make_workers(settings).start(1)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
    with Executor(settings=settings, session="s") as executor:
        ok(_one(executor, "bash", command="mkdir -p sub && cd sub && export MODE=test")[1])
        _text(executor, "process_start", command='pwd -P; echo "MODE=$MODE"; sleep 60', wait=5)
        text = _text(executor, "process_output", process="p1", wait=10)
        _text(executor, "process_stop", process="p1", signal="KILL")
    folder = os.path.realpath(Path(settings.worker.sessions_root or "") / "s" / "sub")
    assert f"{folder}\n" in text, text
    assert "MODE=test" in text, text


def test_an_answer_that_names_what_is_wrong(settings: Settings, make_workers: MakeWorkers) -> None:
    """Oracle: each bad call is an error naming what was wrong, and the process it names
    (or not) is untouched: a later list still shows p1 running."""
    make_workers(settings).start(1)
    with Sessions(settings=settings) as sessions:
        sessions.create("s")
    with Executor(settings=settings, session="s") as executor:
        _text(executor, "process_start", command="sleep 60", wait=0)
        _, unknown = _one(executor, "process_output", process="p9")
        _, past = _one(executor, "process_output", process="p1", offset=10**6)
        _, bad_signal = _one(executor, "process_stop", process="p1", signal="BOOM")
        listed = _text(executor, "process_list")
        _text(executor, "process_stop", process="p1", signal="KILL")
    assert unknown.status is ToolStatus.ERROR
    assert "No background process 'p9' in session 's': its processes are p1" in unknown.content
    assert past.status is ToolStatus.ERROR
    assert "past the end of p1's output" in past.content
    assert bad_signal.status is ToolStatus.ERROR
    assert "signal" in bad_signal.content
    assert re.search(r"p1\s+running", listed), listed
