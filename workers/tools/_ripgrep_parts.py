"""grep's tree cut into parts, consecutive in name order, for rg processes to search at once.

grep answers with the first 50 matching lines in name order. rg gives lines in name order
only from a one-threaded walk (``--sort path``), and its parallel walk in no set order, so
the tree is cut into parts that follow one another in name order and several rg processes
search them at once: the first 50 lines are known as soon as the parts before the 50th one
have been searched. The first parts, one a core, are small and searched in order, each by a
one-threaded rg that prints its lines in name order and is stopped at its 50th (where
matches are dense, that ends the search early); they share the first sixteenth of the
entries by weight, read from each folder's listing, so that one heavy folder does not hold
the answer back while the other cores wait. The later parts double in size, each searched by
rg's parallel walk, so that the last and largest keeps every core busy. Each rg process
costs 2 to 7 ms of a core to start (compiling a Unicode ``\\w`` is most of it): hence few
parts.

The parts are cut along the entries of the folder searched, and of its subfolders in turn
while there are too few entries to cut (a project whose code is all in ``src/``). A part is
searched in one of two ways:

- Where no ignore file is in effect along the folders listed (nor above them), a part's
  entries are given to rg by name (``Part.paths``): those rg would search in its walk of the
  folder, that is all but hidden ones, node_modules, .git and dist, links, binary extensions
  and files over 10 MB. So the ignore rules need no reading here. One nuance: rg stops
  searching a file it was given by name at a NUL byte rather than at the 64 KB block that
  holds it (a file with a NUL past its first block, the lines just before the NUL).
- Else a part is the folder searched less everything outside the part: its rg walks the same
  folder, reading the same ignore files, and is told by override globs (``--glob=!/name``,
  anchored at rg's working folder, which is the folder searched) not to enter the rest.
  This costs a walk in order more: rg's one-threaded walk lists every folder it meets, even
  one a glob leaves out (a part of site-packages, 270 entries, pays ~7 ms for it).

A folder with too many entries, or a name a glob cannot spell, is not cut into. Each part
keeps only the lines inside its own range of names (``Part.holds``), so parts never report a
line twice, even if a name was added after the folder was listed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from workers.tools._grep_search import BINARY_EXTENSIONS, GREP_MAX_FILE_BYTES, GREP_SKIPPED_DIRS
from workers.tools._listing import Listing
from workers.tools._walk import IGNORE_FILES, Ignores

# Folders are listed, and cut into, until the tree has this many entries to cut along.
MIN_ENTRIES = 64
# At most this many folders are listed to find them.
MAX_LISTED_FOLDERS = 32
# A folder with more entries is not cut into: each part would need a glob per entry left out.
MAX_FOLDER_ENTRIES = 1000
# The parts searched in order: one for each process searching at once, together the first
# 1/HEAD_SHARE of the entries, shared out by their weight.
HEAD_SHARE = 16
# A subfolder weighs as much as this many files (a leaf's weight is read from its listing).
_FOLDER_WEIGHT = 8
# What a glob must escape with a backslash: its special characters, and the last of a name's
# trailing spaces (rg reads globs as gitignore lines, which lose their trailing spaces).
_GLOB_SPECIAL = re.compile(r"[\\*?\[\]{}]| (?=/|\Z)")
# Names no glob can spell: with a control character, or not UTF-8 (a surrogate escape).
_UNSPELLABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
# The files rg reads rules from (.rgignore is rg's own).
_RULES_FILES = frozenset({*IGNORE_FILES, ".rgignore"})

Key = tuple[bytes, ...]


@dataclass(frozen=True)
class Part:
    """Entries of the tree consecutive in name order, searched by one rg process.

    ``globs`` are the rg arguments that keep it out of the rest of the tree, or ``paths``
    (relative to the folder searched) what rg is given instead of that folder; it holds the
    paths from ``low`` (None: from the first) up to, not including, ``high`` (None: to the
    last), as ``path_key`` sorts them. ``in_order``: searched by one thread in name order,
    so that its lines come sorted and it may stop at its 50th; else by rg's parallel walk.
    """

    globs: tuple[str, ...]
    low: Key | None
    high: Key | None
    in_order: bool
    paths: tuple[str, ...] | None = None

    def holds(self, key: Key) -> bool:
        """Whether the path sorted as ``key`` is inside this part."""
        return (self.low is None or key >= self.low) and (self.high is None or key < self.high)

    def searched_in_order(self) -> Part:
        """The same part, searched in order."""
        return replace(self, in_order=True)


# The whole tree: searched in parallel (one that cannot be cut), or in order (a small one).
WHOLE = Part((), None, None, in_order=False)
SMALL = Part((), None, None, in_order=True)


def cut_tree(base: str, ignores: Ignores | None, slots: int) -> list[Part]:
    """The parts of the folder ``base``, in name order, for ``slots`` processes at once.

    ``ignores`` are the rules in effect at ``base`` (None when it is searched whole, hidden
    and ignored entries included): folders they leave out are not listed, as rg does not
    enter them. One part, the whole tree searched in parallel, if it cannot be cut; searched
    in order if it is small (``MIN_ENTRIES`` files at most), which one rg does at once.
    """
    whole = ignores is None
    top = _Folder.listed(base, (), "--glob=!", ignores)
    if top is None:
        return [WHOLE]
    known = top.open_until(MIN_ENTRIES, hidden=whole)
    leaves: list[_Entry] = []
    top.number(leaves)
    if known and len(leaves) <= MIN_ENTRIES:
        return [SMALL]
    if len(leaves) < 2:
        return [WHOLE]
    # By name where no rules are in effect: none above (layers) and none in a folder listed.
    by_name = whole or (ignores is not None and not ignores.layers and not top.has_rules())
    parts: list[Part] = []
    start = 0
    for size, in_order in _sizes(leaves, slots):
        end = start + size
        low = None if start == 0 else _key(leaves[start].path)
        high = None if end == len(leaves) else _key(leaves[end].path)
        if not by_name:
            parts.append(Part(tuple(top.globs_outside(start, end)), low, high, in_order))
        elif paths := tuple(e.relative for e in leaves[start:end] if e.searched(whole)):
            parts.append(Part((), low, high, in_order, paths))
        start = end
    return parts


def _sizes(leaves: list[_Entry], slots: int) -> list[tuple[int, bool]]:
    """How many leaves each part takes, and whether it is searched in order: up to ``slots``
    small parts in order, of about as much work each (``_weight``), then parts searched in
    parallel, the first as large as those together, each next one twice as large."""
    count = len(leaves)
    head = max(1, count // (HEAD_SHARE * slots))
    heads, left = 0, count
    while heads < slots and left > head:
        heads, left = heads + 1, left - head
    region = count - left
    sizes = [(size, True) for size in _balanced([_weight(e) for e in leaves[:region]], heads)]
    size = max(1, region)
    while left > 0:
        take = left if left < 2 * size else size
        sizes.append((take, False))
        left -= take
        size *= 2
    return sizes


def _weight(entry: _Entry) -> int:
    """About how much searching a leaf takes, from its listing alone: a file 1, a folder 1
    for each of its files and ``_FOLDER_WEIGHT`` for each of its folders."""
    if entry.kind != "folder":
        return 1
    listed = Listing.read(entry.location)
    if listed is None:
        return 1
    return max(1, len(listed.files) + _FOLDER_WEIGHT * len(listed.folders))


def _balanced(weights: list[int], groups: int) -> list[int]:
    """How many of ``weights``, in order, each of ``groups`` runs takes (at least one), so
    that the runs' sums are as even as may be."""
    total = sum(weights)
    sizes: list[int] = []
    start = reached = 0
    for group in range(1, groups):
        target = total * group / groups
        end = start + 1
        reached += weights[start]
        # Take the next one while that brings the sum nearer the target, leaving one each
        # for the runs still to come.
        while end < len(weights) - (groups - group) and abs(reached + weights[end] - target) <= abs(
            reached - target
        ):
            reached += weights[end]
            end += 1
        sizes.append(end - start)
        start = end
    sizes.append(len(weights) - start)
    return sizes


