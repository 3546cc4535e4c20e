"""grep's search on ripgrep: run ``rg`` on a file or tree and read its lines into Findings.

rg walks the tree itself, with its own reading of ignore files. What it is told, so that it
does what grep did on Python's walk:

- Ignore files are read from the workspace root down, never above it: ``--no-ignore-parent``,
  and the root's and each folder's on the way to the searched folder as ``--ignore-file``
  (root first, ``.ignore`` after ``.gitignore``: the later file wins). Given an absolute path,
  rg matches each such file's rules relative to its own folder, as git does. No global or
  ``.git/info/exclude`` rules; rg also reads ``.rgignore`` files. A folder searched that is,
  or is inside, a hidden or ignored one is searched whole (``--hidden --no-ignore``).
- Symbolic links are not followed (rg's default); node_modules, .git and dist and binary
  extensions are skipped by override globs, files over 10 MB by ``--max-filesize`` (rg does
  not say which: a tree's large files are skipped unnamed, a single one is still refused).
- A NUL byte makes a file binary: rg skips it, or stops there if it has printed lines of it.
- Results come in name order, capped at 50 lines (at most 50 a file). The tree is cut into
  parts consecutive in name order (``_ripgrep_parts``, which also says how a part's rg is
  kept to it), searched by as many rg processes at once as there are cores, the first parts
  first: the answer is the first 50 lines of the parts searched so far, once every part
  before the 50th line has been searched; a part after the 50 lines found so far is not
  started, or is stopped. The first parts are small and searched in order by one thread
  each, which stop at their 50th line; the later ones are searched by rg's parallel walk,
  and their lines sorted (a part that prints more than ``_PARALLEL_MAX_LINES`` is searched
  again in order, which stops at its 50th). Both order paths byte by byte, folder by folder,
  so the answer is the same whichever way a part was searched. rg runs in the folder
  searched.
- What a search that finds nothing skipped as hidden or ignored is found by our own walk
  (``_grep_skipped``, which reads the ignore files as rg does), to name it in the answer. It
  goes on beside rg, a slice at a time between reads of rg's output, from when the parts
  searched in order have found nothing (before that, a line is likely) to rg's first line.

A single file is opened here (without following a link), checked for size and a NUL in its
first 8 KB as before, and fed to rg on its standard input.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from pathlib import Path

from workers.tools._grep_search import (
    BINARY_EXTENSIONS,
    BINARY_SNIFF_BYTES,
    GREP_MAX_FILE_BYTES,
    GREP_MAX_MATCHES,
    GREP_SKIPPED_DIRS,
    Findings,
)
from workers.tools._grep_skipped import SkippedWalk
from workers.tools._ignore_file import open_regular
from workers.tools._ripgrep_parts import Part, cut_tree
from workers.tools._ripgrep_proc import (
    Line,
    RegexRejected,
    RgOverBudget,
    RgProcess,
    RgProcesses,
    run_rg,
)
from workers.tools._walk import IGNORE_FILES, ignores_at, join_relative

__all__ = ["RegexRejected", "RgOverBudget", "ancestor_ignore_files", "search_file", "search_tree"]

# Past this many lines from a part searched in parallel, sorting them all costs more than
# searching it again in order, stopped at the 50th.
_PARALLEL_MAX_LINES = 2000
_COMMON = (
    "--no-config",  # no RIPGREP_CONFIG_PATH
    "--ignore-case",
    "--line-number",
    "--column",
    "--null",
    "--no-heading",
    "--with-filename",
    "--color=never",
    "--encoding=none",  # bytes as they are: a UTF-16 file is binary, as before
    f"--max-count={GREP_MAX_MATCHES}",
    "--no-messages",
    "--no-ignore-messages",
)
# The ignore files of the workspace only: none above it, no global or .git/info/exclude ones.
_WORKSPACE_IGNORES = (
    "--no-require-git",
    "--no-ignore-parent",
    "--no-ignore-global",
    "--no-ignore-exclude",
)
# One glob for all the extensions: fifty globs of their own make rg's walk twice as slow.
_SKIP_GLOBS = (
    *(f"--glob=!{name}/" for name in sorted(GREP_SKIPPED_DIRS)),
    "--iglob=!*.{" + ",".join(sorted(BINARY_EXTENSIONS)) + "}",
)
# How long the walk that names skipped paths goes on at a time between reads of rg's output.
_WALK_SLICE_S = 0.0005
# In order, one line at a time: stopped at its 50th line, not at its buffer's 8 KB.
_IN_ORDER = ("--sort=path", "--line-buffered")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# How many rg processes search a tree's parts at once.
_SLOTS = max(1, min(_cores(), 8))


def search_file(
    rg: str, regex: str, base: str, shown: str, *, budget: float, cancelled: threading.Event
) -> Findings:
    """Search the single file at ``base`` (shown to the model as ``shown``)."""
    found = Findings(current=shown)
    with open_regular(base) as opened:
        if opened is None:
            return found
        fd, info = opened
        if info.st_size > GREP_MAX_FILE_BYTES:
            found.too_large, found.large_count, found.large_files = True, 1, [shown]
            return found
        if b"\x00" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
            found.binary = True
            return found
        command = [rg, *_COMMON, "--text", "--regexp", regex, "-"]
        run = run_rg(command, budget, cancelled, stdin=fd, prefix=b"", current=shown)
    found.matches = [f"{shown}:{number}: {text}" for _, number, text in run.lines]
    return found


def search_tree(
    rg: str,
    regex: str,
    base: str,
    shown: str,
    *,
    root: str,
    budget: float,
    cancelled: threading.Event,
) -> Findings:
    """Search the folder at ``base`` (shown as ``shown``) inside the workspace ``root``."""
    ignores = ignores_at(Path(root), Path(base))
    ancestors = [] if ignores is None else ancestor_ignore_files(Path(root), Path(base))
    if ignores is None:
        scope = ["--hidden", "--no-ignore"]
    else:
        scope = [*_WORKSPACE_IGNORES, *(f"--ignore-file={path}" for path in ancestors)]
    # rg runs in the folder searched (its globs are read from there). Its files' paths are
    # given from there too, which spares the kernel resolving each from the root (about a
    # twentieth of rg's time), unless ignore files above need the whole path to be matched.
    where = base if ancestors else "."
    command = [
        rg,
        *_COMMON,
        f"--max-filesize={GREP_MAX_FILE_BYTES}",
        *scope,
        *_SKIP_GLOBS,
        "--regexp",
        regex,
        "--",
        where,
    ]
    parts = cut_tree(base, ignores, _SLOTS)
    skipped = None if ignores is None else SkippedWalk(base, ignores)
    with RgProcesses(budget, cancelled) as processes:
        search = _PartsSearch(processes, command, base, where, parts, skipped)
        lines = search.first_lines()
    found = Findings()
    found.matches = [
        f"{join_relative(shown, os.fsdecode(b'/'.join(key)))}:{number}: {text}"
        for key, number, text in lines
    ]
    if not found.matches and skipped is not None:
        skipped.note(found, shown, processes.deadline, cancelled)
    return found


class _PartsSearch:
    """The parts of one tree searched by rg processes, ``_SLOTS`` at a time, in name order."""

    def __init__(
        self,
        processes: RgProcesses,
        command: list[str],
        base: str,
        where: str,
        parts: list[Part],
        skipped: SkippedWalk | None,
    ) -> None:
        """``command`` runs rg in the folder ``base`` on ``where``: the folder's path, or
        "." for the folder itself."""
        self._processes = processes
        self._command = command
        self._base = base
        self._prefix = os.fsencode(where.rstrip(os.sep) + os.sep)
        self._parts = parts
        self._runs: list[RgProcess | None] = [None] * len(parts)
        self._skipped = skipped
        self._failure: Exception | None = None  # of a part that ended with an error

    def first_lines(self) -> list[Line]:
        """The first 50 lines in name order, once every part that could hold one is done."""
        changed = True
        walk: SkippedWalk | None = None
        while True:
            if changed:  # else nothing was read: the parts are as they were
                self._follow_parts()
                lines = self._answer()
                if lines is not None:
                    if not lines and self._failure is not None:
                        raise self._failure
                    return lines
                self._start_parts()
                walk = self._walk_now()
            if walk is None or walk.done:
                changed = self._processes.step()
            else:
                changed = self._processes.step(until=time.monotonic())  # what is there now
                walk.advance(time.monotonic() + _WALK_SLICE_S)

    def _start_parts(self) -> None:
        """Start the parts searched in order at the head at once (they are small, and their
        lines may settle the answer early), the others in order as processes end."""
        heads = True
        for index, part in enumerate(self._parts[: self._needed()]):
            heads = heads and part.in_order
            if self._runs[index] is None:
                if not heads and (self._processes.running >= _SLOTS or self._heads_finding()):
                    return
                if part.paths is None:
                    command = [self._command[0], *part.globs, *self._command[1:]]
                    prefix = self._prefix
                else:  # its entries by name, from the folder searched, in place of "."
                    command = [*self._command[:-1], *part.paths]
                    prefix = b""
                if part.in_order:
                    command[1:1] = _IN_ORDER
                limit = GREP_MAX_MATCHES if part.in_order else _PARALLEL_MAX_LINES + 1
                self._runs[index] = self._processes.start(
                    command, prefix=prefix, cwd=self._base, keep=part.holds, limit=limit
                )

    def _heads_finding(self) -> bool:
        """Whether a part searched in order at the head is still running and has found
        lines: it is likely to settle the answer, and a part after it would take cores from
        it."""
        for part, run in zip(self._parts, self._runs, strict=True):
            if not part.in_order or run is None:
                return False
            if run.lines and not run.ended:
                return True
        return False

    def _needed(self) -> int:
        """How many parts may still hold one of the first 50 lines: once the parts up to one
        have printed 50 between them, every line of a later part comes after those."""
        found = 0
        for index, run in enumerate(self._runs):
            found += 0 if run is None else len(run.lines)
            if found >= GREP_MAX_MATCHES:
                return index + 1
        return len(self._runs)

    def _follow_parts(self) -> None:
        needed = self._needed()
        for run in self._runs[needed:]:
            if run is not None:
                self._processes.stop(run)  # its lines would come after the 50th
        for index, run in enumerate(self._runs[:needed]):
            if run is None:
                continue
            if run.ended:
                self._note_failure(run)
                continue
            part = self._parts[index]
            if part.in_order and len(run.lines) >= GREP_MAX_MATCHES:
                self._processes.stop(run)  # the rest of it comes after its first 50
            elif not part.in_order and len(run.lines) > _PARALLEL_MAX_LINES:
                self._processes.stop(run)
                self._parts[index] = part.searched_in_order()
                self._runs[index] = None

    def _note_failure(self, run: RgProcess) -> None:
        """Raise at once what every part would fail with (the regex, rg itself); keep what
        one part failed with (a folder it could not read), said only if no line is found,
        as when rg searched the tree whole."""
        failure = run.failure()
        if failure is None:
            return
        if isinstance(failure, RegexRejected) or run.process.returncode != 2:
            raise failure
        if self._failure is None:
            self._failure = failure

    def _walk_now(self) -> SkippedWalk | None:
        """The walk that names skipped paths, while it is to go on beside rg: from when the
        search is likely to find nothing (the parts searched in order found nothing) to its
        end or rg's first line, when it is dropped (its answer is not needed)."""
        if self._skipped is None or self._skipped.done:
            return None
        runs = list(zip(self._parts, self._runs, strict=True))
        if any(run is not None and run.lines for _, run in runs):
            self._skipped = None
            return None
        if all(run is not None and run.ended for part, run in runs if part.in_order):
            return self._skipped
        return None

    def _answer(self) -> list[Line] | None:
        """The first 50 lines in name order, if the parts searched so far settle them."""
        total = 0
        upto = len(self._runs)
        for index, run in enumerate(self._runs):
            if run is None:
                return None
            total += len(run.lines)
            if run.ended or (self._parts[index].in_order and total >= GREP_MAX_MATCHES):
                # An ended part has given all its lines; a part searched in order, its first.
                if total >= GREP_MAX_MATCHES:
                    upto = index + 1
                    break
                continue
            return None
        lines = [line for run in self._runs[:upto] if run is not None for line in run.lines]
        lines.sort()
        return lines[:GREP_MAX_MATCHES]


def ancestor_ignore_files(root: Path, base: Path) -> list[str]:
    """The ignore files of the folders from ``root`` down to ``base``'s parent, in the order
    rg must be given them."""
    try:
        parts = base.relative_to(root).parts
    except ValueError:
        return []
    files: list[str] = []
    folder = root
    for part in parts:
        for name in reversed(IGNORE_FILES):  # the later file wins: .ignore last
            path = folder / name
            with contextlib.suppress(OSError):
                # A link is not read, as the walk does not read one (it could lead outside).
                if stat.S_ISREG(path.lstat().st_mode):
                    files.append(str(path))
        folder = folder / part
    return files
