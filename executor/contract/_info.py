"""A tool as its workers publish it: what a client needs to check and plan a call, no code."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from executor.contract._schema import validate_arguments
from executor.contract._tool import Tool


class ToolInfo(BaseModel):
    """A tool's published description: name, schema, flags and limits.

    It has the attributes of a ``Tool`` that a client reads (``approve`` and ``check``
    callbacks receive one), and validates arguments against the published JSON schema.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]
    is_concurrency_safe: bool = False
    is_read_only: bool = False
    max_result_chars: int | None = None
    timeout: float
    timeout_argument: str | None = None

    @classmethod
    def of(cls, tool: Tool | ToolInfo) -> ToolInfo:
        """The published description of ``tool``."""
        if isinstance(tool, ToolInfo):
            return tool
        return cls(
            name=tool.name,
            description=tool.description,
            parameters=tool.parameters,
            is_concurrency_safe=tool.is_concurrency_safe,
            is_read_only=tool.is_read_only,
            max_result_chars=tool.max_result_chars,
            timeout=tool.timeout,
            timeout_argument=tool.timeout_argument,
        )

    def validate_arguments(self, arguments: dict[str, Any]) -> None:
        """Raise ``InvalidArgumentsError`` (listing each problem) unless the schema holds."""
        # lax: the worker's typed tool converts "7" to 7; the client must not refuse it.
        validate_arguments(self.name, self.parameters, arguments, lax=True)
