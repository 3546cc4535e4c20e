"""``PoolToolset`` under a real ``pydantic_ai.Agent``, on a real redis-server and real workers.

The model is scripted (``FunctionModel``): it answers with set tool calls, then with text once
it has seen their returns, and keeps every request it was sent. What the model saw is read
from those requests; which pool turn ran each call is read from the pool's event stream,
independently of the adapter. Covered: one response is one turn (read-after-write holds), the
next response another; error results and bad arguments reach the model and the run goes on;
``names``; concurrent runs keep their own turns; no worker or no Redis is a clear error.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from executor import AsyncExecutor, NoWorkerError, RedisUnavailable, Settings
from executor.adapters.pydantic_ai import PoolToolset
from executor.wire import Keys, read_events
from tests.support.ports import free_port_url
from tests.support.procs import MakeWorkers
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.proof  # real worker processes

DONE = "done"


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Settings(redis_url=redis_url, workspace=workspace)


class Script:
    """A model that sends each response of ``responses`` in turn, then ``DONE``; it keeps the
    requests it was sent and the tools it was offered."""

    def __init__(self, *responses: Sequence[ToolCallPart]) -> None:
        self.responses = list(responses)
        self.seen: list[list[ModelMessage]] = []
        self.offered: list[list[str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        self.offered.append([tool.name for tool in info.function_tools])
        step = len(self.seen) - 1
        if step < len(self.responses):
            return ModelResponse(parts=list(self.responses[step]))
        return ModelResponse(parts=[TextPart(DONE)])

    def returns(self, request: int) -> dict[str, ToolReturnPart]:
        """The tool returns in the last message of request ``request``, by tool call id."""
        last = self.seen[request][-1]
        assert isinstance(last, ModelRequest)
        return {p.tool_call_id: p for p in last.parts if isinstance(p, ToolReturnPart)}


def call(tool: str, call_id: str, args: dict[str, Any] | str) -> ToolCallPart:
    return ToolCallPart(tool_name=tool, args=args, tool_call_id=call_id)


def run_agent(settings: Settings, script: Script, **options: Any) -> str:
    """Run an agent on ``script`` with a ``PoolToolset`` (``options``); its text output."""

    async def main() -> str:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            toolset = PoolToolset(ex, timeout=PATIENCE_S, **options)
            agent = Agent(FunctionModel(script), toolsets=[toolset])
            result = await asyncio.wait_for(agent.run("go"), PATIENCE_S * 2)
            return result.output

    return asyncio.run(main())


def turns_by_call(client: redis.Redis, settings: Settings) -> dict[str, str]:
    """The pool turn each started call ran in, by the model's call id (the pool's id is it
    plus ``-`` and 12 hex digits)."""
    started = [
        e
        for _, e in read_events(client, Keys(settings.redis.key_prefix))
        if e.event == "tool_execution_started"
    ]
    return {e.call_id.rsplit("-", 1)[0]: e.turn_id for e in started}


def test_one_response_is_one_turn_and_the_model_sees_each_return(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    make_workers(settings).start(2)
    script = Script(
        [
            call("write_file", "w1", {"path": "a.txt", "content": "hello from the pool\n"}),
            call("read_file", "r1", {"path": "a.txt"}),
            call("read_file", "r2", {"path": "b.txt"}),
        ],
        [call("read_file", "r3", {"path": "a.txt"})],
    )

    assert run_agent(settings, script) == DONE

    # (1) Each return carries its call's id and content; the read sees the write before it.
    first = script.returns(1)
    assert sorted(first) == ["r1", "r2", "w1"]
    assert [first[i].outcome for i in ("w1", "r1", "r2")] == ["success", "success", "failed"]
    assert "hello from the pool" in str(first["r1"].content)
    assert "b.txt" in str(first["r2"].content)
    assert "not found" in str(first["r2"].content).lower()
    assert str(first["w1"].metadata["toolpool_call_id"]).startswith("w1-")
    # (2) The three calls of the first response ran in one pool turn, (4) the next one in
    # another; (6) that single call worked.
    turns = turns_by_call(client, settings)
    assert sorted(turns) == ["r1", "r2", "r3", "w1"]
    assert turns["w1"] == turns["r1"] == turns["r2"]
    assert turns["r3"] != turns["w1"]
    second = script.returns(2)
    assert list(second) == ["r3"]
    assert second["r3"].outcome == "success"
    assert "hello from the pool" in str(second["r3"].content)
    # (3) The missing file's error reached the model and the run went on to its answer.
    assert len(script.seen) == 3


def test_bad_arguments_reach_the_model_and_the_run_goes_on(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(1)
    script = Script(
        [
            call("read_file", "missing", {}),
            call("read_file", "typed", {"path": "a.txt", "limit": "many"}),
            call("read_file", "array", "[1, 2]"),
        ],
    )

    assert run_agent(settings, script) == DONE

    returns = script.returns(1)
    assert [returns[i].outcome for i in ("missing", "typed", "array")] == ["failed"] * 3
    texts = {i: str(part.content) for i, part in returns.items()}
    assert "Invalid arguments for tool 'read_file'" in texts["missing"]
    assert "path" in texts["missing"]
    assert "limit" in texts["typed"]
    assert "must be a JSON object" in texts["array"]


def test_names_offers_only_those_tools_and_refuses_an_unknown_one(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(1)
    script = Script([call("read_file", "r1", {"path": "nothing.txt"})])
    assert run_agent(settings, script, names=["read_file", "echo"]) == DONE
    assert script.offered[0] == ["read_file", "echo"]

    with pytest.raises(ValueError, match=r"'nope'.*tools served: .*read_file, .*write_file"):
        run_agent(settings, Script(), names=["read_file", "nope"])

    async def by_string() -> None:
        async with AsyncExecutor(settings=settings) as ex:
            PoolToolset(ex, names="read_file")

    with pytest.raises(TypeError, match="list of tool names"):
        asyncio.run(by_string())


def test_concurrent_runs_of_one_toolset_never_share_a_turn(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    make_workers(settings).start(1)
    scripts = [Script([call("read_file", f"run{i}", {"path": "a.txt"})]) for i in range(2)]

    async def main() -> list[str]:
        async with AsyncExecutor(settings=settings) as ex:
            toolset = PoolToolset(ex, timeout=PATIENCE_S)
            agents = [Agent(FunctionModel(script), toolsets=[toolset]) for script in scripts]
            results = await asyncio.gather(*(agent.run("go") for agent in agents))
            return [result.output for result in results]

    assert asyncio.run(main()) == [DONE, DONE]
    turns = turns_by_call(client, settings)
    assert sorted(turns) == ["run0", "run1"]
    assert turns["run0"] != turns["run1"]


def test_an_unreachable_pool_is_a_clear_error(settings: Settings) -> None:
    # No worker: the run stops at its first step, before the model is asked anything.
    script = Script()
    with pytest.raises(NoWorkerError, match="No live worker"):
        run_agent(settings, script)
    assert script.seen == []
    with pytest.raises(RedisUnavailable, match="could not be reached"):
        run_agent(Settings(redis_url=free_port_url(), workspace=settings.worker.workspace), script)


def test_without_the_extra_the_import_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_ai.toolsets", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "executor.adapters.pydantic_ai")
    with pytest.raises(ImportError, match=r"pip install 'toolpool\[pydantic-ai\]'"):
        importlib.import_module("executor.adapters.pydantic_ai")
