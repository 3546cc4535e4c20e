"""Validation of arguments against an explicit JSON Schema, for tools declared without types.

Only a well-defined subset of JSON Schema is supported, and a schema that uses anything else
is refused when the tool is declared, so no keyword is ever silently ignored at call time.
Typed tools (the usual way) are validated by pydantic instead; see ``executor.contract``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from executor.errors import ToolDefinitionError

SUPPORTED_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
        "pattern", "minItems", "maxItems", "anyOf", "description", "title", "default",
        "examples",
    }
)  # fmt: skip

_TYPE_CHECKS: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def check_schema(schema: Any, where: str = "parameters") -> None:
    """Raise ``ToolDefinitionError`` unless ``schema`` uses only the supported subset."""
    if not isinstance(schema, dict):
        raise ToolDefinitionError(f"{where} must be a JSON Schema object, got {schema!r}")
    unknown = sorted(set(schema) - SUPPORTED_KEYWORDS)
    if unknown:
        raise ToolDefinitionError(
            f"{where} uses unsupported JSON Schema keyword(s) {unknown}; supported: "
            f"{sorted(SUPPORTED_KEYWORDS)}. Declare the tool with typed parameters instead."
        )
    types = schema.get("type")
    for name in [types] if isinstance(types, str) else (types or []):
        if name not in _TYPE_CHECKS:
            raise ToolDefinitionError(f"{where} has unknown type {name!r}")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except re.error as exc:
            raise ToolDefinitionError(f"{where}.pattern is not a valid regex: {exc}") from None
    for prop, sub in (schema.get("properties") or {}).items():
        check_schema(sub, f"{where}.properties.{prop}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            check_schema(schema[key], f"{where}.{key}")
    for index, sub in enumerate(schema.get("anyOf") or []):
        check_schema(sub, f"{where}.anyOf[{index}]")


def validate(schema: dict[str, Any], value: Any) -> list[str]:
    """Every way ``value`` breaks ``schema``, as ``location: problem`` lines; empty if valid."""
    return list(_errors(schema, value, ""))


def apply_defaults(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with the ``default`` of every absent top-level property filled in."""
    filled = dict(arguments)
    for name, sub in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(sub, dict) and "default" in sub:
            filled[name] = sub["default"]
    return filled


def _errors(schema: dict[str, Any], value: Any, loc: str) -> Iterator[str]:
    here = loc or "(arguments)"
    if "anyOf" in schema:
        branches = [list(_errors(sub, value, loc)) for sub in schema["anyOf"]]
        if all(branches):
            yield f"{here}: matches none of the allowed forms"
            return
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_TYPE_CHECKS[name](value) for name in names):
            yield f"{here}: expected {' or '.join(names)}, got {type(value).__name__}"
            return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{here}: must be one of {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        yield f"{here}: must be {schema['const']!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        yield from _number_errors(schema, value, here)
    if isinstance(value, str):
        yield from _string_errors(schema, value, here)
    if isinstance(value, list):
        yield from _array_errors(schema, value, loc)
    if isinstance(value, dict):
        yield from _object_errors(schema, value, loc)


def _number_errors(schema: dict[str, Any], value: float, here: str) -> Iterator[str]:
    if "minimum" in schema and value < schema["minimum"]:
        yield f"{here}: must be >= {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        yield f"{here}: must be <= {schema['maximum']}"
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        yield f"{here}: must be > {schema['exclusiveMinimum']}"
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        yield f"{here}: must be < {schema['exclusiveMaximum']}"


def _string_errors(schema: dict[str, Any], value: str, here: str) -> Iterator[str]:
    if "minLength" in schema and len(value) < schema["minLength"]:
        yield f"{here}: must have at least {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        yield f"{here}: must have at most {schema['maxLength']} characters"
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        yield f"{here}: must match the pattern {schema['pattern']!r}"


def _array_errors(schema: dict[str, Any], value: list[Any], loc: str) -> Iterator[str]:
    here = loc or "(arguments)"
    if "minItems" in schema and len(value) < schema["minItems"]:
        yield f"{here}: must have at least {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        yield f"{here}: must have at most {schema['maxItems']} items"
    if isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _errors(schema["items"], item, f"{loc}[{index}]")


def _object_errors(schema: dict[str, Any], value: dict[str, Any], loc: str) -> Iterator[str]:
    prefix = f"{loc}." if loc else ""
    properties: dict[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            yield f"{prefix}{name}: field required"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            yield from _errors(properties[name], item, prefix + name)
        elif extra is False:
            yield f"{prefix}{name}: unexpected argument (allowed: {', '.join(properties)})"
        elif isinstance(extra, dict):
            yield from _errors(extra, item, prefix + name)
