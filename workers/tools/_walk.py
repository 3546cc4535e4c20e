"""A sorted, link-safe directory walk shared by the search tools (glob, grep)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def walk_files(
    base: Path,
    root_state: T,
    enter: Callable[[T, str], T | None],
    cancelled: threading.Event | None = None,
) -> Iterator[tuple[str, os.DirEntry[str], T]]:
    """Yield ``(relative_path, entry, parent_state)`` for each regular file under ``base``.

    ``enter(parent_state, name)`` decides whether to descend into a directory: it returns the
    state to carry into it, or None to prune its whole subtree. Entries come depth first in
    name order, so output is deterministic. Symbolic links are neither followed nor yielded: a
    link could lead out of the workspace or into a loop. ``relative_path`` is ``/``-separated
    and relative to ``base``. Directories that cannot be read are skipped. The walk stops
    early once ``cancelled`` is set.
    """
    stack: list[tuple[str, T, Iterator[os.DirEntry[str]]]] = [
        ("", root_state, _sorted_entries(str(base)))
    ]
    while stack:
        if cancelled is not None and cancelled.is_set():
            return
        prefix, state, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        relative = prefix + entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                child = enter(state, entry.name)
                if child is not None:
                    stack.append((relative + "/", child, _sorted_entries(entry.path)))
            elif entry.is_file(follow_symlinks=False):
                yield relative, entry, state
        except OSError:
            # The entry vanished or cannot be inspected; a search skips it rather than fail.
            continue


def join_relative(prefix: str, relative: str) -> str:
    """A path under the directory shown as ``prefix`` (``.`` being the workspace root)."""
    return relative if prefix == "." else f"{prefix}/{relative}"


def _sorted_entries(path: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(path) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return iter(())
    return iter(entries)
