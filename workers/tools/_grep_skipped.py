"""What grep on ripgrep left out as hidden or ignored, to name it when nothing matched.

rg does not say what it skipped (but in its debug log, which is no interface and doubles its
work), so a walk of our own finds it: the same entries ``_walk.walk_files`` would note,
reading the ignore files as rg does, with node_modules, .git and dist and files with a binary
name left out unnamed, as rg's override globs leave them out. Only the count and the first
few in name order are wanted, so this walk does not sort folders (the first few are picked
as it goes).

The walk runs in slices, between reads of rg's output, in the thread that reads it (a thread
of its own would hold the interpreter's lock for milliseconds at a time, and rg's next part
would wait to start). It costs about as much as rg's own walk of the tree, mostly in listing
folders, so it reads them through ``_listing``, which keeps a folder's listing while the
folder is unchanged.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterable

from workers.tools._grep_search import GREP_SKIPPED_DIRS, Findings, binary_name
from workers.tools._listing import Listing
from workers.tools._walk import Ignores, join_relative

# How many skipped paths the answer names (it counts them all).
_NAMED = 3


class SkippedWalk:
    """The entries under a folder that a search skips as hidden or ignored, found a slice at
    a time (``advance``): how many, and the first few in name order (a folder's path ends in
    "/"). Nothing below a skipped folder is counted: the search never enters it."""

    def __init__(self, base: str, ignores: Ignores) -> None:
        """The walk of the folder ``base``, where the rules ``ignores`` are in effect
        (``_walk.ignores_at``)."""
        self.count = 0
        self._first: list[tuple[tuple[str, ...], str]] = []  # (walk-order key, path)
        self._folders: list[tuple[str, str, Ignores]] = [(base, "", ignores)]

    @property
    def done(self) -> bool:
        """Whether the walk has ended."""
        return not self._folders

    @property
    def first(self) -> list[str]:
        """The first few skipped paths in name order, of those found so far."""
        return [path for _, path in self._first]

    def advance(self, until: float = math.inf) -> bool:
        """Walk on until the monotonic time ``until`` (a folder at least) or the end; True
        once the walk has ended."""
        folders = self._folders
        while folders:
            self._folder(*folders.pop())
            if time.monotonic() >= until:
                break
        return not folders

    def note(
        self, found: Findings, shown: str, deadline: float, cancelled: threading.Event
    ) -> None:
        """Name in ``found`` what was skipped (``shown`` being the folder's name), once the
        walk has ended; nothing if it has not by ``deadline`` or the call is cancelled."""
        while not self.done:
            if cancelled.is_set() or time.monotonic() >= deadline:
                return
            self.advance(min(deadline, time.monotonic() + 0.05))
        found.skipped = [join_relative(shown, path) for path in self.first]
        found.skipped_count = self.count

    def _folder(self, location: str, prefix: str, rules: Ignores) -> None:
        listed = Listing.read(location)
        if listed is None:
            return
        if listed.ignore_files:
            rules = rules.with_files(listed.ignore_files, prefix)
        check = rules.ignored if rules.layers else None
        for name, path in listed.folders:
            if name in GREP_SKIPPED_DIRS:
                continue
            relative = prefix + name
            if name[0] == "." or (check is not None and check(relative, name, is_dir=True)):
                self._note(relative + "/")
            else:
                self._folders.append((path, relative + "/", rules))
        if check is None:
            skipped: Iterable[str] = listed.hidden_files
        else:
            skipped = (
                name
                for name in listed.files
                if name[0] == "." or check(prefix + name, name, is_dir=False)
            )
        for name in skipped:
            if not binary_name(name):
                self._note(prefix + name)

    def _note(self, relative: str) -> None:
        self.count += 1
        key = tuple(relative.rstrip("/").split("/"))
        first = self._first
        if len(first) < _NAMED or key < first[-1][0]:
            bisect.insort(first, (key, relative))
            del first[_NAMED:]


def skipped_paths(base: str, ignores: Ignores) -> tuple[int, list[str]]:
    """How many entries under the folder ``base`` a search skips as hidden or ignored, and
    the first few in name order: ``SkippedWalk`` walked whole at once."""
    walk = SkippedWalk(base, ignores)
    walk.advance()
    return walk.count, walk.first
