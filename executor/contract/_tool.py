"""The tool contract: a ``Tool`` and the ``@tool`` decorator that builds one from a function.

A typed function becomes a tool; pydantic builds its argument validator and JSON Schema,
extra arguments are refused, and parameter descriptions come from ``Annotated[..., Field(
description=...)]`` or the docstring (Google ``Args:``, NumPy or reST style)::

    @tool(concurrency_safe=True, read_only=True)
    def get_weather(city: str) -> str:
        '''Current weather for a city.

        Args:
            city: City name, e.g. "Berlin".
        '''

A first parameter annotated ``ToolContext`` is passed the call's context and is not part of
the schema. A tool can also be declared from an explicit JSON Schema with ``parameters=``.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from executor._errors import ConfigurationError, InvalidArgumentsError, ToolDefinitionError
from executor._settings import SettingsGroup, rows
from executor.contract import _schema
from executor.contract._context import ToolContext

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_TIMEOUT = 30.0

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Tool:
    """A tool definition: what the model sees, how the registry runs it, and the function.

    ``is_concurrency_safe`` defaults to False: a tool that does not declare itself safe runs
    under the exclusive lock. ``max_result_chars`` of None means the policy default.
    ``settings_class``: the tool's own settings group, which its context carries.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    validator: Callable[[dict[str, Any]], dict[str, Any]]
    is_concurrency_safe: bool = False
    is_read_only: bool = False
    max_result_chars: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    takes_context: bool = False
    timeout_argument: str | None = None
    settings_class: type[SettingsGroup] | None = None

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ToolDefinitionError(
                f"Tool name {self.name!r} must be 1-64 characters of letters, digits, _ or -"
            )
        if not self.description.strip():
            raise ToolDefinitionError(f"Tool {self.name!r} needs a description")
        if self.max_result_chars is not None and self.max_result_chars < 1:
            raise ToolDefinitionError(f"Tool {self.name!r}: max_result_chars must be >= 1")
        if not self.timeout > 0:
            raise ToolDefinitionError(f"Tool {self.name!r}: timeout must be positive")
        if self.settings_class is not None:
            try:
                rows(self.settings_class)
            except ConfigurationError as exc:
                raise ToolDefinitionError(f"Tool {self.name!r}: settings: {exc}") from None

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments converted and checked; raises ``InvalidArgumentsError``."""
        return self.validator(arguments)

    def invoke(self, context: ToolContext, arguments: dict[str, Any]) -> Any:
        """Run the function with validated ``arguments`` (and the context, if it takes one)."""
        if self.takes_context:
            return self.function(context, **arguments)
        return self.function(**arguments)


@overload
def tool(function: F, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    concurrency_safe: bool = False,
    read_only: bool = False,
    max_result_chars: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    timeout_argument: str | None = None,
    settings: type[SettingsGroup] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    concurrency_safe: bool = False,
    read_only: bool = False,
    max_result_chars: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    timeout_argument: str | None = None,
    settings: type[SettingsGroup] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a ``Tool``; use bare (``@tool``) or with options (``@tool(...)``).

    With ``parameters`` the given JSON Schema is used and checked instead of the signature.
    ``timeout`` is the call's time limit in seconds; ``timeout_argument`` names an argument
    with which a call may ask for a longer one (bash's ``timeout``), the tool then enforcing it.
    ``settings`` names the tool's own settings group (a ``SettingsGroup`` dataclass): workers
    read it from ``TOOLPOOL_*`` variables and pass it in the context (``ctx.settings_as``).
    """

    def build(func: Callable[..., Any]) -> Tool:
        tool_name = name or func.__name__
        summary, param_docs = parse_docstring(func.__doc__ or "")
        takes_context = _takes_context(func)
        if parameters is not None:
            schema, validator = _from_schema(tool_name, parameters)
        else:
            schema, validator = _from_signature(tool_name, func, param_docs, takes_context)
        return Tool(
            name=tool_name,
            description=description if description is not None else summary,
            parameters=schema,
            function=func,
            validator=validator,
            is_concurrency_safe=concurrency_safe,
            is_read_only=read_only,
            max_result_chars=max_result_chars,
            timeout=timeout,
            takes_context=takes_context,
            timeout_argument=timeout_argument,
            settings_class=settings,
        )

    if function is not None:
        return build(function)
    return build


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and its parameters' descriptions.

    Google (``Args:``), NumPy (``Parameters`` with a dashed underline) and reST (``:param x:``)
    styles are read, by ``docstring_parser``; other sections (Returns, Raises, ...) are left
    out of the description. A docstring it cannot parse is all description.
    """
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return inspect.cleandoc(doc).strip(), {}
    params = {
        param.arg_name.lstrip("*"): " ".join((param.description or "").split())
        for param in parsed.params
    }
    return (parsed.description or "").strip(), params


def _takes_context(func: Callable[..., Any]) -> bool:
    params = list(inspect.signature(func).parameters.values())
    if not params:
        return False
    hints = typing.get_type_hints(func)
    return hints.get(params[0].name) is ToolContext


def _from_signature(
    tool_name: str, func: Callable[..., Any], docs: dict[str, str], takes_context: bool
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]]]:
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    params = list(inspect.signature(func).parameters.values())[int(takes_context) :]
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolDefinitionError(
                f"Tool {tool_name!r}: parameter {param.name!r} must be a plain named "
                "parameter (no *args, **kwargs or positional-only)"
            )
        annotation = hints.get(param.name, Any)
        if param.name in docs and not _has_description(annotation):
            annotation = typing.Annotated[annotation, Field(description=docs[param.name])]
        default = param.default if param.default is not param.empty else ...
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = create_model(
        f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    schema = _clean_schema(model.model_json_schema())
    names = list(fields)

    def validator(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = model.model_validate(arguments)
        except ValidationError as exc:
            raise InvalidArgumentsError(tool_name, _problems(schema, arguments, exc)) from None
        return {field: getattr(parsed, field) for field in names}

    return schema, validator


def _from_schema(
    tool_name: str, parameters: dict[str, Any]
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]]]:
    _schema.check_schema(parameters, f"{tool_name}.parameters")
    if parameters.get("type") != "object":
        raise ToolDefinitionError(f"Tool {tool_name!r}: parameters must have type 'object'")
    schema = {"additionalProperties": False, **parameters}

    def validator(arguments: dict[str, Any]) -> dict[str, Any]:
        _schema.validate_arguments(tool_name, schema, arguments)
        return _schema.apply_defaults(schema, arguments)

    return schema, validator


def _has_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in annotation.__metadata__)


def _problems(schema: dict[str, Any], arguments: dict[str, Any], exc: ValidationError) -> list[str]:
    """What is wrong with ``arguments``, worded as the client's check words it.

    The client checks a call against the published schema before it is queued; the same
    check words the worker's refusal, so a fault reads the same from both. Pydantic's words
    stay for the arguments whose fault the schema cannot show (a custom validator's).
    """
    worded = _schema.validate(schema, arguments, lax=True)
    named = {_argument(problem) for problem in worded}
    return worded + [p for p in _describe(exc) if _argument(p) not in named]


def _argument(problem: str) -> str:
    """The top-level argument a ``location: message`` problem is about."""
    return re.split(r"[.\[:]", problem, maxsplit=1)[0]


def _describe(exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = (
            "".join(
                f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]
            ).lstrip(".")
            or "(arguments)"
        )
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unexpected argument"
        problems.append(f"{loc}: {message}")
    return problems


def _clean_schema(node: Any) -> Any:
    """The schema without pydantic's generated ``title`` keys, which only cost tokens."""
    if isinstance(node, list):
        return [_clean_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
            cleaned[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        elif key in ("default", "const", "enum", "examples"):
            cleaned[key] = value
        else:
            cleaned[key] = _clean_schema(value)
    return cleaned
