"""``toolpool dashboard`` on a pool of real workers: over HTTP, and in a real browser.

The browser is the Debian package's headless Chromium, driven by Selenium: it opens the page
while turns run, and sees the workers (with their tools), the running call, the lock's holder
and a waiter appear, a failed call listed, the finished calls listed, and a turn's timeline
drawn with one bar per call in the right lanes and order; the page updates without a
reload. With ``TOOLPOOL_SCREENSHOTS=DIR`` the browser
test saves its screenshots there (``docs/`` keeps the README's).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from executor import Executor, Sessions, Settings, ToolResult
from tests.support.mcp import ROOT, TOOLPOOL, mcp_env
from tests.support.ports import free_port
from tests.support.procs import MakeWorkers, stop_process
from tests.support.sessions import host_settings, ok
from tests.support.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.proof  # a dashboard process beside real worker processes

TOKEN = "dash-token"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@dataclass
class Dashboard:
    url: str
    settings: Settings
    workspace: Path

    def get(self, path: str, *, token: str | None = TOKEN) -> Any:
        separator = "&" if "?" in path else "?"
        query = f"{separator}token={token}" if token else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=PATIENCE_S) as answer:
            body = answer.read()
        return json.loads(body) if answer.headers.get_content_type() == "application/json" else body

    def run(self, calls: list[dict[str, Any]]) -> list[ToolResult]:
        with Executor(settings=self.settings, wait_for_workers=PATIENCE_S) as executor:
            return executor.run(calls, timeout=PATIENCE_S * 2)


def _answers(dashboard: Dashboard) -> bool:
    try:
        return len(dashboard.get("/api/state").get("workers", [])) == 2
    except OSError:
        return False


@pytest.fixture
def dashboard(redis_url: str, tmp_path: Path, make_workers: MakeWorkers) -> Iterator[Dashboard]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    settings = Settings(redis_url=redis_url, workspace=workspace)
    with _serving(settings, tmp_path, make_workers) as served:
        yield served


@pytest.fixture
def session_dashboard(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> Iterator[Dashboard]:
    """The dashboard of two workers that serve the sessions of host ``h1``."""
    settings = host_settings(redis_url, tmp_path, "h1")
    with _serving(settings, tmp_path, make_workers) as served:
        yield served


@contextlib.contextmanager
def _serving(settings: Settings, tmp_path: Path, make_workers: MakeWorkers) -> Iterator[Dashboard]:
    """Two workers of ``settings`` and a dashboard process that shows them both."""
    make_workers(settings).start(2)
    port = free_port()
    log = tmp_path / "dashboard.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [*TOOLPOOL, "dashboard", "--port", str(port), "--redis", settings.redis.url or ""],
            env=mcp_env(TOOLPOOL_DASHBOARD_TOKEN=TOKEN),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
        )
    served = Dashboard(f"http://127.0.0.1:{port}", settings, settings.worker.workspace)
    try:
        wait_for(
            lambda: _answers(served) or process.poll() is not None,
            "the dashboard to show both workers",
        )
        assert process.poll() is None, log.read_text()
        yield served
    finally:
        stop_process(process, PATIENCE_S)
        print(log.read_text()[-3000:])


def _reads_then_a_write(prefix: str) -> list[dict[str, Any]]:
    read = {"path": "a.txt", "delay_ms": 800}
    return [
        {"id": f"{prefix}-r1", "name": "slow_read", "arguments": read},
        {"id": f"{prefix}-r2", "name": "slow_read", "arguments": read},
        {"id": f"{prefix}-w", "name": "write_file", "arguments": {"path": "b.txt", "content": "x"}},
    ]


def test_over_http_the_state_the_stream_a_timeline_a_call_and_metrics(
    dashboard: Dashboard,
) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        dashboard.get("/api/state", token=None)
    assert refused.value.code == 401

    # The stream is open before the turn runs: its events must come through it.
    request = urllib.request.Request(f"{dashboard.url}/api/stream?token={TOKEN}")
    seen: list[dict[str, Any]] = []
    with urllib.request.urlopen(request, timeout=PATIENCE_S) as stream:
        assert stream.readline().startswith(b"event: state")  # the state comes first
        results = dashboard.run(_reads_then_a_write("h"))
        kind = ""
        while not any(e.get("event") == "tool_result" and e.get("call_id") == "h-w" for e in seen):
            line = stream.readline().decode().strip()
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "event":
                seen.append(json.loads(line.removeprefix("data: ")))
    assert [r.content for r in results[:2]] == ["alpha\n", "alpha\n"]
    started = [e["call_id"] for e in seen if e["event"] == "tool_execution_started"]
    assert sorted(started) == ["h-r1", "h-r2", "h-w"]

    def ours_listed() -> list[dict[str, Any]]:
        recent = dashboard.get("/api/state")["recent_calls"]
        return [c for c in recent if c["call_id"].startswith("h-")]

    # The state is read once a second: the next one lists the calls.
    wait_for(lambda: len(ours_listed()) == 3, "the state to list the three calls")
    ours = ours_listed()
    assert {c["call_id"]: c["status"] for c in ours} == {"h-r1": "ok", "h-r2": "ok", "h-w": "ok"}
    assert all(c["lock_wait_ms"] is not None and c["duration_ms"] > 0 for c in ours)
    svg = dashboard.get(f"/api/turns/{ours[0]['turn_id']}/timeline.svg").decode()
    assert svg.count('class="call"') == 3
    call = dashboard.get("/api/calls/h-r1")
    assert call["result"]["content"] == "alpha\n"
    metrics = dashboard.get("/metrics").decode()
    assert 'toolpool_calls_total{status="ok",tool="slow_read"} 2.0' in metrics


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no chromium and chromedriver here (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1400",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def test_in_a_browser_the_page_shows_the_pool_live_and_draws_a_timeline(
    dashboard: Dashboard, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    def script(code: str) -> Any:
        return browser.execute_script(code)

    def until(condition: Any, what: str) -> None:
        wait_for(condition, f"the page to show {what}")

    def shown(selector: str) -> bool:
        return bool(
            browser.execute_script("return !!document.querySelector(arguments[0])", selector)
        )

    browser.get(f"{dashboard.url}/?token={TOKEN}")
    until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr")) == 2,
        "both workers",
    )
    loaded = script("return window.toolpoolPageLoad")
    updates = int(script("return document.getElementById('status').dataset.updates"))

    dashboard.run(
        [{"id": f"warm-{i}", "name": "read_file", "arguments": {"path": "a.txt"}} for i in range(3)]
    )

    # A bash call that holds the lock until this test lets it go, and a read queued behind it.
    hold = {
        "id": "held",
        "name": "bash",
        "arguments": {"command": "while [ ! -e go ]; do sleep 0.05; done; echo released"},
    }
    behind = {"id": "behind", "name": "read_file", "arguments": {"path": "a.txt"}}
    turns = [threading.Thread(target=lambda: dashboard.run([hold]))]
    turns[0].start()
    try:
        until(
            lambda: shown('#workers tr.busy[data-call-id="held"]'),
            "the worker running the bash call",
        )
        until(
            lambda: shown('#lock-holders li[data-call-id="held"][data-mode="exclusive"]'),
            "the bash call holding the lock",
        )
        turns.append(threading.Thread(target=lambda: dashboard.run([behind])))
        turns[1].start()
        until(
            lambda: shown('#lock-waiters li[data-call-id="behind"]'),
            "the read waiting for the lock",
        )
        _screenshot(browser, "dashboard.png")
    finally:
        (dashboard.workspace / "go").touch()
        for turn in turns:
            turn.join(timeout=PATIENCE_S)

    dashboard.run([{"id": "oops", "name": "read_file", "arguments": {"path": "missing.txt"}}])
    until(lambda: shown('#failures li[data-call-id="oops"]'), "the failed call")
    dashboard.run(_reads_then_a_write("b"))
    until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, '#calls tr[data-call-id^="b-"]')) == 3,
        "the turn's three calls",
    )
    # Clicked in the page itself: the table is redrawn every second, an element found from
    # here may be gone by the time it is clicked.
    script("document.querySelector('#calls tr[data-call-id=\"b-w\"] a.turn').click()")
    until(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, "#timeline g.call")) == 3,
        "the turn's timeline",
    )
    bars = {
        g.get_attribute("data-call-id"): g
        for g in browser.find_elements(By.CSS_SELECTOR, "#timeline g.call")
    }
    lanes = [
        g.get_attribute("data-worker")
        for g in browser.find_elements(By.CSS_SELECTOR, "#timeline g.lane")
    ]
    _screenshot(browser, "timeline.png")

    assert sorted(bars) == ["b-r1", "b-r2", "b-w"]
    assert {bar.get_attribute("data-worker") for bar in bars.values()} <= set(lanes)
    assert bars["b-r1"].get_attribute("data-worker") != bars["b-r2"].get_attribute("data-worker")
    assert [bars[c].get_attribute("data-mode") for c in ("b-r1", "b-r2", "b-w")] == [
        "shared",
        "shared",
        "exclusive",
    ]
    reads_end = max(float(bars[c].get_attribute("data-released")) for c in ("b-r1", "b-r2"))
    assert float(bars["b-w"].get_attribute("data-granted")) >= reads_end
    tools = script(
        "return [...document.querySelectorAll('#workers td.tools')]"
        ".map(td => td.title.split(', ').length)"
    )
    assert tools == [18, 18]  # the 14 built-in tools (5 of processes) and 4 test tools, each
    # The same page all along, updated by its stream.
    assert script("return window.toolpoolPageLoad") == loaded
    assert int(script("return document.getElementById('status').dataset.updates")) > updates


def _screenshot(browser: Any, name: str) -> None:
    folder = os.environ.get("TOOLPOOL_SCREENSHOTS")
    if folder:
        browser.save_screenshot(str(Path(folder) / name))


def test_in_a_browser_nothing_unknown_reads_as_zero_or_blank_and_the_timeline_opens_in_view(
    dashboard: Dashboard, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    def text(selector: str) -> str:
        found: str = browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''",
            selector,
        )
        return found

    def until(condition: Any, what: str) -> None:
        wait_for(condition, f"the page to show {what}")

    # The page before its first snapshot (here: never, no stream behind a file): no counts.
    page = tmp_path / "page.html"
    page.write_text((ROOT / "executor" / "dashboard" / "page.html").read_text())
    browser.get(page.as_uri())
    assert "not known yet" in text("#queue")
    assert "0 queued" not in text("#queue")

    browser.get(f"{dashboard.url}/?token={TOKEN}")
    until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr")) == 2, "workers")
    until(lambda: "0 queued" in text("#queue"), "the queue's counts")
    assert "not known yet" not in text("#queue")
    assert text("#lock-waiters") == "no calls waiting"
    assert text("#lock-holders") == "no holder: the lock is free"
    assert text("#sessions tbody") == "no sessions"
    assert text("#failures") == "no failures among the recent calls"
    assert text("#workers td.serves") == "pool calls"

    # A read that waits for the lock while a bash call holds it: its run and its wait apart.
    hold = {
        "id": "held",
        "name": "bash",
        "arguments": {"command": "while [ ! -e go ]; do sleep 0.05; done"},
    }
    behind = {"id": "behind", "name": "read_file", "arguments": {"path": "a.txt"}}
    turns = [threading.Thread(target=lambda: dashboard.run([hold]))]
    turns[0].start()
    try:
        until(lambda: "held" in text("#lock-holders"), "the bash call holding the lock")
        turns.append(threading.Thread(target=lambda: dashboard.run([behind])))
        turns[1].start()
        until(lambda: "behind" in text("#lock-waiters"), "the read waiting")
    finally:
        (dashboard.workspace / "go").touch()
        for turn in turns:
            turn.join(timeout=PATIENCE_S)
    until(lambda: text('#calls tr[data-call-id="behind"] td.wait') != "", "the read's times")
    run = float(text('#calls tr[data-call-id="behind"] td.run').removesuffix(" ms"))
    wait = float(text('#calls tr[data-call-id="behind"] td.wait').removesuffix(" ms"))
    assert 0 <= run < wait, (run, wait)

    # A hundred calls listed, then a turn's timeline asked for: it shows without scrolling.
    dashboard.run(
        [{"id": f"n-{i}", "name": "read_file", "arguments": {"path": "a.txt"}} for i in range(100)]
    )
    # Events arrive in any order across workers: wait for the very row clicked below.
    until(
        lambda: (
            len(browser.find_elements(By.CSS_SELECTOR, '#calls tr[data-call-id^="n-"]')) >= 90
            and bool(
                browser.find_elements(By.CSS_SELECTOR, '#calls tr[data-call-id="n-99"] a.turn')
            )
        ),
        "the hundred calls",
    )
    browser.execute_script("window.scrollTo(0, 0)")
    browser.execute_script(
        "document.querySelector('#calls tr[data-call-id=\"n-99\"] a.turn').click()"
    )
    until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#timeline g.call")) == 100, "it")
    top, bottom, height = browser.execute_script(
        "const r = document.getElementById('timeline').getBoundingClientRect();"
        "return [r.top, r.bottom, window.innerHeight]"
    )
    assert 0 <= top < height, (top, bottom, height)


def test_in_a_browser_a_sessions_background_process_shows_running_then_stopped(
    session_dashboard: Dashboard, browser: Any
) -> None:
    """Oracle: no row for the running process (or no pid on it), a row still ``running``
    after process_stop, the stop's reason or the output size missing, the session's count
    not following, or a page that had to be reloaded to show any of it."""
    dashboard = session_dashboard

    def text(selector: str) -> str:
        found: str = browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''",
            selector,
        )
        return found

    def until(condition: Any, what: str) -> None:
        wait_for(condition, f"the page to show {what}")

    browser.get(f"{dashboard.url}/?token={TOKEN}")
    until(lambda: text("#processes tbody") == "no background processes", "no processes")
    loaded = browser.execute_script("return window.toolpoolPageLoad")
    with Sessions(settings=dashboard.settings) as sessions:
        sessions.create("web")
    with Executor(settings=dashboard.settings, session="web") as executor:
        [started] = executor.run(
            [
                {
                    "id": "bg-start",
                    "name": "process_start",
                    "arguments": {"command": "echo up; exec sleep 600", "wait": 5},
                }
            ],
            timeout=PATIENCE_S * 2,
        )
        assert "Started background process p1" in ok(started)
        row = '#processes tr[data-session="web"][data-process="p1"]'
        until(lambda: text(f'{row}[data-state="running"]') != "", "p1 running")
        assert text(f"{row} td.ending").startswith("pid "), text(row)
        assert int(text(f"{row} td.ending").removeprefix("pid ")) > 0, text(row)
        assert text(f"{row} td.command") == "echo up; exec sleep 600"
        assert text(f"{row} td.output") == "4 B"  # "up\r\n", as recorded at its start
        background = '#sessions tr[data-session="web"] td.background'
        assert text(background) == "1 running, 0 ended"
        _screenshot(browser, "dashboard-processes.png")

        [stopped] = executor.run(
            [{"id": "bg-stop", "name": "process_stop", "arguments": {"process": "p1"}}],
            timeout=PATIENCE_S * 2,
        )
        assert "stopped" in ok(stopped), stopped.content
    until(lambda: text(f'{row}[data-state="stopped"]') != "", "p1 stopped")
    assert text(f"{row} td.ending") == "stopped by process_stop (SIGTERM)"
    with Sessions(settings=dashboard.settings) as sessions:
        [record] = sessions.processes("web")
    assert record.output_bytes >= len("up\n"), record
    assert text(f"{row} td.output") == f"{record.output_bytes} B"
    until(lambda: text(background) == "0 running, 1 ended", "the session's count")
    assert browser.execute_script("return window.toolpoolPageLoad") == loaded
