"""A folder's entries, listed once and kept while the folder is unchanged.

grep's walks list the same folders call after call (the one that names skipped paths lists
every folder of the tree). A process keeps what it listed, as git's untracked cache does: a
folder whose device, inode, modification and change times are as they were is not listed
again. A folder changed within ``_RACY_NS`` of being listed is not kept, since a change in
the same tick of the file system's clock would leave its times as they were (git's "racy"
entries). Only names and kinds are kept, never sizes or contents, which a folder's times do
not follow.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass

from workers.tools._walk import IGNORE_FILES

# A folder modified less than this long before it was listed is listed again next time: a
# change within the same tick of the file system's clock (2 s on FAT) would not show.
_RACY_NS = 2_000_000_000
# At most this many entries are kept, in all folders; past it the listings start afresh.
_MAX_KEPT_ENTRIES = 500_000


@dataclass(frozen=True)
class Listing:
    """One folder's entries as the search tools' walks need them, and the folder's times
    when it was listed."""

    stamp: tuple[int, int, int, int]  # st_dev, st_ino, st_mtime_ns, st_ctime_ns
    ignore_files: tuple[str, ...]  # paths of its entries named as ignore files, in order
    folders: tuple[tuple[str, str], ...]  # (name, path) of each subfolder (not a link)
    files: tuple[str, ...]  # names of its regular files
    hidden_files: tuple[str, ...]  # those of them whose name starts with "."

    @classmethod
    def read(cls, location: str) -> Listing | None:
        """The folder at ``location`` listed, or kept from before if unchanged; None if it
        cannot be read."""
        try:
            info = os.stat(location, follow_symlinks=False)
        except OSError:
            return None
        stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        kept = _KEPT.get(location)
        if kept is not None and kept.stamp == stamp:
            return kept
        try:
            with os.scandir(location) as listing:
                entries = list(listing)
        except OSError:
            return None
        names = {entry.name: entry.path for entry in entries if entry.name in IGNORE_FILES}
        folders: list[tuple[str, str]] = []
        files: list[str] = []
        for entry in entries:
            with contextlib.suppress(OSError):  # it vanished or cannot be inspected
                if entry.is_dir(follow_symlinks=False):
                    folders.append((entry.name, entry.path))
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
        listed = cls(
            stamp,
            tuple(names[name] for name in IGNORE_FILES if name in names),
            tuple(folders),
            tuple(files),
            tuple(name for name in files if name.startswith(".")),
        )
        # A change sets both times to the clock's tick: if either is older, a change shows.
        if time.time_ns() - min(info.st_mtime_ns, info.st_ctime_ns) > _RACY_NS:
            _KEPT.keep(location, listed)
        return listed


class _KeptListings:
    """Listings kept between walks, by folder path, up to ``_MAX_KEPT_ENTRIES`` entries in
    all (past it, they start afresh). Walks in several threads share them."""

    def __init__(self) -> None:
        self._by_path: dict[str, Listing] = {}
        self._entries = 0
        self._lock = threading.Lock()

    def get(self, location: str) -> Listing | None:
        return self._by_path.get(location)

    def keep(self, location: str, listed: Listing) -> None:
        size = len(listed.folders) + len(listed.files)
        with self._lock:
            if self._entries + size > _MAX_KEPT_ENTRIES:
                self._by_path.clear()
                self._entries = 0
            self._by_path[location] = listed
            self._entries += size


_KEPT = _KeptListings()
