"""The registry: tools by name, and loading a user's registry from an import string."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, overload

from executor._errors import ConfigurationError, DuplicateToolError, UnknownToolError
from executor._settings import SettingsGroup
from executor.contract._tool import Tool, tool


class ToolRegistry:
    """Tools by name, in registration order. A name can be registered once."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.register(*tools)

    def register(self, *tools: Tool) -> None:
        """Add tools; a name already taken raises ``DuplicateToolError`` and adds none."""
        names = [t.name for t in tools]
        for name in names:
            if name in self._tools or names.count(name) > 1:
                raise DuplicateToolError(f"A tool named {name!r} is already registered")
        for item in tools:
            if not isinstance(item, Tool):
                raise TypeError(f"register() takes Tool objects, got {item!r}")
            self._tools[item.name] = item

    @overload
    def tool(self, function: Callable[..., Any], /) -> Tool: ...

    @overload
    def tool(self, /, **options: Any) -> Callable[[Callable[..., Any]], Tool]: ...

    def tool(
        self, function: Callable[..., Any] | None = None, /, **options: Any
    ) -> Tool | Callable[[Callable[..., Any]], Tool]:
        """Decorator: like ``executor.tool``, and registers the result here."""

        def build(func: Callable[..., Any]) -> Tool:
            created: Tool = tool(**options)(func)
            self.register(created)
            return created

        return build(function) if function is not None else build

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``UnknownToolError`` (listing the tools) if none is."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, self._tools) from None

    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def settings_classes(self) -> tuple[type[SettingsGroup], ...]:
        """The settings groups of the tools here (``@tool(settings=...)``), each once."""
        found = (item.settings_class for item in self._tools.values())
        return tuple(dict.fromkeys(kind for kind in found if kind is not None))

    def merged(self, other: ToolRegistry) -> ToolRegistry:
        """A new registry with this one's tools followed by ``other``'s."""
        return ToolRegistry([*self, *other])

    def only(self, predicate: Callable[[Tool], bool]) -> ToolRegistry:
        """A new registry with the tools for which ``predicate`` is true."""
        return ToolRegistry(t for t in self if predicate(t))

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"


def import_object(spec: str, what: str, example: str) -> Any:
    """The object ``module.path:attribute`` names; ``ConfigurationError`` saying which part
    failed (``what``: "registry", "check hook"; ``example``: a spec of the right form)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"{what[0].upper()}{what[1:]} {spec!r} must look like 'package.module:attribute', "
            f"e.g. {example!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        problem = f"Cannot import {module_name!r} for {what} {spec!r}: {exc}"
        raise ConfigurationError(problem) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"Module {module_name!r} has no attribute {attribute!r}") from None


def load_registry(spec: str) -> ToolRegistry:
    """Load ``module.path:attribute``: a ``ToolRegistry``, an iterable of tools, or a
    function returning either."""
    value = import_object(spec, "registry", "mypkg.tools:registry")
    if callable(value) and not isinstance(value, (ToolRegistry, Tool)):
        value = value()
    if isinstance(value, ToolRegistry):
        return value
    if isinstance(value, Tool):
        return ToolRegistry([value])
    try:
        return ToolRegistry(value)
    except TypeError:
        raise ConfigurationError(
            f"{spec!r} is {type(value).__name__}, not a ToolRegistry or an iterable of tools"
        ) from None
