"""The LangGraph adapter in a real ``StateGraph`` with LangGraph's real ``ToolNode``, on a real
redis-server and real workers.

The chat model is scripted (``Script``, a ``BaseChatModel``): it answers with set tool calls,
then with text once it has seen their results, and keeps every list of messages it was sent.
What the model saw is read from those; which pool turn ran each call is read from the pool's
event stream, independently of the adapter. Covered: one ``AIMessage`` is one turn, in the
model's order (a read after a write sees it; a read before a write does not), the next
message another; error results and bad arguments are ``status="error"`` messages and the
graph goes on; ``names``; concurrent runs keep their own turns; an unreachable pool and a
synchronous run are clear errors.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Send

from executor import AsyncExecutor, RedisUnavailable, Settings
from executor.adapters.langgraph import PoolTool, pool_tool_node, pool_tools
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


class Script(BaseChatModel):
    """A chat model that sends each of ``responses`` in turn (as one ``AIMessage`` of tool
    calls), then ``DONE``; it keeps the messages it was sent."""

    responses: list[list[ToolCall]]
    seen: list[list[BaseMessage]] = []  # noqa: RUF012 (pydantic copies it per instance)

    @property
    def _llm_type(self) -> str:
        return "toolpool-script"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        step = len(self.seen) - 1
        if step < len(self.responses):
            message = AIMessage(content="", tool_calls=self.responses[step])
        else:
            message = AIMessage(content=DONE)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def results(self, request: int) -> dict[str, ToolMessage]:
        """The tool messages sent with request ``request`` (after its last AIMessage), by
        tool call id, in the order the graph added them."""
        messages = self.seen[request]
        last_ai = max(i for i, m in enumerate(messages) if isinstance(m, AIMessage))
        return {m.tool_call_id: m for m in messages[last_ai + 1 :] if isinstance(m, ToolMessage)}


def call(tool: str, call_id: str, args: dict[str, Any]) -> ToolCall:
    return ToolCall(name=tool, args=args, id=call_id, type="tool_call")


def send_each_call(state: MessagesState) -> list[Send] | str:
    """The tool calls of the last message as one ``ToolNode`` task each, as ``create_agent``
    sends them."""
    last = state["messages"][-1]
    if not isinstance(last, AIMessage) or not last.tool_calls:
        return END
    return [
        Send("tools", {"__type": "tool_call_with_context", "tool_call": c, "state": state})
        for c in last.tool_calls
    ]


def agent_graph(
    model: Script, node: ToolNode, *, send: bool = False
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The usual agent loop: the model, then the tools while it asks for any (``send``: each
    call its own task of the tool node)."""

    async def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", send_each_call if send else tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


class HoldTheLastWrite(BaseCallbackHandler):
    """A synchronous handler of tool events, which LangChain runs in a thread for an async
    tool: it holds the last write's start until the read after it has started, so the tools'
    bodies begin in another order than the model's."""

    def __init__(self) -> None:
        self.read_started = threading.Event()

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, inputs: Any = None, **kwargs: Any
    ) -> None:
        if serialized.get("name") == "read_file":
            self.read_started.set()
        elif (inputs or {}).get("content") == "version 3":
            assert self.read_started.wait(PATIENCE_S), "the read never started"


def run_graph(
    settings: Settings,
    *scripts: Script,
    send: bool = False,
    callbacks: list[BaseCallbackHandler] | None = None,
    **options: Any,
) -> list[str]:
    """Run the agent graph once per script, concurrently, with one ``pool_tool_node``
    (``options``); each run's final text."""

    async def main() -> list[str]:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            node = await pool_tool_node(ex, timeout=PATIENCE_S, **options)
            runs = [
                agent_graph(script, node, send=send).ainvoke(
                    {"messages": [HumanMessage("go")]}, {"callbacks": callbacks or []}
                )
                for script in scripts
            ]
            finals = await asyncio.wait_for(asyncio.gather(*runs), PATIENCE_S * 2)
            return [str(final["messages"][-1].content) for final in finals]

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


