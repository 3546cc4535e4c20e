"""Property-based fuzzing of tool calls through two real worker processes.

Hypothesis draws turns of random calls: mostly the nine tools, some unknown names; argument
dicts with right and wrong types, missing and extra keys, odd unicode, NULs, and paths that try
to leave the workspace (``..``, absolute paths, a link to a sibling folder, ``/proc``). The
orchestrator's registry has no argument checks, so every call reaches a worker. After each
turn: every call has exactly one result, in order; each result is ok or a named, expected
error; no result is longer than its cap plus the truncation marker; both workers are the
processes we started; and the sibling folder is byte for byte as it was.

The suite runs about ``DEFAULT_CALLS`` calls; ``TOOLPOOL_FUZZ_CALLS=2000`` runs a long version.
Where bash's sandbox works, the workers require it and bash also gets hostile commands (writes
to the sibling folder and /etc, ``rm -rf ~``, ``kill -9 -1``, a fork bomb, daemons); without
it, bash only gets harmless ones (unconfined, a command could change any file).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from executor import ErrorType, Settings, ToolRegistry, ToolResult, ToolStatus
from executor._texts import truncation_marker as marker
from executor.client import Executor
from tests.support import dist_tools
from tests.support.pids import sleep_marker, survivors
from tests.support.procs import Workers
from workers._embedded_redis import RedisServer
from workers.tools._sandbox import probe
from workers.tools._shell_settings import BashSettings
from workers.tools.weather import WeatherSettings

# A process-heavy proof (random turns through worker processes): `scripts/test --fast` leaves
# it out.
pytestmark = pytest.mark.proof

DEFAULT_CALLS = 200
FUZZ_CALLS = int(os.environ.get("TOOLPOOL_FUZZ_CALLS", DEFAULT_CALLS))
MAX_TURN = 8
# What a hostile call may earn; anything else (unexpected_error above all) is a defect.
EXPECTED_ERRORS = {ErrorType.INVALID_ARGUMENTS, ErrorType.UNKNOWN_TOOL, ErrorType.TOOL_ERROR}
# And a bash command past its own time limit (`sleep 5` against at most 3 s, a fork bomb held
# at its process cap): stopped by the tool, which says so. A timeout of any other words (the
# turn's, the worker's) would be a call the pool lost or could not stop: a defect.
BASH_TIMED_OUT = "Command timed out after "
UNKNOWN_NAMES = ("no_such_tool", "Read_File", "grep2", "rm", "__import__", "Bash")
TOOLS = {t.name: t for t in dist_tools.registry()}
NINE = (
    "get_weather",
    "calculator",
    "read_file",
    "write_file",
    "list_directory",
    "edit_file",
    "glob",
    "grep",
    "bash",
)
# The marker's longest form (with a note of where the full output is kept) fits in this.
MARKER_ALLOWANCE = len(marker(10**9, 10**9, "x" * 120))


@dataclass
class Fuzzing:
    """The module's workers, workspace, sibling folder, and what has been run so far."""

    settings: Settings
    workers: Workers
    pids: list[int]
    outside: Path
    snapshot: dict[str, str]
    calls: int = 0
    seconds: float = 0.0
    seen: dict[str, int] = field(default_factory=dict)


