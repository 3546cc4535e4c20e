"""Wire models: what crosses Redis between the orchestrator and the workers (JSON only)."""

from __future__ import annotations

import json
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator


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
    UNKNOWN_SESSION = "unknown_session"


def new_call_id() -> str:
    """A fresh call id, for calls that come without one."""
    return "call_" + uuid.uuid4().hex


class ToolCall(BaseModel):
    """One tool call as a model asked for it.

    ``arguments_error`` says why the arguments a model sent could not be read (not JSON, or
    not a JSON object); ``parse_call`` keeps such a call, with its id and name, so that it can
    be answered ``invalid_arguments`` like any other bad call. It is no field: it never
    crosses Redis, and such a call is answered by the client, never enqueued.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default_factory=new_call_id, min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)

    _arguments_error: str | None = PrivateAttr(default=None)

    @property
    def arguments_error(self) -> str | None:
        """Why the arguments as sent could not be read, or None if they could."""
        return self._arguments_error

    @field_validator("arguments", mode="before")
    @classmethod
    def _decode_json_arguments(cls, value: Any) -> Any:
        # OpenAI's API returns arguments as a JSON string; accept that form too.
        if isinstance(value, str):
            decoded, problem = _read_arguments(value)
            if problem is not None:
                raise ValueError(problem)
            return decoded
        return value


class ToolResult(BaseModel):
    """The outcome of one call, with ``content`` exactly as the model will see it.

    ``turn_id`` names the turn the call ran in (for ``toolpool timeline``/``events --turn``);
    the client sets it on every result it hands back. Results stored without it (by workers,
    or by an older version) read as ``None``.
    """

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
    turn_id: str | None = None

    @property
    def is_error(self) -> bool:
        """True when the call failed; ``content`` then explains why to the model."""
        return self.status is ToolStatus.ERROR

    @classmethod
    def failure(cls, call_id: str, name: str, error_type: ErrorType, message: str) -> ToolResult:
        """An error result written outside the runner (a lost worker, a cancelled turn)."""
        return cls(
            call_id=call_id,
            name=name,
            status=ToolStatus.ERROR,
            content=message,
            original_chars=len(message),
            error_type=error_type,
            error_message=message,
        )


def _read_arguments(value: Any) -> tuple[dict[str, Any], str | None]:
    """Arguments as a model sent them (an object, or the JSON text of one, as OpenAI sends
    them) and what is wrong with them: ``({}, problem)`` when they are no JSON object."""
    if isinstance(value, str):
        if not value.strip():
            return {}, None
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return {}, f"arguments are not valid JSON: {exc}"
        except (ValueError, RecursionError) as exc:  # digits past int's limit, deep nesting
            return {}, f"arguments are not valid JSON: {str(exc) or type(exc).__name__}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, not {_json_kind(value)}"
    return value, None


def parse_call(item: ToolCall | dict[str, Any]) -> ToolCall:
    """A ``ToolCall`` from the forms LLM APIs return.

    Accepted: a ``ToolCall``; ``{"id", "name", "arguments"}``; an OpenAI tool call
    ``{"id", "type": "function", "function": {"name", "arguments": "<json>"}}``; an Anthropic
    ``tool_use`` block ``{"type": "tool_use", "id", "name", "input": {...}}``.

    Arguments that cannot be read (JSON text that does not parse, or JSON that is no object)
    do not fail the call: it is kept, with its id and name, and ``arguments_error`` says what
    is wrong, for an ``invalid_arguments`` answer. What is no tool call at all (no name,
    unknown keys, not a dict) raises ``ValueError`` saying what is wrong, without pydantic's
    wording.
    """
    if isinstance(item, ToolCall):
        return item
    if not isinstance(item, dict):
        raise ValueError(f"it is {_json_kind(item)}, not an object. {_FORMS}")
    if isinstance(item.get("function"), dict):
        function = item["function"]
        fields = {"name": function.get("name"), "arguments": function.get("arguments", {})}
        where = {"name": "function.name", "arguments": "function.arguments"}
    elif item.get("type") == "tool_use" or "input" in item:
        fields = {"name": item.get("name"), "arguments": item.get("input", {})}
        where = {"arguments": "input"}
    else:
        fields = {key: value for key, value in item.items() if key != "id"}
        where = {}
    if item.get("id") is not None:
        fields["id"] = item["id"]
    if fields.get("name") is None:
        fields.pop("name", None)  # said as "has no tool name", not "not a valid string"
    arguments, problem = _read_arguments(fields.get("arguments", {}))
    fields["arguments"] = arguments
    try:
        call = ToolCall.model_validate(fields)
    except ValidationError as exc:
        raise ValueError(f"{_problems(exc, where)}. {_FORMS}") from None
    if problem is not None:
        call._arguments_error = problem
    return call


_FORMS = (
    'A call is {"id", "name", "arguments"}, an OpenAI tool call or an Anthropic tool_use block.'
)


def _problems(exc: ValidationError, where: dict[str, str]) -> str:
    """Each problem pydantic found, in plain words and without its documentation links."""
    said = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"])
        field = where.get(field, field)
        if field.endswith("name") and error["type"] in ("missing", "string_too_short"):
            said.append("it has no tool name")
        elif error["type"] == "missing":
            said.append(f"{field!r} is missing")
        elif error["type"] == "extra_forbidden":
            said.append(f"unexpected key {field!r}")
        else:
            said.append(f"{field!r}: {error['msg']}")
    return "; ".join(said)


def _json_kind(value: Any) -> str:
    """What ``value`` is, in JSON's words: "an array", "a string", "null"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"
