"""Which of the pool's tools an adapter offers the model."""

from __future__ import annotations

from collections.abc import Iterable

from executor.contract import ToolInfo


def check_names(names: Iterable[str] | None) -> list[str] | None:
    """``names`` as a list without repeats; a bare string is refused (it would be read as
    its letters)."""
    if isinstance(names, str):
        raise TypeError(f"names must be a list of tool names, not the string {names!r}")
    return None if names is None else list(dict.fromkeys(names))


def chosen(infos: list[ToolInfo], names: list[str] | None) -> list[ToolInfo]:
    """The tools of ``names``, in that order (all of ``infos`` without names); a name the
    pool does not serve is a ``ValueError`` naming it and the tools served."""
    if names is None:
        return infos
    by_name = {info.name: info for info in infos}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        served = ", ".join(sorted(by_name)) or "(none)"
        raise ValueError(
            f"The pool serves no tool named {', '.join(map(repr, unknown))}; "
            f"tools served: {served}."
        )
    return [by_name[name] for name in names]
