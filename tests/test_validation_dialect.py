"""One dialect for a bad call: the client's check and the worker's words for the same fault."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator, BaseModel, Field

from executor import ErrorType, InvalidArgumentsError, ToolCall, ToolRegistry, ToolResult
from executor.contract import ToolInfo
from executor.wire import invalid_arguments_text
from workers.pipeline._validate import check_call
from workers.tools.files import read_file

registry = ToolRegistry()


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: Annotated[int, Field(ge=0)]
    label: str = ""


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("must be even")
    return value


@registry.tool
def sample(
    count: Annotated[int, Field(ge=1, le=10)],
    ratio: Annotated[float, Field(gt=0, lt=1)] = 0.5,
    mode: Literal["fast", "slow"] = "fast",
    color: Color = Color.RED,
    code: Annotated[str, Field(pattern=r"^[a-z]+$", min_length=2, max_length=4)] = "ab",
    tags: Annotated[list[str], Field(max_length=2)] = [],  # noqa: B006 (pydantic copies it)
    maybe: int | None = None,
    pair: int | str = 0,
    flag: bool = False,
    even: Annotated[int, AfterValidator(_even)] = 0,
    point: Point | None = None,
) -> str:
    """A tool with one of each kind of constraint."""
    return "ran"


registry.register(read_file)


def _client(name: str, arguments: dict[str, Any]) -> str:
    """The client's answer: the call checked against the schema as the workers publish it."""
    info = ToolInfo.model_validate_json(ToolInfo.of(registry.get(name)).model_dump_json())
    with pytest.raises(InvalidArgumentsError) as refused:
        info.validate_arguments(arguments)
    return invalid_arguments_text(name, refused.value.problems)


def _worker(name: str, arguments: dict[str, Any]) -> str:
    checked = check_call(ToolCall(name=name, arguments=arguments), registry)
    assert isinstance(checked, ToolResult), "the worker accepted the call"
    assert checked.error_type is ErrorType.INVALID_ARGUMENTS
    return checked.content


CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("read_file", {"path": "a", "limit": 0}, "limit: 0 is less than the minimum of 1"),
    ("read_file", {"path": "a", "limit": 2001}, "limit: 2001 is greater than the maximum of 2000"),
    ("read_file", {"path": "a", "offset": -1}, "offset: -1 is less than the minimum of 0"),
    ("read_file", {"path": "a", "offset": "x"}, "offset: 'x' is not of type 'integer'"),
    ("read_file", {"path": "a", "offset": 1.5}, "offset: 1.5 is not of type 'integer'"),
    ("read_file", {"path": 7}, "path: 7 is not of type 'string'"),
    ("read_file", {"path": None}, "path: None is not of type 'string'"),
    ("read_file", {}, "path: Field required"),
    ("read_file", {"path": "a", "lines": 3}, "lines: unexpected argument"),
    ("sample", {"count": 0}, "count: 0 is less than the minimum of 1"),
    ("sample", {"count": 11}, "count: 11 is greater than the maximum of 10"),
    ("sample", {"count": 1, "ratio": 0}, "ratio: 0 is less than or equal to the minimum of 0"),
    ("sample", {"count": 1, "ratio": 1}, "ratio: 1 is greater than or equal to the maximum of 1"),
    ("sample", {"count": 1, "mode": "medium"}, "mode: 'medium' is not one of ['fast', 'slow']"),
    ("sample", {"count": 1, "color": "green"}, "color: 'green' is not one of ['red', 'blue']"),
    ("sample", {"count": 1, "code": "AB"}, "code: 'AB' does not match '^[a-z]+$'"),
    ("sample", {"count": 1, "code": "a"}, "code: 'a' is too short"),
    ("sample", {"count": 1, "code": "abcde"}, "code: 'abcde' is too long"),
    ("sample", {"count": 1, "tags": ["a", "b", "c"]}, "tags: ['a', 'b', 'c'] is too long"),
    ("sample", {"count": 1, "tags": ["a", 2]}, "tags[1]: 2 is not of type 'string'"),
    ("sample", {"count": 1, "tags": "a"}, "tags: 'a' is not of type 'array'"),
    ("sample", {"count": 1, "maybe": "x"}, "maybe: 'x' is not valid under any of"),
    ("sample", {"count": 1, "pair": [1]}, "pair: [1] is not valid under any of"),
    ("sample", {"count": 1, "flag": "perhaps"}, "flag: 'perhaps' is not of type 'boolean'"),
    ("sample", {"count": 1, "even": 3}, "even: Value error, must be even"),
    ("sample", {"count": 1, "point": {"x": -1}}, "point: {'x': -1} is not valid under any of"),
    (
        "sample",
        {"count": 1, "point": {"y": 1}},
        "point: {'y': 1} is not valid under any of the given schemas (x: Field required;",
    ),
    ("sample", {"count": 0, "mode": "x", "z": 1}, "count: 0 is less than the minimum of 1"),
]


@pytest.mark.parametrize(("name", "arguments", "expected"), CALLS)
def test_the_client_and_the_worker_word_a_bad_call_alike(
    name: str, arguments: dict[str, Any], expected: str
) -> None:
    client = _client(name, arguments) if "even" not in arguments else None
    worker = _worker(name, arguments)

    assert f"- {expected}" in worker
    if client is not None:  # a custom validator's fault only the worker can find
        assert worker == client


def test_every_fault_of_a_call_is_listed_once_in_the_schema_order() -> None:
    text = _worker("sample", {"count": 0, "mode": "x", "z": 1, "even": 3})

    problems = [line for line in text.splitlines() if line.startswith("- ")]
    assert problems == [
        "- count: 0 is less than the minimum of 1",
        "- mode: 'x' is not one of ['fast', 'slow']",
        "- z: unexpected argument",
        "- even: Value error, must be even",
    ]


def test_values_the_worker_converts_pass_both_checks() -> None:
    arguments = {"count": "3", "ratio": "0.25", "flag": "yes"}

    ToolInfo.of(registry.get("sample")).validate_arguments(arguments)
    checked = check_call(ToolCall(name="sample", arguments=arguments), registry)
    assert not isinstance(checked, ToolResult)
    assert checked[1]["count"] == 3
