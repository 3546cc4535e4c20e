"""Validation of arguments against a JSON Schema (Draft 2020-12), with ``jsonschema``.

Two users: tools declared with an explicit ``parameters=`` schema instead of typed parameters
(typed tools are validated by pydantic; see ``executor.contract._tool``), and the client,
which checks a call against the schema its workers published before it queues the call.

A declared schema must be a valid 2020-12 schema, use no keyword that 2020-12 does not define
(a misspelt ``requried`` would otherwise be ignored without a word), and point its ``$ref``
only inside itself. Problems read ``location: message`` (``path: 'x' is not of type 'string'``,
``q: Field required``, ``z: unexpected argument``); a typed tool's worker words the faults its
schema shows with these too (see ``executor.contract._tool``), so a model reads one dialect.
``format`` is checked for the formats jsonschema knows without extras (email, ipv4, ipv6,
date, uuid, regex).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

# jsonschema ships no type information (the types-jsonschema stubs would add it).
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import (  # type: ignore[import-untyped, unused-ignore]
    SchemaError,
    ValidationError,
    best_match,
)
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from executor._errors import InvalidArgumentsError, ToolDefinitionError

# Keywords of Draft 2020-12 that only annotate (jsonschema validates with the others).
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$vocabulary",
        "$comment",
        "$defs",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)
KNOWN_KEYWORDS = frozenset(Draft202012Validator.VALIDATORS) | _ANNOTATIONS
# Where a schema holds subschemas: one, a list of them, or a mapping of names to them.
_ONE = (
    "additionalProperties",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAPPING = ("properties", "patternProperties", "$defs", "dependentSchemas")
# A value longer than this is cut in messages (an argument may be megabytes long).
_SHOWN_VALUE_CHARS = 80
_CACHED_VALIDATORS = 256


def check_schema(schema: Any, where: str = "parameters") -> None:
    """Raise ``ToolDefinitionError`` unless ``schema`` is a usable Draft 2020-12 schema."""
    if not isinstance(schema, dict):
        raise ToolDefinitionError(f"{where} must be a JSON Schema object, got {schema!r}")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        error = best_match(exc.context) if exc.context else exc
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
        raise ToolDefinitionError(
            f"{where}{at} is not valid JSON Schema: {error.message}"
        ) from None
    resolver = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    for at, node in _subschemas(schema, where):
        unknown = sorted(set(node) - KNOWN_KEYWORDS)
        if unknown:
            raise ToolDefinitionError(
                f"{at} uses {unknown}, not JSON Schema 2020-12 keyword(s) (a misspelling?); "
                "such a keyword would be ignored. Remove it, or declare the tool with typed "
                "parameters instead."
            )
        for key in ("$ref", "$dynamicRef"):
            if key in node:
                _check_reference(resolver, node[key], f"{at}.{key}")


def validate(schema: dict[str, Any], value: Any, *, lax: bool = False) -> list[str]:
    """Every way ``value`` breaks ``schema``, as ``location: problem`` lines; empty if valid.

    ``lax`` as for ``validate_arguments``. A typed tool's worker words its refusals with this
    too, so a fault reads the same whether the client or the worker finds it.
    """
    return _problems(_validator(json.dumps(schema)), value, lax=lax)


def validate_arguments(
    tool_name: str, schema: dict[str, Any], arguments: dict[str, Any], *, lax: bool = False
) -> None:
    """Raise ``InvalidArgumentsError`` listing each way ``arguments`` break ``schema``.

    The validator is built once per schema (keyed by its JSON text), so this is cheap to call
    for every call. A schema that is not valid JSON Schema raises ``ToolDefinitionError``.
    ``lax`` lets pass the values a worker's typed tool converts (``"7"`` for an integer, as
    pydantic does), so a check made ahead of the worker never refuses what it would accept.
    """
    try:
        validator = _validator(json.dumps(schema))
    except SchemaError as exc:
        raise ToolDefinitionError(
            f"Tool {tool_name!r}: its parameters are not valid JSON Schema: {exc.message}"
        ) from None
    problems = _problems(validator, arguments, lax=lax)
    if problems:
        raise InvalidArgumentsError(tool_name, problems)


def apply_defaults(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with the ``default`` of every absent top-level property filled in."""
    filled = dict(arguments)
    for name, sub in (schema.get("properties") or {}).items():
        if name not in filled and isinstance(sub, dict) and "default" in sub:
            filled[name] = sub["default"]
    return filled


