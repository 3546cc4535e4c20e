"""Whole turns over plain HTTP (``POST /turns``), served beside the MCP endpoint.

A client in any language posts a turn's calls and gets the results in call order, or a turn
id to collect later; the turn keeps its semantics (checked in order, partitioned, enqueued at
once), on real worker processes. Driven with plain HTTP requests, as a non-Python client
would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.mcp import http_server, start_builtin_pool
from tests.support.pids import sleep_marker, survivors
from tests.support.procs import MakeWorkers, Workers
from tests.support.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.proof  # an HTTP server process in front of real worker processes

TOKEN = "turn-token"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    return folder


@pytest.fixture
def pool(redis_url: str, workspace: Path, make_workers: MakeWorkers) -> Workers:
    return start_builtin_pool(make_workers, redis_url, workspace)


@pytest.fixture
def turns(redis_url: str, pool: Workers, tmp_path: Path) -> Iterator[httpx2.Client]:
    """A plain HTTP client for the server's /turns, with the bearer token."""
    with http_server(redis_url, tmp_path / "server.log", TOKEN) as mcp_url:
        base = mcp_url.removesuffix("/mcp")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx2.Client(base_url=base, headers=headers, timeout=PATIENCE_S * 2) as client:
            yield client


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def test_a_turn_comes_back_in_order_with_read_after_write(turns: httpx2.Client) -> None:
    calls = [
        _call("r1", "read_file", path="a.txt"),
        _call("w", "write_file", path="b.txt", content="written\n"),
        _call("r2", "read_file", path="b.txt"),
        _call("x", "bash", command="cat a.txt b.txt"),
    ]

    response = turns.post("/turns", json=calls)

    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["call_id"] for r in body["results"]] == ["r1", "w", "r2", "x"]
    assert [r["status"] for r in body["results"]] == ["ok"] * 4
    assert body["results"][0]["content"] == "alpha\n"
    assert body["results"][2]["content"] == "written\n"  # the read after the write sees it
    assert body["results"][3]["content"] == "exit code: 0\nstdout:\nalpha\nwritten"


def test_a_turn_submitted_without_waiting_is_collected_by_its_id(turns: httpx2.Client) -> None:
    submitted = turns.post(
        "/turns",
        json={"calls": [_call("s", "bash", command="sleep 0.5; echo later")], "wait": False},
    )
    assert submitted.status_code == 202, submitted.text
    turn_id = submitted.json()["turn_id"]

    collected = turns.get(f"/turns/{turn_id}", params={"wait": PATIENCE_S})

    assert collected.status_code == 200, collected.text
    (result,) = collected.json()["results"]
    assert (result["call_id"], result["content"]) == ("s", "exit code: 0\nstdout:\nlater")


def test_polling_a_running_turn_leaves_it_running(turns: httpx2.Client, workspace: Path) -> None:
    # The call waits for a file only this test writes: it is still running at the first GET.
    command = "while [ ! -e go ]; do sleep 0.05; done; echo released"
    submitted = turns.post(
        "/turns",
        json={
            "calls": [
                _call("r", "read_file", path="a.txt"),
                _call("held", "bash", command=command, timeout=120),
            ],
            "wait": False,
        },
    )
    turn_id = submitted.json()["turn_id"]

    early = turns.get(f"/turns/{turn_id}", params={"wait": 0.5})

    assert early.status_code == 202, early.text
    body = early.json()
    assert body["pending"] == 1
    assert body["results"][0]["content"] == "alpha\n"
    assert body["results"][1] is None  # still running: not answered `timeout`
    (workspace / "go").write_text("")
    done = turns.get(f"/turns/{turn_id}", params={"wait": PATIENCE_S})
    assert done.status_code == 200, done.text
    assert done.json()["results"][1]["content"] == "exit code: 0\nstdout:\nreleased"


def test_a_cancelled_turn_ends_its_running_command(turns: httpx2.Client) -> None:
    marker = sleep_marker()
    submitted = turns.post(
        "/turns",
        json={
            "calls": [_call("long", "bash", command=f"sleep {marker}", timeout=300)],
            "wait": False,
        },
    )
    turn_id = submitted.json()["turn_id"]
    wait_for(lambda: survivors(marker, within=0) != [], "the command to start")

    assert turns.delete(f"/turns/{turn_id}").status_code == 204
    (result,) = turns.get(f"/turns/{turn_id}", params={"wait": PATIENCE_S}).json()["results"]

    # Answered by the cancel (cancelled) or by the worker that killed it (its tool error).
    assert result["status"] == "error", result
    assert "cancel" in result["content"].lower(), result
    assert survivors(marker, within=PATIENCE_S) == []


def test_calls_that_fail_are_results_and_a_bad_turn_is_an_error_that_says_why(
    turns: httpx2.Client,
) -> None:
    calls = [_call("u", "no_such_tool"), _call("z", "calculator", expression="1/0")]
    failing = turns.post("/turns", json=calls)
    assert failing.status_code == 200
    assert [r["error_type"] for r in failing.json()["results"]] == ["unknown_tool", "tool_error"]

    cases = {
        "not JSON": (turns.post("/turns", content=b"[{"), 400, "the body is not valid JSON"),
        "no calls": (turns.post("/turns", json={"calls": []}), 400, "non-empty JSON array"),
        "an unknown field": (turns.post("/turns", json={"calls": [], "mode": 1}), 400, "mode"),
        "one id twice": (
            turns.post(
                "/turns",
                json=[
                    _call("d", "calculator", expression="1"),
                    _call("d", "calculator", expression="2"),
                ],
            ),
            400,
            "appears twice",
        ),
        "a bad wait": (turns.get("/turns/x", params={"wait": "soon"}), 400, "wait"),
        "an unknown query": (turns.get("/turns/x", params={"timeout": 1}), 400, "timeout"),
        "an unknown turn": (
            turns.get("/turns/no-such-turn", params={"wait": 1}),
            404,
            "No turn 'no-such-turn'",
        ),
    }
    for what, (response, status, says) in cases.items():
        assert response.status_code == status, (what, response.text)
        assert says in response.json()["error"], (what, response.text)


def test_without_the_token_every_turn_request_is_refused(
    redis_url: str, pool: Workers, tmp_path: Path
) -> None:
    with http_server(redis_url, tmp_path / "server.log", TOKEN) as mcp_url:
        base = mcp_url.removesuffix("/mcp")
        with httpx2.Client(base_url=base, timeout=PATIENCE_S) as client:
            statuses = [
                client.post("/turns", json=[_call("c", "calculator", expression="1")]).status_code,
                client.get("/turns/x").status_code,
                client.delete("/turns/x").status_code,
                client.post(
                    "/turns", headers={"Authorization": "Bearer wrong"}, json=[]
                ).status_code,
            ]
    assert statuses == [401, 401, 401, 401]