def _key(path: tuple[str, ...]) -> Key:
    return tuple(os.fsencode(name) for name in path)


def _escaped(names: list[str]) -> list[str]:
    """The names as a glob spells them (all at once: one regex call a folder)."""
    return _GLOB_SPECIAL.sub(r"\\\g<0>", "/".join(names)).split("/")


@dataclass
class _Entry:
    """An entry of a listed folder; ``folder`` once it is listed in turn. Its leaves are
    ``[first, end)`` in the tree's name order."""

    name: str
    path: tuple[str, ...]
    location: str
    kind: str  # "folder", "file" (a regular one) or "other" (a link, a device...)
    glob: str  # the rg argument that leaves it out
    folder: _Folder | None = None
    first: int = 0
    end: int = 0

    @property
    def relative(self) -> str:
        """Its path below the folder searched."""
        return "/".join(self.path)

    def searched(self, hidden: bool) -> bool:
        """Whether rg's walk of the folder searched (with no ignore rules, hidden entries
        too if ``hidden``) would search this entry, or in it."""
        if not hidden and self.name.startswith("."):
            return False
        _, dot, extension = self.name.rpartition(".")
        if dot and extension.lower() in BINARY_EXTENSIONS:
            return False  # rg's glob *.{png,...} (a folder so named too, and ".png")
        if self.kind == "folder":
            return self.name not in GREP_SKIPPED_DIRS
        if self.kind != "file":
            return False  # rg follows no link, and reads no device or pipe
        try:
            return os.stat(self.location, follow_symlinks=False).st_size <= GREP_MAX_FILE_BYTES
        except OSError:
            return False