def test_one_ai_message_is_one_turn_in_the_models_order(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    make_workers(settings).start(2)
    script = Script(
        responses=[
            [
                call("read_file", "r0", {"path": "a.txt"}),  # before the write: not there yet
                call("write_file", "w1", {"path": "a.txt", "content": "hello from the pool\n"}),
                call("read_file", "r1", {"path": "a.txt"}),
                call("read_file", "r2", {"path": "b.txt"}),
            ],
            [call("read_file", "r3", {"path": "a.txt"})],
        ]
    )

    assert run_graph(settings, script) == [DONE]

    # Each result is a ToolMessage with its call's id, in the model's order.
    first = script.results(1)
    assert list(first) == ["r0", "w1", "r1", "r2"]
    assert [first[i].status for i in first] == ["error", "success", "success", "error"]
    assert "not found" in str(first["r0"].content).lower()
    assert str(first["r1"].content) == "hello from the pool\n"
    assert "b.txt" in str(first["r2"].content)
    assert str(first["w1"].artifact["toolpool_call_id"]).startswith("w1-")
    assert first["w1"].artifact["truncated"] is False
    # The four calls of the first message ran in one pool turn, the next message in another.
    turns = turns_by_call(client, settings)
    assert sorted(turns) == ["r0", "r1", "r2", "r3", "w1"]
    assert turns["r0"] == turns["w1"] == turns["r1"] == turns["r2"]
    assert turns["r3"] != turns["w1"]
    second = script.results(2)
    assert list(second) == ["r3"]
    assert second["r3"].status == "success"
    assert str(second["r3"].content) == "hello from the pool\n"
    assert len(script.seen) == 3  # the errors reached the model and the graph went on


@pytest.mark.parametrize("how", ["send", "callbacks"])
def test_the_order_holds_when_each_call_is_its_own_task_or_callbacks_run_in_threads(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis, how: str
) -> None:
    make_workers(settings).start(2)
    writes = [
        call("write_file", f"w{i}", {"path": "a.txt", "content": f"version {i}"}) for i in range(4)
    ]
    script = Script(responses=[[*writes, call("read_file", "r", {"path": "a.txt"})]])

    options = {"send": True} if how == "send" else {"callbacks": [HoldTheLastWrite()]}
    assert run_graph(settings, script, **options) == [DONE]

    results = script.results(1)
    assert sorted(results) == ["r", "w0", "w1", "w2", "w3"]
    assert str(results["r"].content) == "version 3"  # the writes ran in the model's order
    assert len(set(turns_by_call(client, settings).values())) == 1


def test_bad_arguments_are_error_messages_and_the_graph_goes_on(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(1)
    script = Script(
        responses=[
            [
                call("read_file", "missing", {}),
                call("read_file", "typed", {"path": "a.txt", "limit": 0}),
                call("no_such_tool", "unknown", {}),
            ]
        ]
    )

    assert run_graph(settings, script) == [DONE]

    results = script.results(1)
    assert [results[i].status for i in ("missing", "typed", "unknown")] == ["error"] * 3
    assert "Invalid arguments for tool 'read_file'" in str(results["missing"].content)
    assert "path: Field required" in str(results["missing"].content)
    assert "limit: 0 is less than the minimum of 1" in str(results["typed"].content)
    assert "no_such_tool" in str(results["unknown"].content)


def test_names_offers_only_those_tools_and_refuses_an_unknown_one(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(1)

    async def listed(names: Sequence[str] | str) -> list[PoolTool]:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            return await pool_tools(ex, names=names)

    tools = asyncio.run(listed(["read_file", "echo"]))
    assert [tool.name for tool in tools] == ["read_file", "echo"]
    schema = tools[0].args_schema
    assert isinstance(schema, dict)
    assert schema["required"] == ["path"]  # the pool's own schema
    with pytest.raises(ValueError, match=r"'nope'.*tools served: .*read_file, .*write_file"):
        asyncio.run(listed(["read_file", "nope"]))
    with pytest.raises(TypeError, match="list of tool names"):
        asyncio.run(listed("read_file"))


def test_concurrent_runs_of_one_node_never_share_a_turn(
    settings: Settings, make_workers: MakeWorkers, client: redis.Redis
) -> None:
    make_workers(settings).start(1)
    scripts = [
        Script(responses=[[call("read_file", f"run{i}", {"path": "a.txt"})]]) for i in range(2)
    ]

    assert run_graph(settings, *scripts) == [DONE, DONE]

    turns = turns_by_call(client, settings)
    assert sorted(turns) == ["run0", "run1"]
    assert turns["run0"] != turns["run1"]


def test_an_unreachable_pool_and_a_synchronous_run_are_clear_errors(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    make_workers(settings).start(1)

    async def tools_of(settings: Settings) -> list[PoolTool]:
        async with AsyncExecutor(settings=settings, wait_for_workers=PATIENCE_S) as ex:
            return await pool_tools(ex, names=["read_file"])

    (read_file,) = asyncio.run(tools_of(settings))
    node = ToolNode([read_file])
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    asked = AIMessage(content="", tool_calls=[call("read_file", "r", {"path": "a"})])
    with pytest.raises(NotImplementedError, match=r"async only: run the graph with ainvoke"):
        graph.compile().invoke({"messages": [asked]})

    unreachable = Settings(redis_url=free_port_url(), workspace=settings.worker.workspace)

    async def main() -> None:
        async with AsyncExecutor(settings=unreachable) as ex:
            read_file.turns.executor = ex  # the pool has gone since the tools were listed
            script = Script(responses=[[call("read_file", "r", {"path": "a"})]])
            await agent_graph(script, node).ainvoke({"messages": [HumanMessage("go")]})

    with pytest.raises(RedisUnavailable, match="could not be reached"):
        asyncio.run(main())


def test_without_the_extra_the_import_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.prebuilt", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "executor.adapters.langgraph")
    with pytest.raises(ImportError, match=r"pip install 'toolpool\[langgraph\]'"):
        importlib.import_module("executor.adapters.langgraph")
