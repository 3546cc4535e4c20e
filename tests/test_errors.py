"""The public exceptions: one module, one base, and the tree its docstring draws is the truth."""

from __future__ import annotations

import re

import pytest

import executor
import executor.client
import executor.lock
import executor.wire
from executor import _errors

_PUBLIC = [executor, executor.client, executor.lock, executor.wire]


def _exported_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for module in _PUBLIC:
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                found[f"{module.__name__}.{name}"] = value
    return found


@pytest.mark.parametrize("path", sorted(_exported_exceptions()))
def test_every_exported_exception_lives_in_the_errors_module(path: str) -> None:
    exception = _exported_exceptions()[path]
    assert exception.__module__ == "executor._errors", path
    assert issubclass(exception, executor.ToolpoolError)


def _drawn_parents() -> dict[str, str]:
    """Each class of the docstring's tree and the class drawn above it."""
    doc = _errors.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    parents: dict[str, str] = {}
    above: list[str] = []  # the last class drawn at each depth
    for indented in block.splitlines():
        line = indented[4:]
        branch = re.search(r"[├└]── (\w+)", line)
        if branch is None:
            if line and line[0] != "│" and line[0] != " ":
                above = [line.split()[0]]  # the root
            continue
        depth = branch.start() // 4 + 1
        above = [*above[:depth], branch.group(1)]
        parents[branch.group(1)] = above[depth - 1]
    return parents


def test_the_drawn_tree_holds_every_exception_under_its_real_parent() -> None:
    drawn = _drawn_parents()
    defined = {
        name: value
        for name, value in vars(_errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == _errors.__name__
    }
    assert set(drawn) | {"ToolpoolError"} == set(defined)
    for name, parent in drawn.items():
        assert defined[name].__bases__ == (defined[parent],), name