def _snapshot(folder: Path) -> dict[str, str]:
    """Each path under ``folder`` (links not followed) and a digest of what it holds."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            found[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path)] = "dir"
    return found


def _loose_registry() -> ToolRegistry:
    stand_ins = [dataclasses.replace(dist_tools.ghost, name=name) for name in UNKNOWN_NAMES]
    return ToolRegistry(
        dataclasses.replace(t, validator=dict) for t in [*TOOLS.values(), *stand_ins]
    )


@pytest.fixture(scope="module")
def fuzzing(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fuzzing]:
    base = tmp_path_factory.mktemp("fuzz")
    root, outside = base / "ws", base / "outside"
    (root / "dir").mkdir(parents=True)
    outside.mkdir()
    (root / "a.txt").write_text("alpha\nbeta\n")
    (root / "dir" / "b.txt").write_text("gamma\n")
    (outside / "secret.txt").write_text("do not touch\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "x.txt").write_text("x\n")
    os.symlink(outside, root / "link_out")
    os.symlink(outside / "secret.txt", root / "secret_link")
    settings_ = Settings(
        redis_url=redis_server.url,
        key_prefix=f"fuzz-{uuid.uuid4().hex[:8]}",
        workspace=root,
        lock_lease_ms=5000,
        tools=[
            BashSettings(
                default_timeout=3.0,
                max_timeout=3.0,
                sandbox="required" if SANDBOXED else "auto",
                max_processes=64,
            ),
            # Nothing listens on port 9 (discard): get_weather fails at once, offline.
            WeatherSettings(
                weather_url="http://127.0.0.1:9",
                geocoding_url="http://127.0.0.1:9",
                http_timeout=1.0,
            ),
        ],
    )
    workers = Workers(settings_, base / "logs")
    try:
        started = workers.start(2)
        yield Fuzzing(settings_, workers, [w.pid for w in started], outside, _snapshot(outside))
    finally:
        workers.stop_all()


# ----------------------------------------------------------------------------- strategies

_ODD = st.text(
    st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Z", "M", "Cc", "Cf", "Co")),
    max_size=40,
)
_PATHS = st.sampled_from(
    [
        "a.txt",
        "dir",
        "dir/b.txt",
        "new.txt",
        "dir/new/c.txt",
        ".",
        "",
        "..",
        "../outside",
        "../outside/secret.txt",
        "/etc/passwd",
        "/proc/self/environ",
        "/proc/self/cwd",
        "~",
        "link_out",
        "link_out/secret.txt",
        "link_out/../../outside/secret.txt",
        "secret_link",
        "dir/../../outside",
        "a.txt\x00.png",
        "//",
        "a.txt/",
        "./dir/./b.txt",
    ]
)
_PATH_LIKE = st.one_of(_PATHS, _PATHS, _ODD)
_WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
# Only a sandboxed bash may be given hostile commands: unconfined, they would do the harm.
SANDBOXED = probe(False).bwrap is not None
# The daemons the hostile commands start: none may outlive its call.
_DAEMON = sleep_marker()
_HOSTILE = [
    "echo pwned > ../outside/secret.txt",
    "rm -rf ../outside link_out/sub",
    "cat ../outside/secret.txt",
    "echo pwned > /etc/toolpool-fuzz",
    "rm -rf ~ /root",
    "kill -9 -1",
    f"setsid sleep {_DAEMON} & echo daemon",
    f"( ( sleep {_DAEMON} & ) & )",
    ":(){ :|:& };:",
    "cat /proc/1/environ | tr '\\0' '\\n'",
]
_BASH = st.one_of(
    st.sampled_from(
        [
            "echo hi",
            "ls -la",
            "cat a.txt",
            "pwd",
            "true",
            "exit 3",
            "echo err >&2",
            "printf 'x%.0s' $(seq 5000)",
            "echo made > made.txt",
            "sleep 5",
            "head -c 100000 /dev/zero | tr '\\0' y",
            *(_HOSTILE if SANDBOXED else []),
        ]
    ),
    _ODD.map(lambda text: "echo " + shlex.quote(text)),
)
_EXPRESSIONS = st.one_of(
    st.sampled_from(
        [
            "1+1",
            "2**10",
            "9**9**9",
            "sqrt(-1)",
            "1/0",
            "factorial(5000)",
            "__import__('os')",
            "(" * 300,
            "max()",
            "pi*e",
            "10**-400",
        ]
    ),
    _ODD,
)
_PATTERNS = st.one_of(st.sampled_from(["alpha", "a|b", "(", "[", "**/*.txt", "{a,b}*", "*"]), _ODD)

_RIGHT: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "get_weather": {"location": _ODD, "units": st.sampled_from(["celsius", "fahrenheit", "K"])},
    "calculator": {"expression": _EXPRESSIONS},
    "read_file": {"path": _PATH_LIKE, "offset": st.integers(-2, 5), "limit": st.integers(-1, 3000)},
    "write_file": {"path": _PATH_LIKE, "content": _ODD},
    "list_directory": {"path": _PATH_LIKE},
    "edit_file": {
        "path": _PATH_LIKE,
        "old_string": _ODD,
        "new_string": _ODD,
        "replace_all": st.booleans(),
    },
    "glob": {"pattern": _PATTERNS, "path": _PATH_LIKE},
    "grep": {"pattern": _PATTERNS, "path": _PATH_LIKE},
    "bash": {"command": _BASH, "timeout": st.integers(1, 3)},
}


@st.composite
def _arguments(draw: st.DrawFn, name: str) -> dict[str, Any]:
    parameters = _RIGHT.get(name, {})
    arguments: dict[str, Any] = {}
    for key, right in parameters.items():
        choice = draw(st.sampled_from(["right"] * 12 + ["wrong", "missing"]))
        if choice == "right":
            arguments[key] = draw(right)
        elif choice == "wrong":
            arguments[key] = draw(_WRONG)
    if draw(st.integers(0, 9)) == 0:
        arguments[draw(st.text(min_size=1, max_size=8))] = draw(st.one_of(_ODD, _WRONG))
    if name == "bash" and not isinstance(arguments.get("command"), str):
        arguments["command"] = "true"  # wrong types are fine; a random command is not
    return arguments


@st.composite
def _call(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(NINE * 4 + UNKNOWN_NAMES))
    return {"id": f"f-{uuid.uuid4().hex[:12]}", "name": name, "arguments": draw(_arguments(name))}


_TURNS = st.lists(_call(), min_size=1, max_size=MAX_TURN)
# Hypothesis favours short lists: turns average about 3.5 calls; a few more turns than needed.
_EXAMPLES = max(1, round(FUZZ_CALLS / 3))


# ---------------------------------------------------------------------------------- the test


@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(turn=_TURNS)
# Drawn in some runs only, so always run once: the tool's own time limit is an expected answer.
@example(turn=[{"id": "f-sleep-past-limit", "name": "bash", "arguments": {"command": "sleep 5"}}])
def test_random_calls_get_one_expected_result_each_and_harm_nothing(
    fuzzing: Fuzzing, turn: list[dict[str, Any]]
) -> None:
    started = time.monotonic()
    with Executor(settings=fuzzing.settings, registry=_loose_registry()) as executor:
        results = executor.run(turn, timeout=120)
    fuzzing.seconds += time.monotonic() - started
    fuzzing.calls += len(turn)

    assert [r.call_id for r in results] == [c["id"] for c in turn]
    policy = fuzzing.settings.truncation
    for call, result in zip(turn, results, strict=True):
        kind = result.error_type.value if result.error_type else "ok"
        fuzzing.seen[kind] = fuzzing.seen.get(kind, 0) + 1
        if result.status is ToolStatus.ERROR:
            assert _expected_error(call, result), (call, result.content)
        tool = TOOLS.get(call["name"])
        cap = policy.limit_for(tool.max_result_chars if tool else None)
        assert len(result.content) <= cap + MARKER_ALLOWANCE, (call, len(result.content))
    assert [w.pid for w in fuzzing.workers.started] == fuzzing.pids
    assert all(w.alive() for w in fuzzing.workers.started), fuzzing.workers.diagnosis()
    assert _snapshot(fuzzing.outside) == fuzzing.snapshot
    assert not Path("/etc/toolpool-fuzz").exists()
    assert survivors(_DAEMON) == []


def _expected_error(call: dict[str, Any], result: ToolResult) -> bool:
    """Whether an error result is one a random or hostile call may earn."""
    if result.error_type in EXPECTED_ERRORS:
        return True
    timed_out = result.error_type is ErrorType.TIMEOUT
    return timed_out and call["name"] == "bash" and result.content.startswith(BASH_TIMED_OUT)


def test_fuzzing_ran_the_calls_it_was_asked_for(fuzzing: Fuzzing) -> None:
    # Runs after the fuzz test (file order): proof that the calls went through, and figures.
    print(f"fuzz: {fuzzing.calls} calls in {fuzzing.seconds:.1f} s; results {fuzzing.seen}")
    assert fuzzing.calls >= FUZZ_CALLS * 0.9
    assert fuzzing.seen.get("ok", 0) > 0
    assert fuzzing.seen.get("invalid_arguments", 0) > 0
