"""The pool's tools as a pydantic-ai toolset (``pip install 'toolpool[pydantic-ai]'``).

``PoolToolset(executor)`` goes in ``Agent(..., toolsets=[...])``. Each tool the live workers
publish is offered to the model under its own name, description and JSON schema; the calls
of one model response, which pydantic-ai runs as concurrent tasks, reach the pool as ONE turn
(``TurnBatcher``), so the pool's order holds: a write, then the reads after it, in the order
the model asked for them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from executor._extras import install_extra

try:
    from pydantic_ai.exceptions import ToolFailed
    from pydantic_ai.messages import ToolReturn
    from pydantic_ai.tools import RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        f"executor.adapters.pydantic_ai needs pydantic-ai ({exc}); install it with "
        f"{install_extra('pydantic-ai')}"
    ) from exc

from executor.adapters._batch import TurnBatcher
from executor.adapters._names import check_names, chosen
from executor.client import AsyncExecutor
from executor.contract import ToolInfo
from executor.wire import NoWorkerError, ToolResult

__all__ = ["PoolToolset"]

# Any arguments pass: the pool checks them against the schema its workers published and
# answers bad ones with an ``invalid_arguments`` result listing each problem for the model.
_PASS_ARGUMENTS = SchemaValidator(core_schema.any_schema())


class PoolToolset(AbstractToolset[Any]):
    """The tools of a live toolpool pool, for a pydantic-ai ``Agent``.

    ``PoolToolset(executor, session=None, timeout=None, names=None, id=None)``: ``executor`` is
    an ``AsyncExecutor`` the caller opens and closes (the toolset only borrows it); ``session``
    and ``timeout`` are those of every turn it sends (``AsyncExecutor.run``); ``names`` offers
    only those tools (a name the pool does not serve is a ``ValueError`` naming it and the
    tools served); ``id`` is pydantic-ai's toolset id, which durable execution requires.

    Tool list: read from the pool's live catalog once per run step (``get_tools`` is asked at
    the start of each step; a second ask within the same step reuses the list), so workers
    started or stopped between model requests show up at the next request, for one catalog
    read per request. With no live worker on the queue the run stops at once with
    ``NoWorkerError``, rather than letting the model run without tools.

    Turns: each agent run gets its own ``TurnBatcher`` (``for_run``), shared by all the run's
    calls; the calls pydantic-ai starts together for one model response become one pool
    turn, and a later response makes a later turn. Concurrent runs of one agent do not
    share turns. The pool call id is the model's ``tool_call_id`` made unique (the pool
    refuses an id another turn holds; scripted models and replays reuse ids); it is the
    result's ``metadata["toolpool_call_id"]``, for ``executor.full_output`` of a truncated
    result.

    Arguments are not validated by pydantic-ai (its validator lets anything through): the
    pool validates against the workers' own schema and answers bad arguments with an
    ``invalid_arguments`` result the model can read, like any other error result.

    Error results (a missing file, bad arguments, a tool that failed or timed out) reach the
    model as ``ToolFailed``: pydantic-ai records the pool's text, which already explains the
    error to the model, as a tool return with ``outcome='failed'``, so the model sees that the
    call failed and adapts, and the run goes on. ``ModelRetry`` would add "fix the errors and
    try again" and spend the tool's retry budget: the agent's default budget of one retry
    would end the whole run at the second failed read of a missing file. Bound a model that
    keeps failing with pydantic-ai's ``UsageLimits``.

    A pool that cannot be reached is not the model's to fix: ``RedisUnavailable`` and
    ``NoWorkerError`` propagate and end the run with their own message (Redis commands fail
    within the executor's timeout, and a turn never waits past ``timeout``).
    """

    def __init__(
        self,
        executor: AsyncExecutor,
        *,
        session: str | None = None,
        timeout: float | None = None,
        names: Iterable[str] | None = None,
        id: str | None = None,
    ) -> None:
        self.names = check_names(names)
        self.executor = executor
        self.session = session
        self.timeout = timeout
        self._id = id
        #: Sends this toolset's calls, one turn per batch; each run gets its own (``for_run``).
        self.batcher = TurnBatcher(executor, session=session, timeout=timeout)
        self._listed: tuple[tuple[str | None, int], dict[str, ToolsetTool[Any]]] | None = None

    @property
    def id(self) -> str | None:
        return self._id

    async def for_run(self, ctx: RunContext[Any]) -> PoolToolset:
        """A copy for one agent run, with a batcher of its own: runs never share a turn."""
        run = copy.copy(self)
        run.batcher = TurnBatcher(self.executor, session=self.session, timeout=self.timeout)
        run._listed = None
        return run

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The pool's tools (those of ``names``, in that order), read once per run step."""
        step = (ctx.run_id, ctx.run_step)
        if self._listed is not None and self._listed[0] == step:
            return self._listed[1]
        infos = await self.executor.tools(session=self.session)
        if not infos:
            catalog = await self.executor.catalog(session=self.session)
            if not catalog.workers:
                raise NoWorkerError(catalog.queue)
        tools = {info.name: self._tool(info, ctx) for info in chosen(infos, self.names)}
        self._listed = (step, tools)
        return tools

    async def get_tool_for_tool_def(
        self, tool_def: ToolDefinition, ctx: RunContext[Any]
    ) -> ToolsetTool[Any]:
        # A definition holds all a pool tool needs: no catalog read (durable execution).
        return ToolsetTool(
            toolset=self,
            tool_def=tool_def,
            max_retries=ctx.max_retries,
            args_validator=_PASS_ARGUMENTS,
        )

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> ToolReturn:
        """Run one call in the turn of the calls started with it; an error result raises
        ``ToolFailed`` with the pool's text."""
        # Anything but an object (the validator lets it through) goes as JSON text, for the
        # pool to answer "arguments must be a JSON object".
        arguments: dict[str, object] | str = (
            tool_args if isinstance(tool_args, dict) else json.dumps(tool_args)
        )
        result = await self.batcher.call(name, arguments, ctx.tool_call_id)
        if result.is_error:
            raise ToolFailed(result.content)
        return ToolReturn(return_value=result.content, metadata=_metadata(result))

    def _tool(self, info: ToolInfo, ctx: RunContext[Any]) -> ToolsetTool[Any]:
        definition = ToolDefinition(
            name=info.name,
            description=info.description,
            parameters_json_schema=info.parameters,
            # Not ``sequential``: that would split a response's calls into separate turns;
            # the pool's own partitioning already runs writes alone and in order.
            metadata={
                "toolpool": {
                    "read_only": info.is_read_only,
                    "concurrency_safe": info.is_concurrency_safe,
                }
            },
        )
        return ToolsetTool(
            toolset=self,
            tool_def=definition,
            max_retries=ctx.max_retries,
            args_validator=_PASS_ARGUMENTS,
        )


def _metadata(result: ToolResult) -> dict[str, object]:
    """What the application may want of a result, kept out of the model's sight."""
    return {"toolpool_call_id": result.call_id, "truncated": result.truncated}
