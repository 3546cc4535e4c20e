"""``toolpool mcp --http`` driven by clients no one here wrote: the official MCP TypeScript
SDK, and Node's own ``fetch`` on the turn endpoint.

Once per test session the SDK (``@modelcontextprotocol/sdk``, an exact version) is installed
with npm into a temporary folder, beside a copy of ``tests/support/ts/client.mjs``. The test
starts two real worker processes and the HTTP server with a token, runs that script with the
machine's Node, and checks what it printed: a line per check it made on ``/turns`` and one JSON
object with what it got. MCP: what plain ``fetch`` got without the token, the tools the SDK's
``Client`` listed, and what its ``read_file`` and ``bash`` calls returned. Turns: a whole turn
answered in call order with read-after-write, one posted with ``"wait": false`` and collected
by its id, malformed bodies refused with a reason, and requests without the token refused.
Without ``node`` or ``npm``, or when npm cannot reach its registry, the test is skipped, saying
why.
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
INSTALL = [
    "install",
    "--save-exact",
    "--no-audit",
    "--no-fund",
    "--ignore-scripts",
    "--prefer-offline",
    *NETWORK,
]
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
        return subprocess.run(
            argv,
            cwd=home,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out, err = (
            x.decode(errors="replace") if isinstance(x, bytes) else x or ""
            for x in (exc.stdout, exc.stderr)
        )
        return subprocess.CompletedProcess(argv, -1, out, f"{err}\n(ended after {timeout:g} s)")


@pytest.fixture(scope="session")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``client.mjs`` in a temporary folder where npm installed the pinned SDK next to it (so
    its ``import ... from "@modelcontextprotocol/sdk/..."`` resolves as in any Node project)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not found on PATH: the TypeScript SDK cannot run")
    version = subprocess.run(
        ["node", "--version"], capture_output=True, text=True, timeout=PATIENCE_S, check=True
    ).stdout.strip()
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
        pytest.fail(
            f"npm install {SDK}@{SDK_VERSION} failed (exit {installed.returncode}):\n"
            f"{_tail(installed.stdout)}\n{_tail(installed.stderr)}"
        )
    manifest = json.loads((home / "node_modules" / SDK / "package.json").read_text())
    assert manifest["version"] == SDK_VERSION, manifest["version"]
    for script in SCRIPTS.glob("*.mjs"):
        shutil.copy(script, home / script.name)
    return home / "client.mjs"


def run_node(script: Path, *args: str) -> tuple[list[str], dict[str, Any]]:
    """Run ``node script ARGS``; the lines it printed before its last, and the JSON object
    that last line holds."""
    done = subprocess.run(
        ["node", str(script), *args],
        cwd=script.parent,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=NODE_S,
        check=False,
    )
    assert done.returncode == 0, f"node exited {done.returncode}:\n{done.stderr}\n{done.stdout}"
    *lines, last = done.stdout.splitlines()
    got: dict[str, Any] = json.loads(last)
    return lines, got


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

# What client.mjs says it checked on /turns, in order: each line printed only once it held.
TURN_CHECKS = [
    "ok: POST /turns: 200 with a turn id",
    "ok: POST /turns: results in call order (t1-write,t1-read,t1-list,t1-cat)",
    "ok: POST /turns: every call ok",
    "ok: read_file after write_file read the text just written",
    "ok: list_directory after write_file listed note.txt",
    "ok: bash `cat note.txt` after write_file printed the text just written",
    'ok: "wait": false: 202 with a turn id, no results, while its first call still waits',
    "ok: GET /turns/{id} while its first call waits: 202, both results pending (null)",
    "ok: GET /turns/{id}: 200 for that turn",
    "ok: GET /turns/{id}: results in call order (t2-wait,t2-read)",
    "ok: GET /turns/{id}: every call ok",
    "ok: the waiting bash call ran on once released, and read the note",
    "ok: the read_file after it read the note",
    'ok: malformed, a body that is not JSON: 400 saying "the body is not valid JSON"',
    'ok: malformed, "calls" not an array: 400 saying "\\"calls\\" must be a non-empty JSON array"',
    'ok: malformed, "wait" not true or false: 400 saying "\\"wait\\" must be true or false"',
    'ok: malformed, an unknown field: 400 saying "unknown field(s): colls"',
    'ok: malformed, a call without a name: 400 saying "Call 1 is not a tool call"',
    "ok: malformed, one call id twice: 400 saying \"'m4' appears twice\"",
    "ok: POST /turns without a token: 401 with a Bearer challenge",
    "ok: POST /turns with a wrong token: 401 with a Bearer challenge",
    "ok: GET /turns/{id} without a token: 401 with a Bearer challenge",
    "ok: DELETE /turns/{id} without a token: 401 with a Bearer challenge",
    "ok: no refused turn ran: the workspace holds no refused-*.txt",
]


def _ids_and_contents(answer: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["call_id"], r["status"], r["content"]) for r in answer["results"]]


def test_node_drives_the_http_server_by_mcp_and_by_whole_turns(
    ts_client: Path, redis_url: str, pool: Workers, workspace: Path, tmp_path: Path
) -> None:
    token = "ts-sdk-token-for-the-test"
    (workspace / "notes").mkdir()
    (workspace / "notes" / "from-python.txt").write_text(FILE_TEXT, encoding="utf-8")

    with http_server(redis_url, tmp_path / "mcp-server.log", token) as url:
        checks, got = run_node(ts_client, url, token, "notes/from-python.txt", str(workspace))
    print("\n".join(checks))  # shown when the test fails
    print(json.dumps(got, indent=1, ensure_ascii=False))

    # -- MCP, with the SDK

    # Plain fetch, before the SDK connected: refused without the token and with a wrong one.
    assert got["unauthorized"]["statuses"] == {"none": 401, "wrong": 401}, got["unauthorized"]
    assert got["unauthorized"]["challenge"].startswith('Bearer realm="toolpool"'), got[
        "unauthorized"
    ]

    # The SDK's initialize handshake: a protocol version both speak, with our server.
    assert got["protocolVersion"] in HANDSHAKE_PROTOCOL_VERSIONS, got["protocolVersion"]
    assert got["server"]["name"] == "toolpool", got["server"]

    tools = {tool["name"]: tool["annotations"] for tool in got["tools"]}
    assert len(got["tools"]) == 14
    assert sorted(tools) == sorted(tool.name for tool in builtin_registry())
    assert tools["read_file"]["readOnlyHint"] is True, tools["read_file"]
    assert tools["bash"]["readOnlyHint"] is False, tools["bash"]
    assert tools["bash"]["destructiveHint"] is True, tools["bash"]

    assert got["read_file"] == {"isError": False, "texts": [FILE_TEXT]}, got["read_file"]
    echoed = "exit code: 0\nstdout:\nfrom-node"
    assert got["bash"] == {"isError": False, "texts": [echoed]}, got["bash"]

    # -- /turns, with fetch: every check the script made held, and what it got says so too.
    assert checks == TURN_CHECKS
    turns = got["turns"]
    note = turns["note"]
    assert (workspace / "note.txt").read_text(encoding="utf-8") == note

    # One turn: in call order; the read, the listing and bash ran after the write and saw it.
    assert _ids_and_contents(turns["inOrder"]) == [
        ("t1-write", "ok", turns["inOrder"]["results"][0]["content"]),
        ("t1-read", "ok", note),
        ("t1-list", "ok", "note.txt\nnotes/"),
        ("t1-cat", "ok", f"exit code: 0\nstdout:\n{note.rstrip()}"),
    ]

    # "wait": false answered with the id alone, while the first call waited on a file the
    # script wrote only after that answer; GET /turns/{id} then gave both results.
    later = turns["later"]
    assert later["accepted"] == {"turn_id": later["collected"]["turn_id"]}, later
    assert _ids_and_contents(later["collected"]) == [
        ("t2-wait", "ok", f"exit code: 0\nstdout:\nreleased\n{note.rstrip()}"),
        ("t2-read", "ok", note),
    ]
    assert (workspace / later["release"]).is_file()

    # Malformed bodies: 400, each with a reason; requests without the right token: 401.
    malformed = turns["malformed"]
    assert [(a["status"], bool(a["error"])) for a in malformed.values()] == [(400, True)] * 6, (
        malformed
    )
    refused = turns["unauthorized"]["requests"]
    assert [
        (r["status"], r["challenge"].startswith('Bearer realm="toolpool"'))
        for r in refused.values()
    ] == [(401, True)] * 4, refused
    assert sorted(path.name for path in workspace.iterdir()) == sorted(
        ["note.txt", "notes", later["release"]]
    )


# A host's connection without the token: with an OAuth provider, as Claude Code and the MCP
# Inspector connect (a 401 starts its OAuth discovery and client registration), and without.
HOST_SCRIPT = """
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.argv[2]);
let info;
const redirect = "http://127.0.0.1:9/callback";
const provider = {
  get redirectUrl() { return redirect; },
  get clientMetadata() { return { client_name: "host", redirect_uris: [redirect] }; },
  clientInformation() { return info; },
  saveClientInformation(saved) { info = saved; },
  tokens() { return undefined; },
  saveTokens() {},
  redirectToAuthorization() { throw new Error("sent to an authorization page"); },
  saveCodeVerifier() {},
  codeVerifier() { return "verifier"; },
};
const got = {};
for (const [label, options] of [["oauth", { authProvider: provider }], ["plain", {}]]) {
  const client = new Client({ name: "host", version: "0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(url, options));
    got[label] = "connected";
  } catch (error) {
    got[label] = String(error?.message);
  }
}
console.log(JSON.stringify(got));
"""


def test_a_host_without_the_token_reports_the_servers_reason_not_an_oauth_failure(
    ts_client: Path, redis_url: str, pool: Workers, tmp_path: Path
) -> None:
    script = ts_client.parent / "host_without_token.mjs"
    script.write_text(HOST_SCRIPT)
    with http_server(redis_url, tmp_path / "mcp-server.log", "host-token-for-the-test") as url:
        _, got = run_node(script, url)
    send = "send the header Authorization: Bearer TOKEN, TOKEN being the value of the server's"
    # The OAuth flow finds no OAuth, and the client registration's answer says why.
    assert got["oauth"].startswith("toolpool mcp takes no OAuth"), got["oauth"]
    assert send in got["oauth"], got["oauth"]
    # Without OAuth, the 401's body.
    assert "toolpool mcp needs its bearer token, and this request has none" in got["plain"]
    assert send in got["plain"], got["plain"]
