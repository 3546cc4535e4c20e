"""Tools are discovered, not imported: workers publish what they serve; clients read it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st
from rq import Worker

from executor import (
    ErrorType,
    Executor,
    InvalidArgumentsError,
    NoWorkerError,
    Settings,
    ToolCall,
    ToolInfo,
    ToolResult,
    ToolStatus,
)
from executor.cli import main
from executor.wire import (
    Keys,
    WorkerCatalog,
    publish_catalog,
    read_catalog,
    read_entries,
    withdraw_catalog,
)
from tests.support.procs import python_path_env, running_pool
from tests.support.waiting import wait_for
from workers import builtin_registry
from workers.pool._pool import WorkerPool

# A module no process but the workers imports: its name is unique to this file.
_CUSTOM = textwrap.dedent(
    '''
    from typing import Annotated

    from pydantic import Field

    from executor import ToolRegistry

    registry = ToolRegistry()


    @registry.tool(concurrency_safe=True, read_only=True)
    def shout(
        text: Annotated[str, Field(description="What to shout.")],
        times: Annotated[int, Field(ge=1, le=5, description="How often.")] = 1,
    ) -> str:
        """Shout the text, in capitals, a few times."""
        return " ".join([text.upper()] * times)
    '''
)
_MODULE = "catalog_custom_tools_only_on_workers"


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Settings(redis_url=redis_url, workspace=workspace)


@pytest.fixture
def custom_pool(settings: Settings, tmp_path: Path) -> Iterator[WorkerPool]:
    """Two workers that serve the built-ins plus ``shout``, declared only on their side."""
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{_MODULE}.py").write_text(_CUSTOM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    with running_pool(settings, 2, tool_specs=[f"{_MODULE}:registry"], env=env) as pool:
        yield pool


def _queued_jobs(client: redis.Redis) -> int:
    return len(client.keys("rq:job:*"))


@pytest.mark.proof  # real worker processes
def test_a_tool_declared_only_on_the_workers_is_listed_checked_and_run(
    settings: Settings, custom_pool: WorkerPool, client: redis.Redis
) -> None:
    assert _MODULE not in sys.modules
    with Executor(settings=settings) as executor:
        catalog = executor.catalog()
        assert catalog.workers == 2
        assert len(catalog.versions) == 1
        shout = next(info for info in executor.tools() if info.name == "shout")
        assert shout.is_concurrency_safe
        assert shout.is_read_only
        assert shout.parameters["properties"]["times"]["maximum"] == 5

        [result] = executor.run([ToolCall(name="shout", arguments={"text": "hi", "times": 2})])
        assert result.status is ToolStatus.OK, result.content
        assert result.content == "HI HI"
    assert _MODULE not in sys.modules


@pytest.mark.proof  # real worker processes
def test_unknown_tools_and_bad_arguments_are_answered_without_a_round_trip(
    settings: Settings, custom_pool: WorkerPool, client: redis.Redis
) -> None:
    calls = [
        ToolCall(id="typo", name="shuot", arguments={"text": "x"}),
        ToolCall(id="bad", name="shout", arguments={"text": "x", "times": 9, "loud": True}),
    ]
    with Executor(settings=settings) as executor:
        unknown, invalid = executor.run(calls)
    assert unknown.error_type is ErrorType.UNKNOWN_TOOL
    assert "'toolpool.default'" in unknown.content
    assert "shout" in unknown.content
    assert invalid.error_type is ErrorType.INVALID_ARGUMENTS
    assert "times" in invalid.content
    assert "loud" in invalid.content
    assert _queued_jobs(client) == 0, "a refused call must not reach the queue"


def test_with_no_live_worker_submit_says_so_at_once_and_names_the_queue(
    settings: Settings, client: redis.Redis
) -> None:
    with Executor(settings=settings) as executor, pytest.raises(NoWorkerError) as raised:
        executor.submit([ToolCall(name="read_file", arguments={"path": "a"})])
    assert "'toolpool.default'" in str(raised.value)
    assert _queued_jobs(client) == 0


@pytest.mark.proof  # real worker processes
def test_a_client_may_wait_for_the_first_worker(settings: Settings, client: redis.Redis) -> None:
    (Path(settings.worker.workspace) / "a.txt").write_text("waited\n")
    results: list[ToolResult] = []
    with Executor(settings=settings, wait_for_workers=120) as executor:
        waiting = threading.Thread(
            target=lambda: results.extend(
                executor.run([ToolCall(name="read_file", arguments={"path": "a.txt"})])
            )
        )
        waiting.start()
        # The client has looked once and found no worker: it is waiting now.
        wait_for(lambda: bool(executor._routes.catalogs), "the client's first catalog read")
        pool = WorkerPool(str(settings.redis.url), settings, workers=1, grace=10.0)
        pool.start()
        try:
            waiting.join(timeout=120)
        finally:
            pool.stop(grace=10.0)
    assert not waiting.is_alive()
    assert [r.content for r in results] == ["waited\n"]


@pytest.mark.proof  # real worker processes
def test_a_stopped_pool_withdraws_its_catalog(settings: Settings, client: redis.Redis) -> None:
    pool = WorkerPool(str(settings.redis.url), settings, workers=1, grace=10.0)
    pool.start()
    try:
        pool.wait_ready()
        keys = Keys(settings.redis.key_prefix)
        wait_for(
            lambda: read_catalog(client, keys, "toolpool.default").workers == 1,
            "the worker's catalog",
        )
    finally:
        pool.stop(grace=10.0)
    assert read_entries(client, Keys()) == []


_STOPPED_WHILE_STARTING = textwrap.dedent("""
    import os, signal, sys
    from executor import Settings
    from workers import builtin_registry
    from executor._rq import worker as _rq_worker
    from workers.pool._process import run_worker

    register_birth = _rq_worker.ToolpoolWorker.register_birth

    def registered_then_stopped(self, *args, **kwargs):
        # The moment a pool sees the worker ready and may stop it: RQ has not yet entered
        # its loop.
        register_birth(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    _rq_worker.ToolpoolWorker.register_birth = registered_then_stopped
    worked = run_worker(sys.argv[1], Settings.from_env(), builtin_registry(), name="early")
    print("returned", worked)
""")


@pytest.mark.proof  # a real worker process
def test_a_worker_stopped_while_starting_still_withdraws_its_catalog(
    settings: Settings, client: redis.Redis, tmp_path: Path
) -> None:
    env = python_path_env({k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")})
    env["TOOLPOOL_WORKSPACE"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _STOPPED_WHILE_STARTING, str(settings.redis.url)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "returned False" in done.stdout
    assert read_entries(client, Keys()) == []
    assert Worker.all(connection=client) == []


def _entry(worker: str, names: list[str], *, queue: str = "toolpool.default") -> WorkerCatalog:
    tools = [
        ToolInfo(name=n, description=f"{n} tool", parameters={"type": "object"}, timeout=30.0)
        for n in names
    ]
    return WorkerCatalog.build(worker, queue, tools, host="h", pid=1)


def test_the_catalog_merges_live_workers_per_queue_and_drops_expired_ones(
    client: redis.Redis,
) -> None:
    keys = Keys()
    publish_catalog(client, keys, _entry("w1", ["read_file", "grep"]))
    publish_catalog(client, keys, _entry("w2", ["read_file"]))
    publish_catalog(client, keys, _entry("w3", ["bash"], queue="toolpool.other"))

    catalog = read_catalog(client, keys, "toolpool.default")
    assert catalog.workers == 2
    assert [t.name for t in catalog.tools()] == ["grep", "read_file"]
    assert (catalog.serving("read_file"), catalog.serving("grep")) == (2, 1)
    assert len(catalog.versions) == 2, "workers serving different tools disagree"
    assert client.ttl(keys.catalog("w1")) > 0, "an entry must expire unless refreshed"

    client.delete(keys.catalog("w2"))  # as its expiry would
    assert read_catalog(client, keys, "toolpool.default").workers == 1
    assert client.sismember(keys.catalog_index, "w2") == 0

    withdraw_catalog(client, keys, "w1")
    assert [e.worker for e in read_entries(client, keys)] == ["w3"]


@pytest.mark.proof  # real worker processes
def test_cli_tools_shows_the_live_pool(
    settings: Settings, custom_pool: WorkerPool, redis_url: str
) -> None:
    runner = CliRunner()
    shown = runner.invoke(main, ["tools", "--redis", redis_url])
    assert shown.exit_code == 0, shown.output
    assert "2 live workers" in shown.output
    assert any(line.startswith("shout ") for line in shown.output.splitlines())

    exported = runner.invoke(main, ["tools", "--redis", redis_url, "--format", "anthropic"])
    assert exported.exit_code == 0, exported.output
    assert '"name": "shout"' in exported.output


def test_cli_tools_without_workers_says_what_to_start(redis_url: str) -> None:
    shown = CliRunner().invoke(main, ["tools", "--redis", redis_url])
    assert shown.exit_code == 1
    assert "No live worker serves queue 'toolpool.default'" in shown.output
    assert "toolpool worker" in shown.output


def _value(schema: dict[str, object]) -> st.SearchStrategy[object]:
    """Values a model might send for a property: right, convertible, or wrong."""
    kind = schema.get("type")
    loose = st.sampled_from(["7", "-3", "1.5", "true", "no", "x", "", " 2 ", None, 1.0, 0])
    if kind == "integer":
        return st.integers(-3, 3000) | st.integers(-3, 3000).map(str) | loose
    if kind == "number":
        return st.floats(-5, 5, allow_nan=False) | st.integers(-3, 9).map(str) | loose
    if kind == "boolean":
        return st.booleans() | st.sampled_from(["true", "false", "yes", "0", 1, 0]) | loose
    if kind == "array":
        return st.lists(st.text(max_size=4), max_size=3) | loose
    return st.text(max_size=6) | loose


@st.composite
def _arguments(draw: st.DrawFn, schema: dict[str, object]) -> dict[str, object]:
    properties: dict[str, dict[str, object]] = schema.get("properties", {})  # type: ignore[assignment]
    required = set(schema.get("required", []))  # type: ignore[call-overload]
    chosen = {name for name in properties if name in required or draw(st.booleans())}
    arguments = {name: draw(_value(properties[name])) for name in sorted(chosen)}
    if draw(st.integers(0, 9)) == 0:
        arguments["extra"] = 1
    return arguments


@settings_(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_client_check_never_refuses_what_the_worker_accepts(data: st.DataObject) -> None:
    registry = builtin_registry()
    tool = registry.get(data.draw(st.sampled_from(registry.names())))
    arguments = data.draw(_arguments(tool.parameters))
    try:
        tool.validate(arguments)
    except InvalidArgumentsError:
        return  # the worker refuses: the client may refuse too, or leave it to the worker
    ToolInfo.of(tool).validate_arguments(arguments)
