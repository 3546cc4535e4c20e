"""The fault run's file observer: when each write to the shared files first shows.

It reads the shared files in rounds, as a toolpool reader would, and records a ``Sighting``
each time a file shows a new writer (or a torn payload, or new edits in the edit log). A
rename lands between two reads' opens, so a sighting's window runs from when the previous
read of that file began to when this read ended.

Like a toolpool reader, it passes the workspace commit barrier: a writer holds ``LOCK_EX``
(``flock``) on the workspace root directory around its fence check, rename and post-rename
fence re-check, rolling the rename back if its lease was lost. The observer holds ``LOCK_SH``
on that directory while it reads one round, and releases it before it sleeps, so it never
sees a write that is then undone, and never keeps a writer waiting across a sleep.

With sessions, each session's folder has its own barrier; ``watch`` reads the rounds of
several observers (the workspace's and each session folder's) in one thread, each round under
its own folder's barrier.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.fault.checks import EDIT_LOG, Sighting, edit_ids, payload_writer

_PAUSE_S = 0.002  # between rounds, with the barrier released


class Observer:
    """Appends to ``sightings``: the ``shared`` payload files and the edit log, in rounds.

    ``folder`` labels its sightings: the session whose folder ``workspace`` is ("" for none).
    """

    def __init__(
        self, workspace: Path, shared: list[str], sightings: list[Sighting], *, folder: str = ""
    ) -> None:
        self.ws, self.names, self.sightings = workspace, [*shared, EDIT_LOG], sightings
        self.folder = folder
        self._last: dict[str, str | None] = {}
        self._opened: dict[str, float] = {}  # when the previous read of each file began
        self._edits_seen: set[str] = set()

    def run(self, done: threading.Event) -> None:
        """Read rounds until ``done`` is set, each under the workspace commit barrier."""
        watch([self], done)

    def round(self) -> None:
        """Read each file once; the caller holds this folder's barrier shared."""
        for name in self.names:
            self._read(name)

    def _read(self, name: str) -> None:
        began = time.time()
        try:
            text = (self.ws / name).read_text()
        except OSError:
            return
        seen, before = time.time(), self._opened.get(name, began)
        self._opened[name] = began
        if name == EDIT_LOG:
            ids = edit_ids(text)
            if ids is None:
                self.sightings.append(Sighting(name, "TORN", before, seen, self.folder))
                return
            for call_id in set(ids) - self._edits_seen:
                self.sightings.append(Sighting(name, call_id, before, seen, self.folder))
            self._edits_seen.update(ids)
            return
        writer = payload_writer(text) or "TORN"
        if self._last.get(name) != writer:
            self._last[name] = writer
            self.sightings.append(Sighting(name, writer, before, seen, self.folder))


def watch(observers: Sequence[Observer], done: threading.Event) -> None:
    """Read the observers' rounds in turn until ``done`` is set, each under its own folder's
    commit barrier (held shared for that round only)."""
    barriers = [os.open(observer.ws, os.O_RDONLY) for observer in observers]
    try:
        while not done.is_set():
            for observer, barrier in zip(observers, barriers, strict=True):
                fcntl.flock(barrier, fcntl.LOCK_SH)
                try:
                    observer.round()
                finally:
                    fcntl.flock(barrier, fcntl.LOCK_UN)
            time.sleep(_PAUSE_S)
    finally:
        for barrier in barriers:
            os.close(barrier)
