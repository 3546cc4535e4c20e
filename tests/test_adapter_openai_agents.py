"""The pool's tools in the OpenAI Agents SDK: a real ``Agent`` and ``Runner.run``, real workers.

The model is the SDK's own scripted double (``agents.testing.ScriptedModel``, a ``Model``
subclass: no network). Its first response asks for four calls at once: write ``a.txt``, read
it back, read ``b.txt`` (missing), and read with bad arguments. What the model is sent next
holds every result under its call id, the read seeing the write; the pool's event stream
shows the three calls that ran in one turn. A second response, one call alone, is a second
turn. A pool that cannot be reached answers the model with a message naming the failure, or
fails the run if asked to.
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
from agents import Agent, FunctionTool, RunConfig, Runner, UserError
from agents.testing import ScriptedModel, assistant_message, function_call

from executor import AsyncExecutor, RedisUnavailable, Settings
from executor.adapters.openai_agents import pool_tools
from executor.wire import Keys, read_events
from tests.support.ports import free_port_url
from tests.support.procs import MakeWorkers
from tests.support.waiting import PATIENCE_S
from workers import builtin_registry

pytestmark = pytest.mark.proof  # real worker processes

# Never reached on a working pool: a bound on each call, so a hang fails the test.
TURN_TIMEOUT_S = PATIENCE_S
NO_TRACES = RunConfig(tracing_disabled=True)


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Settings(redis_url=redis_url, workspace=workspace)


def outputs(model: ScriptedModel, request: int) -> dict[str, str]:
    """The tool outputs the model was sent in its ``request``-th request, by call id."""
    items: Sequence[Any] = model.calls[request].input
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def turns_by_call(client: redis.Redis, settings: Settings) -> dict[str, set[str]]:
    """The pool turn(s) each framework call id ran in, read from the pool's events."""
    turns: dict[str, set[str]] = {}
    for _id, event in read_events(client, Keys(settings.redis.key_prefix), since="-"):
        if event.event == "tool_result" and event.turn_id:
            # A pool call id is the framework's call id and "-" and 12 hex digits.
            turns.setdefault(event.call_id.rsplit("-", 1)[0], set()).add(event.turn_id)
    return turns


def test_a_response_s_calls_run_as_one_turn_and_reach_the_model(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    make_workers(settings).start(2)
    model = ScriptedModel(
        [
            [
                function_call("write_file", {"path": "a.txt", "content": "alpha\n"}, call_id="w-a"),
                function_call("read_file", {"path": "a.txt"}, call_id="r-a"),
                function_call("read_file", {"path": "b.txt"}, call_id="r-b"),
                function_call("read_file", {"path": "a.txt", "limit": 0}, call_id="r-bad"),
            ],
            [function_call("read_file", {"path": "a.txt"}, call_id="r-again")],
            [assistant_message("done")],
        ]
    )

    async def main() -> str:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            tools = await pool_tools(ex, timeout=TURN_TIMEOUT_S)
            agent = Agent(name="pooled", instructions="Use the tools.", model=model, tools=tools)
            result = await Runner.run(agent, "Write a.txt, read it.", run_config=NO_TRACES)
            return str(result.final_output)

    assert asyncio.run(main()) == "done"
    model.assert_complete()

    # The model was offered the pool's tools, with the pool's own schemas.
    offered = {tool.name: tool for tool in model.calls[0].tools}
    served = {info.name: info for info in builtin_registry()}
    assert set(served) <= set(offered)
    read_file = offered["read_file"]
    assert isinstance(read_file, FunctionTool)
    assert read_file.params_json_schema == served["read_file"].parameters
    assert read_file.description == served["read_file"].description

    # Every result of the first response reached the next request, under its call id: the
    # read saw the write, and each error is text naming the problem.
    answered = outputs(model, 1)
    assert set(answered) == {"w-a", "r-a", "r-b", "r-bad"}
    assert answered["w-a"] == "Successfully wrote 6 bytes to a.txt"
    assert answered["r-a"] == "alpha\n"
    assert "b.txt" in answered["r-b"]
    assert "not found" in answered["r-b"].lower()
    assert answered["r-bad"].startswith("Invalid arguments for tool 'read_file'")
    assert "limit" in answered["r-bad"]
    # The run went on: the call alone in the second response was answered too.
    assert outputs(model, 2)["r-again"] == "alpha\n"

    # The pool's events: the three calls of the first response that ran (the bad one was
    # answered without running) share one turn; the second response's call is another.
    turns = turns_by_call(client, settings)
    first_turn = turns["w-a"]
    assert len(first_turn) == 1
    assert turns["r-a"] == turns["r-b"] == first_turn
    assert len(turns["r-again"]) == 1
    assert turns["r-again"] != first_turn
    assert "r-bad" not in turns


def test_names_keeps_the_tools_asked_for(settings: Settings, make_workers: MakeWorkers) -> None:
    make_workers(settings).start(1)

    async def main() -> None:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            tools = await pool_tools(ex, names=["read_file", "calculator"])
            assert sorted(tool.name for tool in tools) == ["calculator", "read_file"]
            for tool in tools:
                assert isinstance(tool, FunctionTool)
                assert tool.strict_json_schema is False
            assert await pool_tools(ex, names=[]) == []

            with pytest.raises(ValueError, match="no tool named 'read_files'") as unknown:
                await pool_tools(ex, names=["read_file", "read_files"])
            # The tools the pool does serve are listed.
            assert "tools served: bash, calculator, " in str(unknown.value)

            with pytest.raises(TypeError, match="list of tool names"):
                await pool_tools(ex, names="read_file")

    asyncio.run(main())


def unreachable_pool() -> AsyncExecutor:
    """An executor whose tools are known (a local registry) but whose Redis is gone."""
    return AsyncExecutor(settings=Settings(redis_url=free_port_url()), registry=builtin_registry())


def test_an_unreachable_pool_is_told_to_the_model_and_the_run_goes_on() -> None:
    model = ScriptedModel(
        [
            [function_call("read_file", {"path": "a.txt"}, call_id="r-a")],
            [assistant_message("gave up")],
        ]
    )

    async def main() -> str:
        async with unreachable_pool() as ex:
            tools = await pool_tools(ex, names=["read_file"])
            agent = Agent(name="pooled", model=model, tools=tools)
            result = await Runner.run(agent, "Read a.txt.", run_config=NO_TRACES)
            return str(result.final_output)

    assert asyncio.run(main()) == "gave up"
    told = outputs(model, 1)["r-a"]
    assert told.startswith("The call to read_file got no result: the tool pool failed")
    assert "RedisUnavailable" in told
    assert "could not be reached" in told


def test_an_unreachable_pool_fails_the_run_without_a_failure_function() -> None:
    model = ScriptedModel([[function_call("read_file", {"path": "a.txt"}, call_id="r-a")]])

    async def main() -> None:
        async with unreachable_pool() as ex:
            tools = await pool_tools(ex, names=["read_file"], failure_error_function=None)
            agent = Agent(name="pooled", model=model, tools=tools)
            await Runner.run(agent, "Read a.txt.", run_config=NO_TRACES)

    with pytest.raises(UserError, match="Error running tool read_file") as failed:
        asyncio.run(main())
    assert isinstance(failed.value.__cause__, RedisUnavailable)


def test_without_the_sdk_the_import_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)  # None in sys.modules: import fails
    monkeypatch.delitem(sys.modules, "executor.adapters.openai_agents")
    with pytest.raises(ImportError, match=r"pip install 'toolpool\[openai-agents\]'"):
        importlib.import_module("executor.adapters.openai_agents")
