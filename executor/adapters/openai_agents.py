"""The pool's tools as OpenAI Agents SDK function tools (``pip install 'toolpool[openai-agents]'``).

``await pool_tools(executor)`` reads the pool's tools and returns one ``agents.FunctionTool``
for each, to give an ``Agent(tools=...)``. Every tool it returns shares one ``TurnBatcher``:
the SDK runs the calls of one model response as concurrent tasks, and the batcher sends them
as one pool turn, in the model's order, so a read the model asked for after a write sees it.

What the model reads:

- a result, ``ok`` or ``error``, is the ``ToolResult``'s ``content`` as it is. The pool wrote
  an error's content for the model ("File not found: b.txt. ...", "Invalid arguments for tool
  'read_file': ..."), and a function call's output carries no error flag in OpenAI's APIs, so
  there is nothing to mark: routing it through the SDK's failure path would only swap that
  text for a formatter's (by default a generic "An error occurred ...") and fail the span. The
  SDK's own MCP tools pass an error result's content on the same way;
- a call the pool could not answer at all (``RedisUnavailable``, ``NoWorkerError``, or any
  other ``ToolpoolError`` raised by the turn) goes the way the SDK's ``function_tool`` treats a
  tool that raised: ``failure_error_function(ctx, error)`` words it for the model and the run
  goes on (default ``pool_failure_message``: the tool, the failure and its message); pass
  ``failure_error_function=None`` to raise instead, which fails the run with the SDK's
  ``UserError`` ("Error running tool ...") caused by the pool's error.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Iterable
from typing import Any

from executor import AsyncExecutor, ToolInfo, ToolpoolError
from executor import _texts as texts
from executor._extras import install_extra
from executor.adapters._batch import TurnBatcher
from executor.adapters._names import check_names, chosen

try:
    from agents import FunctionTool, RunContextWrapper, Tool
    from agents.tool import ToolErrorFunction
    from agents.tool_context import ToolContext
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        "executor.adapters.openai_agents needs the OpenAI Agents SDK (package 'agents'): "
        f"{install_extra('openai-agents')} ({exc})"
    ) from exc

__all__ = ["pool_failure_message", "pool_tools"]

log = logging.getLogger(__name__)


def pool_failure_message(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What the model reads for a call the pool could not answer (the default
    ``failure_error_function``): which tool, that the pool failed, and the pool's message,
    which says whether the call may still run."""
    tool = ctx.tool_name if isinstance(ctx, ToolContext) else "the tool"
    return texts.pool_failed(tool, error)


async def pool_tools(
    executor: AsyncExecutor,
    *,
    session: str | None = None,
    timeout: float | None = None,
    names: Iterable[str] | None = None,
    failure_error_function: ToolErrorFunction | None = pool_failure_message,
) -> list[Tool]:
    """One ``FunctionTool`` per tool the pool serves now (in ``session``), in the pool's order;
    typed as the SDK's ``Tool`` so that the list goes straight to ``Agent(tools=...)``.

    ``names`` keeps only those tools, in that order (``ValueError`` naming any the pool does
    not serve).
    Calls run in ``session`` with turn timeout ``timeout`` (default: the executor's). The
    tools' schemas are the pool's JSON schemas, not strict-mode ones (``strict_json_schema``
    is off): the pool validates the arguments and answers bad ones with a result that lists
    the problems. ``failure_error_function``: see the module's docstring.
    """
    wanted = check_names(names)
    infos = chosen(await executor.tools(session=session), wanted)
    batcher = TurnBatcher(executor, session=session, timeout=timeout)
    return [_function_tool(info, batcher, failure_error_function) for info in infos]


def _function_tool(
    info: ToolInfo, batcher: TurnBatcher, failure_error_function: ToolErrorFunction | None
) -> FunctionTool:
    """``info`` as a function tool whose calls go through ``batcher``."""

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        try:
            result = await batcher.call(info.name, arguments, ctx.tool_call_id)
        except ToolpoolError as error:
            if failure_error_function is None:
                raise
            log.warning(
                "toolpool: %s call %s got no result: %s", info.name, ctx.tool_call_id, error
            )
            message = failure_error_function(ctx, error)
            return str(await message) if inspect.isawaitable(message) else str(message)
        return result.content

    return FunctionTool(
        name=info.name,
        description=info.description,
        # A copy: the SDK owns the schema it is given, and ToolInfo is shared.
        params_json_schema=copy.deepcopy(info.parameters),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )
