"""``toolpool mcp --http`` driven by a client no one here wrote: the official MCP TypeScript SDK.

Once per test session the SDK (``@modelcontextprotocol/sdk``, an exact version) is installed
with npm into a temporary folder, beside a copy of ``tests/support/ts/client.mjs``. The test
starts two real worker processes and the HTTP server with a token, runs that script with the
machine's Node, and checks the one JSON object it prints: what plain ``fetch`` got without the
token, the tools the SDK's ``Client`` listed, and what its ``read_file`` and ``bash`` calls
returned. Without ``node`` or ``npm``, or when npm cannot reach its registry, the test is
skipped, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.support.mcp import ROOT, http_server, start_builtin_pool
from tests.support.procs import MakeWorkers, Workers
from tests.support.waiting import PATIENCE_S
from workers import builtin_registry

pytestmark = pytest.mark.proof  # Node, npm, an MCP server and worker processes

SCRIPTS = ROOT / "tests" / "support" / "ts"

# The newest release when this was written; its engines field asks for node >= 18.
SDK = "@modelcontextprotocol/sdk"
SDK_VERSION = "1.32.2"
NODE_MAJOR_MIN = 18
# npm's own limits (per fetch; one retry, 10 s later) keep a dead network from stalling it for
# minutes; the process limits only end a hung npm or client.
NETWORK = ["--fetch-timeout=60000", "--fetch-retries=1"]
INSTALL = ["install", "--save-exact", "--no-audit", "--no-fund", "--ignore-scripts",
           "--prefer-offline", *NETWORK]  # fmt: skip
INSTALL_S = 600.0
NODE_S = 300.0

# Not plain ASCII, so an encoding slip anywhere between the worker and Node shows.
FILE_TEXT = "written by the Python test\nGrüße, 東京, ✓\n"


# -- the SDK, installed once per session -------------------------------------------------------


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _why(npm_stderr: str) -> str:
    """The line of npm's error output that says what failed (``request to URL failed,
    reason: ...``), else its error code, else its last line."""
    lines = [line.removeprefix("npm error").strip() for line in npm_stderr.splitlines()]
    for wanted in ("request to ", "code "):
        found = [line for line in lines if line.startswith(wanted) or f" {wanted}" in line]
        if found:
            return found[0]
    return _tail(npm_stderr, 1)


def _npm(home: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``npm ARGS`` in ``home``; a run past ``timeout`` counts as failed (exit code -1)."""
    argv = ["npm", *args]
    try:
        return subprocess.run(argv, cwd=home, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or ""
                    for x in (exc.stdout, exc.stderr))  # fmt: skip
        return subprocess.CompletedProcess(argv, -1, out, f"{err}\n(ended after {timeout:g} s)")


@pytest.fixture(scope="session")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``client.mjs`` in a temporary folder where npm installed the pinned SDK next to it (so
    its ``import ... from "@modelcontextprotocol/sdk/..."`` resolves as in any Node project)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not found on PATH: the TypeScript SDK cannot run")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True,
                             timeout=PATIENCE_S, check=True).stdout.strip()  # fmt: skip
    if int(version.lstrip("v").split(".")[0]) < NODE_MAJOR_MIN:
        pytest.skip(f"node {version} is older than {SDK}@{SDK_VERSION} needs (>= 18)")

    home = tmp_path_factory.mktemp("ts-sdk")
    (home / "package.json").write_text('{"private": true}\n')
    installed = _npm(home, *INSTALL, f"{SDK}@{SDK_VERSION}", timeout=INSTALL_S)
    if installed.returncode != 0:
        # Tell "no network" (skip) from a broken install (fail) by asking the registry itself.
        ping = _npm(home, "ping", *NETWORK, timeout=INSTALL_S)
        if ping.returncode != 0:
            pytest.skip(f"npm cannot reach its registry: {_why(ping.stderr)}")
        pytest.fail(f"npm install {SDK}@{SDK_VERSION} failed (exit {installed.returncode}):\n"
                    f"{_tail(installed.stdout)}\n{_tail(installed.stderr)}")  # fmt: skip
    manifest = json.loads((home / "node_modules" / SDK / "package.json").read_text())
    assert manifest["version"] == SDK_VERSION, manifest["version"]
    for script in SCRIPTS.glob("*.mjs"):
        shutil.copy(script, home / script.name)
    return home / "client.mjs"


def run_node(script: Path, *args: str) -> dict[str, Any]:
    """Run ``node script ARGS`` and return the one JSON object it printed."""
    done = subprocess.run(["node", str(script), *args], cwd=script.parent, capture_output=True,
                          stdin=subprocess.DEVNULL, text=True, timeout=NODE_S,
                          check=False)  # fmt: skip
    assert done.returncode == 0, f"node exited {done.returncode}:\n{done.stderr}\n{done.stdout}"
    got: dict[str, Any] = json.loads(done.stdout)
    return got


# -- the pool and the HTTP server ---------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def pool(redis_url: str, workspace: Path, make_workers: MakeWorkers) -> Iterator[Workers]:
    workers = start_builtin_pool(make_workers, redis_url, workspace)
    yield workers
    print(workers.diagnosis())


# -- the proof ----------------------------------------------------------------------------------


def test_the_typescript_sdk_lists_and_calls_tools_over_http(
    ts_client: Path, redis_url: str, pool: Workers, workspace: Path, tmp_path: Path
) -> None:
    token = "ts-sdk-token-for-the-test"
    (workspace / "notes").mkdir()
    (workspace / "notes" / "from-python.txt").write_text(FILE_TEXT, encoding="utf-8")

    with http_server(redis_url, tmp_path / "mcp-server.log", token) as url:
        got = run_node(ts_client, url, token, "notes/from-python.txt")
    print(json.dumps(got, indent=1, ensure_ascii=False))  # shown when the test fails

    # Plain fetch, before the SDK connected: refused without the token and with a wrong one.
    assert got["unauthorized"]["statuses"] == {"none": 401, "wrong": 401}, got["unauthorized"]
    assert got["unauthorized"]["challenge"] == 'Bearer realm="toolpool"', got["unauthorized"]

    # The SDK's initialize handshake: a protocol version both speak, with our server.
    assert got["protocolVersion"] in HANDSHAKE_PROTOCOL_VERSIONS, got["protocolVersion"]
    assert got["server"]["name"] == "toolpool", got["server"]

    tools = {tool["name"]: tool["annotations"] for tool in got["tools"]}
    assert len(got["tools"]) == 9
    assert sorted(tools) == sorted(tool.name for tool in builtin_registry())
    assert tools["read_file"]["readOnlyHint"] is True, tools["read_file"]
    assert tools["bash"]["readOnlyHint"] is False, tools["bash"]
    assert tools["bash"]["destructiveHint"] is True, tools["bash"]

    assert got["read_file"] == {"isError": False, "texts": [FILE_TEXT]}, got["read_file"]
    echoed = "exit code: 0\nstdout:\nfrom-node"
    assert got["bash"] == {"isError": False, "texts": [echoed]}, got["bash"]
