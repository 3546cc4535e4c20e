"""The @tool decorator: schema, validation, context injection, explicit schemas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from executor import InvalidArgumentsError, Tool, ToolContext, ToolDefinitionError, tool
from executor.contract import Workspace
from executor.contract._schema import validate_arguments
from executor.contract._tool import parse_docstring


@tool(concurrency_safe=True, read_only=True, max_result_chars=500, timeout=5)
def sample(
    ctx: ToolContext,
    path: str,
    mode: Literal["a", "b"] = "a",
    count: Annotated[int, Field(ge=1, description="How many.")] = 3,
) -> str:
    """Do a sample thing.

    A second paragraph.

    Args:
        path: Where to look,
            relative to the workspace.
        mode: Which mode.
        count: Ignored: Annotated wins.
    """
    return f"{ctx.workspace.root.name}:{path}:{mode}:{count}"


def test_flags_and_limits_are_kept() -> None:
    assert isinstance(sample, Tool)
    assert (sample.name, sample.is_concurrency_safe, sample.is_read_only) == ("sample", True, True)
    assert (sample.max_result_chars, sample.timeout, sample.takes_context) == (500, 5, True)


def test_defaults_are_exclusive_and_not_read_only() -> None:
    @tool
    def plain(x: int) -> int:
        """Plain."""
        return x

    assert not plain.is_concurrency_safe
    assert not plain.is_read_only
    assert plain.max_result_chars is None


def test_schema_comes_from_the_signature_and_docstring() -> None:
    assert sample.description == "Do a sample thing.\n\nA second paragraph."
    assert sample.parameters == {
        "type": "object",
        "additionalProperties": False,
        "required": ["path"],
        "properties": {
            "path": {"type": "string", "description": "Where to look, relative to the workspace."},
            "mode": {
                "type": "string",
                "enum": ["a", "b"],
                "default": "a",
                "description": "Which mode.",
            },
            "count": {"type": "integer", "minimum": 1, "default": 3, "description": "How many."},
        },
    }


def test_validation_converts_and_fills_defaults() -> None:
    assert sample.validate({"path": "x", "count": "7"}) == {"path": "x", "mode": "a", "count": 7}


def test_validation_lists_every_problem() -> None:
    with pytest.raises(InvalidArgumentsError) as info:
        sample.validate({"mode": "c", "count": 0, "extra": 1})
    problems = "\n".join(info.value.problems)
    assert "path: Field required" in problems
    assert "mode: 'c' is not one of ['a', 'b']" in problems
    assert "count: 0 is less than the minimum of 1" in problems
    assert "extra: unexpected argument" in problems


def test_context_is_injected_and_not_in_the_schema(tmp_path: Any) -> None:
    ctx = ToolContext(workspace=Workspace(tmp_path))
    assert "ctx" not in sample.parameters["properties"]
    assert sample.invoke(ctx, sample.validate({"path": "p"})) == f"{tmp_path.name}:p:a:3"


def test_explicit_schema_is_used_and_enforced() -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "string", "minLength": 1},
            "n": {"type": "integer", "default": 2},
        },
        "required": ["q"],
    }

    @tool(parameters=schema, description="Search.")
    def search(**arguments: Any) -> str:
        return repr(sorted(arguments.items()))

    assert search.parameters["additionalProperties"] is False
    assert search.validate({"q": "x"}) == {"q": "x", "n": 2}
    with pytest.raises(InvalidArgumentsError) as info:
        search.validate({"q": "", "n": "2", "z": 1})
    assert info.value.problems == [
        "q: '' should be non-empty",
        "n: '2' is not of type 'integer'",
        "z: unexpected argument",
    ]
    with pytest.raises(InvalidArgumentsError) as info:
        search.validate({})
    assert info.value.problems == ["q: Field required"]


def test_explicit_schema_may_use_any_draft_2020_12_keyword() -> None:
    # oneOf, format, $defs and $ref, which the hand-written subset validator refused.
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date"},
            "size": {"oneOf": [{"type": "integer", "minimum": 1}, {"enum": ["all"]}]},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "uniqueItems": True},
        },
        "$defs": {"tag": {"type": "string", "pattern": "^[a-z]+$"}},
    }

    @tool(parameters=schema, description="Tagged.")
    def tagged(**arguments: Any) -> None:
        pass

    valid = {"when": "2024-02-29", "size": "all", "tags": ["a", "b"]}
    assert tagged.validate(valid) == valid
    with pytest.raises(InvalidArgumentsError) as info:
        tagged.validate({"when": "2023-02-29", "size": 0, "tags": ["a", "a", "B"]})
    assert info.value.problems == [
        "when: '2023-02-29' is not a 'date'",
        "size: 0 is not valid under any of the given schemas "
        "(0 is less than the minimum of 1; 0 is not one of ['all'])",
        "tags[2]: 'B' does not match '^[a-z]+$'",
        "tags: ['a', 'a', 'B'] has non-unique elements",
    ]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "object", "requried": ["x"]}, r"uses \['requried'\], not JSON Schema 2020-12"),
        (
            {"type": "object", "properties": {"x": {"type": "integr"}}},
            r"parameters\.properties\.x\.type is not valid JSON Schema: 'integr' is not one of",
        ),
        (
            {"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}},
            r"parameters\.properties\.x\.pattern is not valid JSON Schema: '\(' is not a 'regex'",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
            "a reference must point inside the schema",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
            "names nothing in the schema",
        ),
        ({"type": "array"}, "parameters must have type 'object'"),
        ([], "must be a JSON Schema object"),
    ],
)
def test_explicit_schema_that_is_not_valid_is_refused(parameters: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        tool(parameters=parameters, description="x")(lambda: None)


def test_validate_arguments_lists_problems_with_long_values_cut() -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    validate_arguments("read", schema, {"path": "a", "n": 1})
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments("read", schema, {"path": ["x" * 10_000], "extra": 1})
    assert info.value.tool_name == "read"
    problems = info.value.problems
    assert problems[0].startswith("path: ['xxxx")
    assert problems[0].endswith("x... is not of type 'string'")
    assert len(problems[0]) < 200
    assert problems[1:] == ["extra: unexpected argument"]
    with pytest.raises(ToolDefinitionError, match="not valid JSON Schema"):
        validate_arguments("read", {"type": "nope"}, {})


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.no"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="must be 1-64 characters"):
        tool(name=name, description="d")(lambda: None)


def test_missing_description_is_refused() -> None:
    def undocumented() -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="needs a description"):
        tool(undocumented)


def test_var_keyword_parameters_need_an_explicit_schema() -> None:
    def loose(**kwargs: Any) -> None:
        """Loose."""

    with pytest.raises(ToolDefinitionError, match="plain named parameter"):
        tool(loose)


def test_docstring_parser_handles_types_and_continuations() -> None:
    summary, params = parse_docstring(
        """Summary.

        Args:
            a (int): First
                continued.
            b: Second.

        Returns:
            Something.
        """
    )
    assert summary == "Summary."
    assert params == {"a": "First continued.", "b": "Second."}


def test_docstring_parser_reads_numpy_and_rest_styles() -> None:
    numpy = parse_docstring(
        """Summary.

        Parameters
        ----------
        a : int
            First
            continued.
        b : str, optional
            Second.
        """
    )
    rest = parse_docstring(
        """Summary.

        :param a: First continued.
        :param b: Second.
        :returns: Something.
        """
    )
    assert numpy == rest == ("Summary.", {"a": "First continued.", "b": "Second."})
