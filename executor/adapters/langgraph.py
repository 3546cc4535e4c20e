"""The pool's tools for LangGraph (``pip install 'toolpool[langgraph]'``).

``await pool_tools(executor)`` reads the pool's tools and returns one LangChain tool for each,
for ``model.bind_tools(tools)`` and LangGraph's ``ToolNode(tools)``; ``await
pool_tool_node(executor)`` is that ``ToolNode``, ready for ``StateGraph.add_node``.

Turns: ``ToolNode`` runs the calls of one ``AIMessage`` as concurrent tasks, one per call,
started in the message's order. Each tool hands its call to the pool as its task starts, before
LangChain's callbacks and argument handling run, and the calls of one graph step are gathered
into ONE pool turn (``TurnBatcher``), in the order they were handed over: reads together,
writes and shell commands alone, so a read the model asked for after a write sees it. Each
step of each graph run has a turn of its own: concurrent runs never share one.

What the model reads, as ``ToolMessage``s with the call's ``tool_call_id``:

- a result is the ``ToolResult``'s ``content``; its ``artifact`` is ``{"toolpool_call_id":
  ..., "truncated": ...}``, kept out of the model's sight (``executor.full_output`` of a
  truncated result takes that id);
- an error result (a missing file, bad arguments, a tool that failed or timed out) is a
  ``ToolMessage`` with ``status="error"`` and the pool's text, which explains the error to the
  model; the graph goes on;
- a pool that cannot be reached (``RedisUnavailable``, ``NoWorkerError``) is not the model's
  to fix: the error propagates out of the graph, as ``ToolNode`` does with any error but a bad
  call's.

The tools are async only (the executor is an ``AsyncExecutor``): run the graph with
``ainvoke`` or ``astream``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from executor._extras import install_extra

try:
    from langchain_core.messages import ToolCall
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, ToolException
    from langgraph.prebuilt import ToolNode
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        f"executor.adapters.langgraph needs langgraph and langchain-core ({exc}); install "
        f"them with {install_extra('langgraph')}"
    ) from exc

from executor.adapters._batch import TurnBatcher
from executor.adapters._names import check_names, chosen
from executor.client import AsyncExecutor
from executor.contract import ToolInfo
from executor.wire import ToolResult

__all__ = ["PoolTool", "pool_tool_node", "pool_tools"]

# The pool's answer to the call a tool is running, set where its task starts (``ainvoke``)
# and read where LangChain runs the tool's body (``_arun``), in a copy of that context.
_ANSWER: ContextVar[asyncio.Future[ToolResult] | None] = ContextVar(
    "toolpool_langgraph_answer", default=None
)


@dataclass
class Turns:
    """One ``TurnBatcher`` per graph step that calls the pool's tools, while it has calls in
    flight: the calls of one step make one turn, and two runs' steps never share one."""

    executor: AsyncExecutor
    session: str | None = None
    timeout: float | None = None
    _steps: dict[str, tuple[TurnBatcher, int]] = field(default_factory=dict)

    def start(
        self, step: str, name: str, arguments: dict[str, object] | str, call_id: str | None
    ) -> asyncio.Task[ToolResult]:
        """The call's task, started now: tasks run in the order they are created, so the
        calls reach the step's batcher in the order their tool tasks started."""
        batcher, flying = self._steps.get(step) or (
            TurnBatcher(self.executor, session=self.session, timeout=self.timeout),
            0,
        )
        self._steps[step] = (batcher, flying + 1)
        return asyncio.ensure_future(self._call(step, batcher, name, arguments, call_id))

    async def _call(
        self,
        step: str,
        batcher: TurnBatcher,
        name: str,
        arguments: dict[str, object] | str,
        call_id: str | None,
    ) -> ToolResult:
        try:
            return await batcher.call(name, arguments, call_id)
        finally:
            kept, flying = self._steps[step]
            if flying <= 1:
                del self._steps[step]
            else:
                self._steps[step] = (kept, flying - 1)


