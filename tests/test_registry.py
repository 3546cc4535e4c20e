"""The registry: names, duplicates, look-ups, loading a user's registry."""

from __future__ import annotations

import pytest

from executor import (
    ConfigurationError,
    DuplicateToolError,
    ToolRegistry,
    UnknownToolError,
    load_registry,
    tool,
)


@tool
def alpha() -> str:
    """Alpha."""
    return "a"


@tool
def beta() -> str:
    """Beta."""
    return "b"


def test_register_look_up_and_iterate() -> None:
    registry = ToolRegistry([alpha])
    registry.register(beta)
    assert registry.names() == ["alpha", "beta"]
    assert registry.get("beta") is beta
    assert [t.name for t in registry] == ["alpha", "beta"]
    assert "alpha" in registry
    assert len(registry) == 2


def test_duplicate_name_is_an_error_and_adds_nothing() -> None:
    registry = ToolRegistry([alpha])
    with pytest.raises(DuplicateToolError, match="'alpha' is already registered"):
        registry.register(beta, alpha)
    assert registry.names() == ["alpha"]


def test_unknown_name_lists_the_tools() -> None:
    with pytest.raises(UnknownToolError) as info:
        ToolRegistry([beta, alpha]).get("gamma")
    assert str(info.value) == "Unknown tool 'gamma'. Available tools: alpha, beta."


def test_only_and_merged_build_new_registries() -> None:
    registry = ToolRegistry([alpha, beta])
    assert registry.only(lambda t: t.name == "beta").names() == ["beta"]
    assert ToolRegistry([alpha]).merged(ToolRegistry([beta])).names() == ["alpha", "beta"]
    assert registry.names() == ["alpha", "beta"]


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("tests.support.sample_tools:registry", ["shout"]),
        ("tests.support.sample_tools:tool_list", ["whisper"]),
        ("tests.support.sample_tools:make_registry", ["whisper"]),
        ("tests.support.sample_tools:whisper", ["whisper"]),
    ],
)
def test_load_registry_from_an_import_string(spec: str, names: list[str]) -> None:
    assert load_registry(spec).names() == names


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must look like 'package.module:attribute'"),
        ("missing_module_xyz:registry", "Cannot import 'missing_module_xyz'"),
        ("tests.support.sample_tools:nothing", "has no attribute 'nothing'"),
        ("tests.support.sample_tools:not_tools", "is int, not a ToolRegistry"),
    ],
)
def test_load_registry_errors_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_registry(spec)