@dataclass
class _Folder:
    """A listed folder: its entries in name order, and the ignore rules in effect in it."""

    entries: list[_Entry]
    ignores: Ignores | None
    rules: bool  # whether it holds a file rg reads ignore rules from

    @classmethod
    def listed(
        cls, location: str, path: tuple[str, ...], glob: str, ignores: Ignores | None
    ) -> _Folder | None:
        """The folder at ``location`` (``path`` below the folder searched, left out by the
        glob ``glob``) listed; None if it cannot be read, has too many entries, or one a glob
        cannot spell."""
        try:
            with os.scandir(location) as listing:
                found = list(listing)
        except OSError:
            return None
        if len(found) > MAX_FOLDER_ENTRIES or _UNSPELLABLE.search("/".join(e.name for e in found)):
            return None
        found.sort(key=lambda entry: os.fsencode(entry.name))
        if ignores is not None:
            ignores = ignores.inside(found, "".join(f"{name}/" for name in path))
        spelled = _escaped([entry.name for entry in found])
        entries = [
            _Entry(entry.name, (*path, entry.name), entry.path, _kind(entry), f"{glob}/{name}")
            for entry, name in zip(found, spelled, strict=True)
        ]
        rules = any(entry.name in _RULES_FILES for entry in found)
        return cls(entries, ignores, rules)

    def open_until(self, wanted: int, hidden: bool) -> bool:
        """List subfolders, a level at a time, until the tree has ``wanted`` leaves or
        ``MAX_LISTED_FOLDERS`` have been listed (hidden ones only if ``hidden``); True if
        every folder rg enters was listed: the tree is known whole."""
        count = len(self.entries)
        listed = 0
        whole = True
        level = [(self, entry) for entry in self.entries]
        while level:
            deeper: list[tuple[_Folder, _Entry]] = []
            for parent, entry in level:
                if not parent._may_open(entry, hidden):
                    continue
                if count >= wanted or listed >= MAX_LISTED_FOLDERS:
                    return False
                listed += 1
                folder = _Folder.listed(entry.location, entry.path, entry.glob, parent.ignores)
                if folder is None:
                    whole = False
                    continue
                if not folder.entries:
                    continue  # an empty folder stays a leaf: some part must hold it
                entry.folder = folder
                count += len(folder.entries) - 1
                deeper.extend((folder, child) for child in folder.entries)
            level = deeper
        return whole

    def _may_open(self, entry: _Entry, hidden: bool) -> bool:
        """Whether rg enters the folder ``entry``, so that listing it is worth it."""
        if entry.kind != "folder" or not entry.searched(hidden):
            return False
        relative = "/".join(entry.path)
        return self.ignores is None or not self.ignores.ignored(relative, entry.name, is_dir=True)

    def number(self, leaves: list[_Entry]) -> None:
        """Append the tree's leaves (files, and folders not listed) to ``leaves`` in name
        order, noting each entry's range of them."""
        for entry in self.entries:
            entry.first = len(leaves)
            if entry.folder is None:
                leaves.append(entry)
            else:
                entry.folder.number(leaves)
            entry.end = len(leaves)

    def has_rules(self) -> bool:
        """Whether this folder, or one listed below it, holds an ignore file."""
        return self.rules or any(
            entry.folder.has_rules() for entry in self.entries if entry.folder is not None
        )

    def globs_outside(self, start: int, end: int) -> Iterator[str]:
        """The globs that leave out every leaf outside ``[start, end)``."""
        for entry in self.entries:
            if entry.end <= start or entry.first >= end:
                yield entry.glob
            elif entry.folder is not None and (entry.first < start or entry.end > end):
                yield from entry.folder.globs_outside(start, end)


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_dir(follow_symlinks=False):
            return "folder"
        return "file" if entry.is_file(follow_symlinks=False) else "other"
    except OSError:
        return "other"
