"""``toolpool mcp --http`` at its edges: stopping it with calls in flight, a client that drops
a call's stream, the answers a client without the token gets, and resuming an SSE stream.

The server is a real process in front of two real worker processes (as in ``test_mcp``);
clients are the official MCP client SDK, or raw HTTP where the test is about the wire.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.support.mcp import (
    ROOT,
    _Output,
    http_command,
    http_session,
    mcp_env,
    start_builtin_pool,
)
from tests.support.pids import processes_with, sleep_marker, survivors
from tests.support.ports import free_port
from tests.support.procs import MakeWorkers, Workers, stop_process
from tests.support.waiting import PATIENCE_S, wait_for
from tests.test_mcp import MODES, error_text, run, stored_results, wait_until

pytestmark = pytest.mark.proof  # MCP server processes in front of real worker processes


@pytest.fixture
def pool(redis_url: str, tmp_path: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    workers = start_builtin_pool(make_workers, redis_url, workspace)
    yield workers
    print(workers.diagnosis())


class Server:
    """``toolpool mcp --http`` as a process this test stops itself."""

    def __init__(self, redis_url: str, log: Path, *options: str) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(
                [*http_command(redis_url, port), *options],
                env=mcp_env(),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.output = _Output(self.process, f"toolpool mcp: serving on {self.url}")
        wait_for(
            lambda: self.output.seen.is_set() or self.process.poll() is not None,
            f"the server to say it serves {self.url}",
        )
        assert self.output.seen.is_set(), f"the server ended: {self.output.text()!r}"

    def close(self) -> None:
        stop_process(self.process, PATIENCE_S)
        self.output.close()
        print(f"--- MCP server stdout ---\n{self.output.text()[-3000:]}")


@pytest.fixture
def server(redis_url: str, pool: Workers, server_log: Path) -> Iterator[Server]:
    started = Server(redis_url, server_log)
    yield started
    started.close()


def _kill(marker: str) -> None:
    """A failed cancellation leaves its sleep running: ours to end."""
    for pid in processes_with(marker):
        os.kill(pid, signal.SIGKILL)


# -- stopping the server ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_ctrl_c_with_a_call_in_flight_cancels_it_and_exits(
    mode: str, redis_url: str, server: Server
) -> None:
    # A 300 s sleep in flight: a server that waited for it (its response in progress, or a
    # thread still collecting it) would outlive the patience below by minutes.
    marker = sleep_marker()
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with http_session(server.url, mode=mode) as client:

            async def call() -> None:
                outcome["result"] = await client.call_tool(
                    "bash", {"command": f"sleep {marker}", "timeout": 500}
                )

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await wait_until(lambda: processes_with(marker), "the call's sleep to start")
                server.process.send_signal(signal.SIGINT)
                outcome["exit"] = await anyio.to_thread.run_sync(
                    lambda: server.process.wait(PATIENCE_S)
                )
        # Checked before the test's own clean-up could end the sleep instead.
        outcome["left"] = await anyio.to_thread.run_sync(survivors, marker, PATIENCE_S)

    try:
        run(scenario)
    finally:
        _kill(marker)
    assert outcome["exit"] == 0
    assert "toolpool mcp: stopped" in server.output.text()
    # The client heard why its call ended; the call was cancelled on the pool.
    assert error_text(outcome["result"]) == (
        "The MCP server stopped while this bash call ran: the call was cancelled. "
        "Call it again once the server is back."
    )
    assert outcome["left"] == [], f"the cancelled call's sleep still runs: {outcome['left']}"
    wait_for(lambda: stored_results(redis_url, "bash"), "the cancelled call's stored result")
    assert [r.error_type for r in stored_results(redis_url, "bash")] == ["cancelled"]


# -- without the token --------------------------------------------------------------------------

TOKEN = "s3cret-token-for-the-test"
HOW = (
    "send the header Authorization: Bearer TOKEN, TOKEN being the value of the server's "
    "TOOLPOOL_MCP_TOKEN (or --token)"
)


def test_a_request_without_the_token_is_told_what_was_wrong_and_how_to_send_it(
    redis_url: str, pool: Workers, server_log: Path
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    served = Server(redis_url, server_log, "--token", TOKEN)
    try:
        base = served.url.removesuffix("/mcp")
        with httpx2.Client(timeout=PATIENCE_S) as http:
            refused = {
                label: http.post(served.url, json=initialize, headers={**accept, **extra})
                for label, extra in (
                    ("none", {}),
                    ("wrong", {"Authorization": "Bearer nope"}),
                    ("not bearer", {"Authorization": TOKEN}),
                )
            }
            # What a host's OAuth discovery and client registration ask for after a 401.
            oauth = {
                path: http.request(method, base + path)
                for method, path in (
                    ("GET", "/.well-known/oauth-protected-resource/mcp"),
                    ("GET", "/.well-known/oauth-protected-resource"),
                    ("GET", "/.well-known/oauth-authorization-server"),
                    ("GET", "/.well-known/openid-configuration"),
                    ("POST", "/register"),
                )
            }
    finally:
        served.close()

    wrong = {
        "none": "this request has none",
        "wrong": "refused the bearer token this request sent, which is not its own",
        "not bearer": "Authorization header is not of the form Bearer TOKEN",
    }
    codes = {"none": None, "wrong": "invalid_token", "not bearer": "invalid_request"}
    for label, response in refused.items():
        assert response.status_code == 401, (label, response.text)
        described = response.json()["error_description"]
        assert wrong[label] in described, (label, described)
        assert HOW in described, (label, described)
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith('Bearer realm="toolpool"'), challenge
        assert f'error_description="{described}"' in challenge, challenge
        assert ("error=" in challenge.replace("error_description=", "")) == bool(codes[label])
        if codes[label]:
            assert f'error="{codes[label]}"' in challenge, challenge
            assert response.json()["error"] == codes[label]
    for path, response in oauth.items():
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"] == "invalid_request", (path, response.text)
        described = response.json()["error_description"]
        assert "takes no OAuth" in described, (path, described)
        assert HOW in described, (path, described)


# -- resuming a stream --------------------------------------------------------------------------

RESUMABLE = "2025-11-25"  # the first protocol whose clients resume a stream
Events = list[dict[str, str]]


def _events(raw: bytes) -> Events:
    """The SSE events in ``raw``, each as its fields (``id``, ``retry``, ``data``...)."""
    found = []
    for block in raw.replace(b"\r\n", b"\n").decode().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            if name:
                fields[name] = value.removeprefix(" ")
        if fields:
            found.append(fields)
    return found


def _read_until(response: httpx2.Response, done: Callable[[Events], bool]) -> Events:
    """The events of a stream, read until ``done`` says they are enough (or it ends)."""
    raw = b""
    for chunk in response.iter_raw():
        raw += chunk
        events = _events(raw) if raw.endswith((b"\n\n", b"\r\n\r\n")) else []
        if events and done(events):
            return events
    return _events(raw)


def _answers(request_id: int, event: dict[str, str]) -> bool:
    return f'"id":{request_id},' in event.get("data", "")


def test_a_client_that_lost_a_calls_stream_resumes_it_with_last_event_id(
    redis_url: str, server: Server, tmp_path: Path
) -> None:
    # The call waits for a file the test writes only once the stream is gone: its result
    # can only come on the resumed stream.
    release = tmp_path / "release"
    command = f"until [ -e {release} ]; do sleep 0.02; done; echo resumed"
    headers = {"Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": RESUMABLE,
            "capabilities": {},
            "clientInfo": {"name": "resuming", "version": "0"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command, "timeout": 120}},
    }
    with httpx2.Client(timeout=PATIENCE_S) as http:
        opened = http.post(server.url, json=initialize, headers=headers)
        headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        headers["Mcp-Protocol-Version"] = RESUMABLE
        http.post(
            server.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=headers,
        )
        with http.stream("POST", server.url, json=call, headers=headers) as stream:
            # The priming event: an id and the retry time, before anything else.
            (priming,) = _read_until(stream, lambda events: len(events) >= 1)
        release.touch()  # the stream is closed: the result comes while no stream is open
        with http.stream(
            "GET", server.url, headers={**headers, "Last-Event-ID": priming["id"]}
        ) as resumed:
            events = _read_until(
                resumed, lambda got: any('"id":2' in e.get("data", "") for e in got)
            )
    assert priming["data"] == "", priming
    assert int(priming["retry"]) > 0, priming
    (answer,) = [e for e in events if _answers(2, e)]
    assert answer["id"], answer  # every event has an id to resume after
    result = json.loads(answer["data"])["result"]
    assert result["content"][0]["text"] == "exit code: 0\nstdout:\nresumed", result


# -- a dropped request --------------------------------------------------------------------------


def test_a_client_that_drops_a_calls_stream_cancels_the_call(
    redis_url: str, server: Server
) -> None:
    # As an aborted fetch does (the AI SDK's abortSignal): the stream closed, no cancel sent.
    marker = sleep_marker()
    version = "2025-06-18"  # a client that cannot resume a stream
    headers = {"Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "aborting", "version": "0"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": f"sleep {marker}", "timeout": 500}},
    }
    try:
        with httpx2.Client(timeout=PATIENCE_S) as http:
            opened = http.post(server.url, json=initialize, headers=headers)
            headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
            headers["Mcp-Protocol-Version"] = version
            with http.stream("POST", server.url, json=call, headers=headers) as stream:
                assert stream.status_code == 200
                wait_for(lambda: processes_with(marker), "the call's sleep to start")
            left = survivors(marker, PATIENCE_S)
    finally:
        _kill(marker)
    assert left == [], f"the dropped call's sleep still runs: {left}"
    wait_for(lambda: stored_results(redis_url, "bash"), "the dropped call's stored result")
    assert [r.error_type for r in stored_results(redis_url, "bash")] == ["cancelled"]
