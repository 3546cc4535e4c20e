"""The built-in tools as a model sees them: flags, schemas, and the exported formats.

The schemas are compared with a stored snapshot, so a change to what models are told is a
deliberate change: rerun with TOOLPOOL_UPDATE_SNAPSHOTS=1 to accept one, and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from executor import InvalidArgumentsError
from executor.contract import export_tools
from executor.contract._schema import check_schema, validate, validate_arguments
from workers import builtin_registry

SNAPSHOT = Path(__file__).parent / "snapshots" / "builtin_tools.json"

# The built-in tools' flags: (is_concurrency_safe, is_read_only, max_result_chars)
BUILTIN_FLAGS = {
    "get_weather": (True, True, None),
    "calculator": (True, True, None),
    "read_file": (True, True, 500),
    "write_file": (False, False, None),
    "list_directory": (True, True, None),
    "edit_file": (False, False, None),
    "glob": (True, True, None),
    "grep": (True, True, None),
    "bash": (False, False, None),
    # A session's background processes: reads run together, the rest alone in the session.
    "process_start": (False, False, 4000),
    "process_output": (True, True, 4000),
    "process_input": (False, False, 4000),
    "process_stop": (False, False, 4000),
    "process_list": (True, True, None),
}


def _described() -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
            "is_concurrency_safe": t.is_concurrency_safe,
            "is_read_only": t.is_read_only,
            "max_result_chars": t.max_result_chars,
        }
        for t in builtin_registry()
    ]


def test_the_built_in_tools_carry_seed_000s_flags() -> None:
    flags = {
        t.name: (t.is_concurrency_safe, t.is_read_only, t.max_result_chars)
        for t in builtin_registry()
    }
    assert flags == BUILTIN_FLAGS


def test_schemas_match_the_snapshot() -> None:
    current = json.dumps(_described(), indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("TOOLPOOL_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(current, encoding="utf-8")
    assert current == SNAPSHOT.read_text(encoding="utf-8"), (
        "Built-in tool schemas changed; if intended, rerun with TOOLPOOL_UPDATE_SNAPSHOTS=1"
    )


@pytest.mark.parametrize("tool_name", list(BUILTIN_FLAGS))
def test_schema_is_valid_and_refuses_extra_arguments(tool_name: str) -> None:
    schema = builtin_registry().get(tool_name).parameters
    check_schema(schema, tool_name)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False


# Arguments whose validity the exported schema and the tool's own validator must agree on,
# so the schema a model reads tells the truth about what the tool accepts.
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "a"}),
    ("read_file", {"path": "a", "offset": 5, "limit": 10}),
    ("read_file", {"path": "a", "offset": -1}),
    ("read_file", {"path": "a", "limit": 0}),
    ("read_file", {}),
    ("write_file", {"path": "a", "content": ""}),
    ("write_file", {"path": "a"}),
    ("edit_file", {"path": "a", "old_string": "x", "new_string": "y", "replace_all": True}),
    ("edit_file", {"path": "a", "old_string": "x"}),
    ("list_directory", {}),
    ("glob", {"pattern": "**/*.py"}),
    ("glob", {"pattern": "*", "path": "src"}),
    ("grep", {"pattern": "def "}),
    ("grep", {"pattern": "x", "path": "a", "extra": 1}),
    ("bash", {"command": "ls"}),
    ("bash", {"command": "ls", "timeout": 5}),
    ("bash", {"command": "ls", "timeout": 0}),
    ("bash", {"command": ""}),
    ("calculator", {"expression": "1+1"}),
    ("calculator", {"expression": 3}),
    ("get_weather", {"city": "Berlin"}),
    ("get_weather", {"town": "Berlin"}),
]


@pytest.mark.parametrize(("tool_name", "arguments"), SAMPLES)
def test_schema_and_validator_agree(tool_name: str, arguments: dict[str, Any]) -> None:
    item = builtin_registry().get(tool_name)
    schema_ok = validate(item.parameters, arguments) == []
    try:
        item.validate(arguments)
        validator_ok = True
    except InvalidArgumentsError:
        validator_ok = False
    assert schema_ok == validator_ok


def test_exports_carry_every_tool_in_each_format() -> None:
    openai = export_tools(builtin_registry(), "openai")
    anthropic = export_tools(builtin_registry(), "anthropic")
    mcp = export_tools(builtin_registry(), "mcp")
    assert [t["function"]["name"] for t in openai] == list(BUILTIN_FLAGS)
    assert all(t["type"] == "function" for t in openai)
    assert [t["name"] for t in anthropic] == list(BUILTIN_FLAGS)
    assert all("input_schema" in t for t in anthropic)
    hints = {t["name"]: t["annotations"] for t in mcp}
    assert hints["read_file"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
    }
    assert hints["bash"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
    }
    assert all("inputSchema" in t for t in mcp)


@pytest.mark.parametrize(
    ("tool_name", "arguments"),
    [
        ("get_weather", {"town": "Berlin"}),
        ("write_file", {"path": "a"}),
        ("grep", {"pattern": "x", "path": "a", "extra": 1}),
    ],
)
def test_client_and_worker_word_missing_and_unexpected_arguments_alike(
    tool_name: str, arguments: dict[str, Any]
) -> None:
    item = builtin_registry().get(tool_name)
    with pytest.raises(InvalidArgumentsError) as on_worker:
        item.validate(arguments)
    with pytest.raises(InvalidArgumentsError) as on_client:
        validate_arguments(tool_name, item.parameters, arguments)
    assert on_client.value.problems == on_worker.value.problems
    assert str(on_client.value) == str(on_worker.value)
