"""Wire models: what crosses Redis between the orchestrator and the workers (JSON only)."""

from __future__ import annotations

import json
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ToolStatus(str, Enum):
    """Whether a call produced the tool's answer or an error the model should read."""

    OK = "ok"
    ERROR = "error"


class ErrorType(str, Enum):
    """Why a call failed; fixed names, so orchestrators can branch on them."""

    INVALID_ARGUMENTS = "invalid_arguments"
    UNKNOWN_TOOL = "unknown_tool"
    TOOL_ERROR = "tool_error"
    UNEXPECTED_ERROR = "unexpected_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    LOCK_LOST = "lock_lost"
    LOCK_UNAVAILABLE = "lock_unavailable"
    WORKER_LOST = "worker_lost"


def new_call_id() -> str:
    """A fresh call id, for calls that come without one."""
    return "call_" + uuid.uuid4().hex


class ToolCall(BaseModel):
    """One tool call as a model asked for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default_factory=new_call_id, min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments", mode="before")
    @classmethod
    def _decode_json_arguments(cls, value: Any) -> Any:
        # OpenAI's API returns arguments as a JSON string; accept that form too.
        if isinstance(value, str):
            try:
                decoded = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"arguments are not valid JSON: {exc.msg}") from None
            return decoded
        return value


class ToolResult(BaseModel):
    """The outcome of one call, with ``content`` exactly as the model will see it."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    name: str
    status: ToolStatus
    content: str
    truncated: bool = False
    original_chars: int = 0
    dropped_chars: int = 0
    dropped_lines: int = 0
    error_type: ErrorType | None = None
    error_message: str | None = None
    duration_ms: float = 0.0

    @property
    def is_error(self) -> bool:
        """True when the call failed; ``content`` then explains why to the model."""
        return self.status is ToolStatus.ERROR

    @classmethod
    def failure(cls, call_id: str, name: str, error_type: ErrorType, message: str) -> ToolResult:
        """An error result written outside the runner (a lost worker, a cancelled turn)."""
        return cls(
            call_id=call_id, name=name, status=ToolStatus.ERROR, content=message,
            original_chars=len(message), error_type=error_type, error_message=message,
        )  # fmt: skip


def parse_call(item: ToolCall | dict[str, Any]) -> ToolCall:
    """A ``ToolCall`` from the forms LLM APIs return.

    Accepted: a ``ToolCall``; ``{"id", "name", "arguments"}``; an OpenAI tool call
    ``{"id", "type": "function", "function": {"name", "arguments": "<json>"}}``; an Anthropic
    ``tool_use`` block ``{"type": "tool_use", "id", "name", "input": {...}}``.
    """
    if isinstance(item, ToolCall):
        return item
    if not isinstance(item, dict):
        raise ValueError(f"A tool call must be a ToolCall or a dict, got {type(item).__name__}")
    if isinstance(item.get("function"), dict):
        function = item["function"]
        data = {"name": function.get("name"), "arguments": function.get("arguments", {})}
        if "id" in item:
            data["id"] = item["id"]
        return ToolCall.model_validate(data)
    if item.get("type") == "tool_use" or "input" in item:
        data = {"name": item.get("name"), "arguments": item.get("input", {})}
        if "id" in item:
            data["id"] = item["id"]
        return ToolCall.model_validate(data)
    return ToolCall.model_validate(item)