class PoolTool(BaseTool):
    """One pool tool as a LangChain tool: the pool's name, description and JSON schema, its
    calls sent through ``turns`` (one turn per graph step). Async only.

    LangChain does not check the arguments against the schema: the pool does, and answers bad
    ones with an error ``ToolMessage`` that lists each problem.
    """

    handle_tool_error: bool = True  # an error result is a ToolMessage with status="error"
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    turns: Turns

    async def ainvoke(
        self,
        input: str | dict[str, Any] | ToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        if isinstance(input, dict) and input.get("type") == "tool_call":
            arguments = input.get("args")
            answer = self.turns.start(
                _step(config),
                self.name,
                arguments if isinstance(arguments, dict) else json.dumps(arguments),
                input.get("id"),
            )
            token = _ANSWER.set(answer)
            try:
                return await super().ainvoke(input, config, **kwargs)
            finally:
                _ANSWER.reset(token)
                if not answer.done():  # the step was cancelled: so is the call
                    answer.cancel()
        return await super().ainvoke(input, config, **kwargs)

    async def _arun(self, *args: Any, **kwargs: Any) -> tuple[str, dict[str, object]]:
        answer = _ANSWER.get()
        if answer is None:  # called by itself, not as a model's tool call: a turn of one
            arguments = dict(kwargs)
            arguments.pop("run_manager", None)
            answer = self.turns.start(f"direct-{id(arguments)}", self.name, arguments, None)
        result = await answer
        if result.is_error:
            raise ToolException(result.content)
        return result.content, {"toolpool_call_id": result.call_id, "truncated": result.truncated}

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"The pool's tool {self.name!r} runs on an AsyncExecutor and is async only: run "
            "the graph with ainvoke() or astream(), not invoke() or stream()."
        )


async def pool_tools(
    executor: AsyncExecutor,
    *,
    session: str | None = None,
    timeout: float | None = None,
    names: Iterable[str] | None = None,
) -> list[PoolTool]:
    """One ``PoolTool`` per tool the pool serves now (in ``session``), in the pool's order.

    ``names`` keeps only those tools, in that order (``ValueError`` naming any the pool does
    not serve). Calls run in ``session`` with turn timeout ``timeout`` (default: the
    executor's). The tools share one ``Turns``, so the calls one ``ToolNode`` step runs make
    one pool turn.
    """
    wanted = check_names(names)
    infos = chosen(await executor.tools(session=session), wanted)
    turns = Turns(executor, session=session, timeout=timeout)
    return [_pool_tool(info, turns) for info in infos]


async def pool_tool_node(
    executor: AsyncExecutor,
    *,
    session: str | None = None,
    timeout: float | None = None,
    names: Iterable[str] | None = None,
    **options: Any,
) -> ToolNode:
    """A ``ToolNode`` of ``pool_tools(executor, ...)``; ``options`` go to ``ToolNode`` (its
    ``name``, ``messages_key``, ...). Its tools are ``node.tools_by_name``."""
    tools = await pool_tools(executor, session=session, timeout=timeout, names=names)
    return ToolNode(tools, **options)


def _pool_tool(info: ToolInfo, turns: Turns) -> PoolTool:
    return PoolTool(
        name=info.name,
        description=info.description,
        # A copy: the framework owns the schema it is given, and ToolInfo is shared.
        args_schema=copy.deepcopy(info.parameters),
        turns=turns,
    )


def _step(config: RunnableConfig | None) -> str:
    """Which graph step of which run a call belongs to: the run's checkpoint at that step
    (``checkpoint_map``, one id per graph level) and the node. The tasks of one step share it,
    also when the calls are sent to the node one task each (``Send``); other steps and other
    runs do not."""
    configurable = (config or {}).get("configurable") or {}
    metadata = (config or {}).get("metadata") or {}
    checkpoints = configurable.get("checkpoint_map")
    if checkpoints:
        return json.dumps([sorted(checkpoints.items()), metadata.get("langgraph_node")])
    return str(configurable.get("checkpoint_ns") or "outside-a-graph")
