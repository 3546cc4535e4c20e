"""Lazy public faces: a package's public names, each imported from its module on first use.

A face lists its names in ``__all__`` and in a table of name -> module, and imports them for
type checkers only (``if TYPE_CHECKING:``); ``face`` gives the module ``__getattr__`` (PEP
562) and ``__dir__`` that serve the names at run time. So importing a package loads none of
its modules until one of its names is used (a worker loads no client module).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any


def face(
    name: str,
    module_of: Mapping[str, str],
    namespace: MutableMapping[str, Any],
    public: Sequence[str],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``name`` whose globals are ``namespace``:
    a public name is imported from ``module_of[name]`` on first use and kept in ``namespace``."""

    def getattr_(attribute: str) -> object:
        module = module_of.get(attribute)
        if module is None:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(module), attribute)
        namespace[attribute] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *public})

    return getattr_, dir_
