"""A sorted, link-safe directory walk shared by the search tools (glob, grep), and the
``.gitignore``/``.ignore`` files in effect in each folder it enters (``Ignores``; one file's
rules: ``_ignore_file``).

A deeper file wins over the files above it, and ``.ignore`` (as ripgrep reads it) over
``.gitignore`` in the same folder. A rule is matched against an entry's own path, and the walk
never enters an ignored folder: as in git, nothing below an ignored folder can be re-included.
This module imports only the standard library, as grep's helper process (``_grep_proc``) must
start fast.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from workers.tools._ignore_file import IgnoreFile, load_ignore_file

T = TypeVar("T")

# In one folder, a rule of the first listed file wins over a rule of the second.
IGNORE_FILES = (".ignore", ".gitignore")
# How many skipped entries a walk remembers by name (it counts them all).
_SKIPPED_NAMED = 3


@dataclass
class Skipped:
    """What a walk left out because it is hidden or ignored: a count and the first few."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, relative: str) -> None:
        self.count += 1
        if len(self.examples) < _SKIPPED_NAMED:
            self.examples.append(relative)


def walk_files(
    base: Path,
    root_state: T,
    enter: Callable[[T, str], T | None],
    cancelled: threading.Event | None = None,
    *,
    ignores: Ignores | None = None,
    skip_hidden: bool = False,
    named: frozenset[str] = frozenset(),
    wanted: Callable[[T, str], bool] | None = None,
    skipped: Skipped | None = None,
) -> Iterator[tuple[str, os.DirEntry[str], T]]:
    """Yield ``(relative_path, entry, parent_state)`` for each regular file under ``base``.

    ``enter(parent_state, name)`` decides whether to descend into a directory: it returns the
    state to carry into it, or None to prune its whole subtree. Entries come depth first in
    name order, so output is deterministic. Symbolic links are neither followed nor yielded: a
    link could lead out of the workspace or into a loop. ``relative_path`` is ``/``-separated
    and relative to ``base``. Directories that cannot be read are skipped. The walk stops
    early once ``cancelled`` is set.

    ``ignores`` (the rules in effect at ``base``, see ``ignores_at``) leaves out what ignore
    files exclude, reading those met on the way; ``skip_hidden`` leaves out names that start
    with "."; both are counted in ``skipped`` (a folder's path ends in "/"). An entry whose
    name is in ``named`` is kept even if ignored, and nothing below such a folder is ignored.
    ``wanted(parent_state, name)``, if given, drops the files it refuses first, uncounted.
    """
    listing = _sorted_entries(str(base))
    if ignores is not None:
        ignores = ignores.inside(listing, "")
    stack: list[tuple[str, T, Iterator[os.DirEntry[str]], Ignores | None]] = [
        ("", root_state, iter(listing), ignores)
    ]
    while stack:
        if cancelled is not None and cancelled.is_set():
            return
        prefix, state, entries, rules = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        name = entry.name
        relative = prefix + name
        try:
            if entry.is_dir(follow_symlinks=False):
                child = enter(state, name)
                if child is None:
                    continue
                if skip_hidden and name.startswith("."):
                    _note(skipped, relative + "/")
                    continue
                inner = rules
                if rules is not None:
                    if name in named:
                        inner = None
                    elif rules.ignored(relative, name, is_dir=True):
                        _note(skipped, relative + "/")
                        continue
                listing = _sorted_entries(entry.path)
                if inner is not None:
                    inner = inner.inside(listing, relative + "/")
                stack.append((relative + "/", child, iter(listing), inner))
            elif entry.is_file(follow_symlinks=False):
                if wanted is not None and not wanted(state, name):
                    continue
                if (skip_hidden and name.startswith(".")) or (
                    rules is not None
                    and name not in named
                    and rules.ignored(relative, name, is_dir=False)
                ):
                    _note(skipped, relative)
                    continue
                yield relative, entry, state
        except OSError:
            # The entry vanished or cannot be inspected; a search skips it rather than fail.
            continue


def join_relative(prefix: str, relative: str) -> str:
    """A path under the directory shown as ``prefix`` (``.`` being the workspace root)."""
    return relative if prefix == "." else f"{prefix}/{relative}"


def _note(skipped: Skipped | None, relative: str) -> None:
    if skipped is not None:
        skipped.add(relative)


def _sorted_entries(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as listing:
            return sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return []


# -------------------------------------------------------------------------- ignore rules


def ignores_at(root: Path, base: Path) -> Ignores | None:
    """The ignore rules in effect in folder ``base``, from the files of the folders above it
    up to the workspace ``root`` (``base``'s own files are read by the walk).

    None when ``base`` is, or is inside, a hidden or ignored folder: a search told to look
    there explicitly (``path=".venv"``) skips nothing below it, not even what the ignore files
    inside it exclude (a virtual environment's own ``.gitignore`` says ``*``).
    """
    try:
        parts = base.relative_to(root).parts
    except ValueError:
        return Ignores()
    ignores = Ignores()
    folder, prefix = root, ""
    for part in parts:
        ignores = ignores.inside_folder(str(folder), prefix)
        if part.startswith(".") or ignores.ignored(prefix + part, part, is_dir=True):
            return None
        folder, prefix = folder / part, f"{prefix}{part}/"
    return ignores.rebased(prefix)


@dataclass(frozen=True)
class Ignores:
    """The ignore files in effect in one folder of a walk, the one that wins first.

    Each layer is ``(head, cut, rules)``: for an entry at walk-relative path ``relative``, the
    path its file's rules see is ``head + relative[cut:]`` (relative to that file's folder).
    """

    layers: tuple[tuple[str, int, IgnoreFile], ...] = ()

    def ignored(self, relative: str, name: str, *, is_dir: bool) -> bool:
        """Whether the entry at walk-relative path ``relative`` (named ``name``) is ignored."""
        for head, cut, rules in self.layers:
            verdict = rules.verdict(head + relative[cut:], name, is_dir)
            if verdict is not None:
                return verdict
        return False

    def inside(self, listing: Sequence[os.DirEntry[str]], prefix: str) -> Ignores:
        """The rules inside the folder listed as ``listing``, at walk-relative ``prefix``."""
        found = {entry.name: entry.path for entry in listing if entry.name in IGNORE_FILES}
        return self.with_files([found[name] for name in IGNORE_FILES if name in found], prefix)

    def inside_folder(self, folder: str, prefix: str) -> Ignores:
        """The rules inside ``folder``, at walk-relative ``prefix``, without listing it."""
        return self.with_files([os.path.join(folder, name) for name in IGNORE_FILES], prefix)

    def with_files(self, paths: Sequence[str], prefix: str) -> Ignores:
        """The rules inside the folder at walk-relative ``prefix`` whose ignore files are at
        ``paths`` (in the order of ``IGNORE_FILES``)."""
        added = [
            ("", len(prefix), rules)
            for path in paths
            if (rules := load_ignore_file(path)) is not None
        ]
        return Ignores((*added, *self.layers)) if added else self

    def rebased(self, prefix: str) -> Ignores:
        """These rules for a walk from the folder at walk-relative ``prefix`` (an ancestor's
        walk), which must lie below each layer's folder."""
        return Ignores(tuple((head + prefix[cut:], 0, rules) for head, cut, rules in self.layers))