@functools.lru_cache(maxsize=_CACHED_VALIDATORS)
def _validator(schema_json: str) -> Draft202012Validator:
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _problems(validator: Draft202012Validator, value: Any, *, lax: bool = False) -> list[str]:
    found = validator.iter_errors(value)
    if lax:
        found = (error for error in found if not _converted(error))
    # In the schema's order, unexpected arguments last, as pydantic lists them.
    errors = sorted(found, key=lambda e: e.validator == "additionalProperties")
    return [problem for error in errors for problem in _describe(error)]


# What pydantic's lax mode turns into each JSON type (strings as in its bool parsing).
_TRUTHY = frozenset({"1", "on", "t", "true", "y", "yes", "0", "off", "f", "false", "n", "no"})


def _converts_to(value: Any, json_type: Any) -> bool:
    """Whether a typed tool's validator (pydantic, lax) accepts ``value`` as ``json_type``."""
    if isinstance(value, str):
        text = value.strip()
        if json_type == "integer":
            return text.lstrip("+-").isdigit()
        if json_type == "number":
            try:
                float(text)
            except ValueError:
                return False
            return True
        if json_type == "boolean":
            return text.lower() in _TRUTHY
        return False
    if isinstance(value, bool):
        return json_type in ("integer", "number")
    if json_type == "integer":
        return isinstance(value, float) and value.is_integer()
    if json_type == "boolean":
        return isinstance(value, (int, float)) and value in (0, 1)
    return False


def _converted(error: ValidationError) -> bool:
    """Whether ``error`` only says a value has a type that the worker would convert."""
    if error.validator == "type":
        wanted = error.validator_value
        types = wanted if isinstance(wanted, list) else [wanted]
        return any(_converts_to(error.instance, t) for t in types)
    if error.validator in ("anyOf", "oneOf") and error.context:
        # One branch whose every complaint is a convertible type passes after conversion.
        branches: dict[Any, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        return any(all(_converted(sub) for sub in subs) for subs in branches.values())
    return False


def _describe(error: ValidationError, *, relative: bool = False) -> Iterator[str]:
    """``location: message`` lines for one error (``relative``: located from the value its
    ``anyOf`` / ``oneOf`` checked, and without a location for that value itself)."""
    loc = _location(error.relative_path if relative else error.absolute_path)
    prefix = f"{loc}." if loc else ""
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        for name in error.validator_value:
            if name not in instance:
                yield f"{prefix}{name}: Field required"
        return
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        for name in _additional(error.schema, instance):
            yield f"{prefix}{name}: unexpected argument"
        return
    message = _shorten(error.message, instance)
    if error.context:  # anyOf / oneOf: say why each form failed
        reasons = [reason for sub in error.context[:4] for reason in _describe(sub, relative=True)]
        message += " (" + "; ".join(reasons) + ")"
    if relative and not loc:
        yield message
    else:
        yield f"{loc or '(arguments)'}: {message}"


def _location(path: Iterable[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _additional(schema: dict[str, Any], instance: dict[str, Any]) -> list[str]:
    """The names of ``instance`` that neither ``properties`` nor ``patternProperties`` allow."""
    named = schema.get("properties") or {}
    patterns = list(schema.get("patternProperties") or {})
    return [
        name
        for name in instance
        if name not in named and not any(re.search(p, name) for p in patterns)
    ]


def _shorten(message: str, instance: Any) -> str:
    """``message`` with a long value in it cut to its start."""
    shown = repr(instance)
    if len(shown) <= _SHOWN_VALUE_CHARS:
        return message
    return message.replace(shown, shown[:_SHOWN_VALUE_CHARS] + "...", 1)


def _subschemas(schema: Any, at: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``schema`` and every schema nested in it, with where each is."""
    if not isinstance(schema, dict):
        return  # a boolean schema
    yield at, schema
    for key in _ONE:
        if key in schema:
            yield from _subschemas(schema[key], f"{at}.{key}")
    for key in _LIST:
        for index, sub in enumerate(schema.get(key) or []):
            yield from _subschemas(sub, f"{at}.{key}[{index}]")
    for key in _MAPPING:
        for name, sub in (schema.get(key) or {}).items():
            yield from _subschemas(sub, f"{at}.{key}.{name}")


def _check_reference(resolver: Any, reference: Any, at: str) -> None:
    if not isinstance(reference, str) or not reference.startswith("#"):
        raise ToolDefinitionError(
            f"{at} is {reference!r}; a reference must point inside the schema "
            '(such as "#/$defs/item"), since nothing outside it is fetched.'
        )
    try:
        resolver.lookup(reference)
    except Unresolvable:
        raise ToolDefinitionError(f"{at}: {reference!r} names nothing in the schema") from None
