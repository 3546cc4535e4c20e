"""grep's search on ripgrep: run ``rg`` on a file or tree and read its lines into Findings.

rg walks the tree itself, in parallel, with its own reading of ignore files. What it is told,
so that it does what grep did on Python's walk:

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
- Results come in name order, capped at 50 lines (at most 50 a file). rg first walks in
  name order (``--sort path``, one thread) and is stopped at the 50th line: where matches
  are many, that answers after reading a small part of the tree. A run that has not
  finished after ``_SORTED_HEAD_START_S`` is stopped and rg restarts in parallel, in no set
  order: its lines are collected and sorted (past ``_PARALLEL_MAX_LINES`` lines, a sorted
  run without a time limit is cheaper). Both order paths byte by byte, folder by folder, so
  the answer is the same whichever run gave it.
- What a search that finds nothing skipped as hidden or ignored is found by our own walk
  (``_walk``, which reads the ignore files as rg does), to name it in the answer. It runs in
  a thread beside rg, stopped at rg's first line, so that it costs no time of its own.

A single file is opened here (without following a link), checked for size and a NUL in its
first 8 KB as before, and fed to rg on its standard input.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workers.tools._grep_proc import SearchCancelled, SearchFailed, SearchOverBudget
from workers.tools._grep_search import (
    BINARY_EXTENSIONS,
    BINARY_SNIFF_BYTES,
    GREP_MAX_FILE_BYTES,
    GREP_MAX_MATCHES,
    GREP_SKIPPED_DIRS,
    Findings,
    binary_name,
    cut_line,
)
from workers.tools._walk import (
    IGNORE_FILES,
    Skipped,
    ignores_at,
    join_relative,
    open_regular,
    walk_files,
)

# Past this many lines from the parallel search, sorting them all costs more than a sorted
# search that stops at the cap.
_PARALLEL_MAX_LINES = 2000
# How long the sorted, single-threaded run may go on before the parallel one replaces it:
# while it prints a line at least every _SORTED_QUIET_S, up to _SORTED_HEAD_START_S. On a
# tree of 10,000 files it reaches its 50th line in that time where matches are dense (class
# \w+Error\(, ~15 ms), and a search that finds little loses ~_SORTED_QUIET_S only.
_SORTED_HEAD_START_S = 0.03
_SORTED_QUIET_S = 0.012
_POLL_S = 0.05
_READ_BYTES = 1 << 16
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


class RgOverBudget(SearchOverBudget):
    """rg ran out of time: a tree too large rather than a regex that backtracks."""


class RegexRejected(Exception):
    """rg refused the regex (too large for its engine, say); the message says why."""


@dataclass
class _Run:
    """What one rg run printed: matching lines with their sort keys, and error messages."""

    lines: list[tuple[tuple[bytes, ...], int, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stopped: bool = False  # killed at a line limit
    abandoned: bool = False  # killed at its patience, unfinished


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
        run = _run(command, budget, cancelled, stdin=fd, prefix=b"", current=shown)
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
    deadline = time.monotonic() + budget
    ancestors = ancestor_ignore_files(Path(root), Path(base))
    if ancestors is None:
        scope = ["--hidden", "--no-ignore"]
    else:
        scope = [*_WORKSPACE_IGNORES, *(f"--ignore-file={path}" for path in ancestors)]
    command = [
        rg,
        *_COMMON,
        f"--max-filesize={GREP_MAX_FILE_BYTES}",
        *scope,
        *_SKIP_GLOBS,
        "--regexp",
        regex,
        "--",
        base,
    ]
    # Line by line, so that it is stopped at its 50th line, not at its buffer's 8 KB.
    sorted_command = [command[0], "--sort=path", "--line-buffered", *command[1:]]
    prefix = os.fsencode(base.rstrip(os.sep) + os.sep)
    skipped = None if ancestors is None else _SkippedWalk(Path(root), Path(base))
    on_match = None if skipped is None else skipped.cancel
    try:
        run = _run(
            sorted_command,
            budget,
            cancelled,
            prefix=prefix,
            on_match=on_match,
            patience=_Patience(_SORTED_HEAD_START_S, _SORTED_QUIET_S),
        )
        if run.abandoned:
            run = _run(
                command,
                _left(deadline, budget),
                cancelled,
                prefix=prefix,
                limit=_PARALLEL_MAX_LINES,
                on_match=on_match,
            )
            if run.stopped:
                run = _run(sorted_command, _left(deadline, budget), cancelled, prefix=prefix)
        run.lines.sort()
        found = Findings()
        found.matches = [
            f"{join_relative(shown, os.fsdecode(b'/'.join(key)))}:{number}: {text}"
            for key, number, text in run.lines[:GREP_MAX_MATCHES]
        ]
        if not found.matches and skipped is not None:
            skipped.note(found, shown, deadline, cancelled)
        return found
    finally:
        if skipped is not None:
            skipped.stop()


def _left(deadline: float, budget: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise RgOverBudget("", budget)
    return left


class _SkippedWalk:
    """What a search that finds nothing left out as hidden or ignored, so that the model can
    look there: our own walk, which reads the ignore files as rg does (rg does not say what it
    skipped but in its --debug log, which makes it several times slower). It runs in a thread
    from the moment rg starts, and is stopped as soon as rg prints a line."""

    def __init__(self, root: Path, base: Path) -> None:
        self._skipped = _SkippedText()
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=self._walk, args=(root, base), name="grep-skipped-walk", daemon=True
        )
        self._thread.start()

    def cancel(self) -> None:
        """Tell the walk to stop: its answer is not needed."""
        self._stop.set()

    def stop(self) -> None:
        """Stop the walk and wait for its thread to end."""
        self._stop.set()
        self._thread.join()

    def note(
        self, found: Findings, shown: str, deadline: float, cancelled: threading.Event
    ) -> None:
        """Name in ``found`` what was skipped, once the walk has ended; nothing if it has not
        by ``deadline`` or the call is cancelled first."""
        while self._thread.is_alive() and not cancelled.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._thread.join(min(_POLL_S, left))
        if self._done:
            found.skipped = [join_relative(shown, relative) for relative in self._skipped.examples]
            found.skipped_count = self._skipped.count

    def _walk(self, root: Path, base: Path) -> None:
        try:
            walk = walk_files(
                base,
                True,
                _enter,
                self._stop,
                ignores=ignores_at(root, base),
                skip_hidden=True,
                skipped=self._skipped,
            )
            for _ in walk:
                pass
        except OSError:
            return  # an ignore file that cannot be read: the answer just names nothing
        self._done = not self._stop.is_set()


class _SkippedText(Skipped):
    """Skipped entries but files with a binary name, which rg's override globs leave out
    unnamed. Checked here rather than as the walk's ``wanted``: only for what is skipped."""

    def add(self, relative: str) -> None:
        if relative.endswith("/") or not binary_name(relative.rpartition("/")[2]):
            super().add(relative)


def _enter(_state: bool, name: str) -> bool | None:
    return None if name in GREP_SKIPPED_DIRS else True


def ancestor_ignore_files(root: Path, base: Path) -> list[str] | None:
    """The ignore files of the folders from ``root`` down to ``base``'s parent, in the order
    rg must be given them; None if ``base`` is, or is inside, a hidden or ignored folder."""
    if ignores_at(root, base) is None:
        return None
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


def _key(relative: bytes) -> tuple[bytes, ...]:
    """Sorts paths as rg's ``--sort path`` walk meets them: folder by folder, each name byte
    by byte (so a name that is not UTF-8 sorts the same in both runs)."""
    return tuple(relative.split(b"/"))


def _run(
    command: list[str],
    budget: float,
    cancelled: threading.Event,
    *,
    prefix: bytes,
    stdin: int | None = None,
    limit: int = GREP_MAX_MATCHES,
    current: str = "",
    patience: _Patience | None = None,
    on_match: Callable[[], None] | None = None,
) -> _Run:
    """Run rg, reading its lines until it ends or ``limit`` lines; kill it when the budget is
    spent (SearchOverBudget) or the call is cancelled (SearchCancelled). When its
    ``patience`` runs out first, it is killed unfinished (``abandoned``) instead.
    ``on_match`` is called at its first matching line."""
    try:
        process = subprocess.Popen(
            command,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise SearchFailed(f"cannot start rg ({exc.strerror})") from None
    run = _Run()
    started = time.monotonic()
    reading = _Reading(started + budget, patience, started, on_match)
    try:
        _read(process, run, reading, cancelled, prefix, limit, current, budget)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    code = process.returncode
    if run.abandoned:
        return run
    if code == 2 and not run.lines and not run.stopped:
        message = " ".join(run.errors).strip()
        if "regex" in message:
            raise RegexRejected(message)
        raise SearchFailed(f"rg failed: {message or 'exit status 2'}")
    if code not in (0, 1, 2) and not run.stopped:
        raise SearchFailed(f"rg ended with status {code}")
    return run


@dataclass(frozen=True)
class _Patience:
    """How long a run may go on before it is abandoned: ``most`` seconds in all, and no more
    than ``quiet`` seconds since its start or its last line."""

    most: float
    quiet: float


@dataclass
class _Reading:
    """When to stop reading an rg run, and whom to tell of its first line."""

    deadline: float  # the budget is spent: an error
    patience: _Patience | None  # spent: abandoned, no error
    started: float
    on_match: Callable[[], None] | None
    last_line: float = 0.0

    def give_up(self) -> float | None:
        """When the run is to be abandoned, if it may be."""
        if self.patience is None:
            return None
        quiet_since = max(self.started, self.last_line) + self.patience.quiet
        return min(self.started + self.patience.most, quiet_since)


def _read(
    process: subprocess.Popen[bytes],
    run: _Run,
    reading: _Reading,
    cancelled: threading.Event,
    prefix: bytes,
    limit: int,
    current: str,
    budget: float,
) -> None:
    assert process.stdout is not None
    assert process.stderr is not None
    out, err = process.stdout.fileno(), process.stderr.fileno()
    pending = {out: b"", err: b""}
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        selector.register(err, selectors.EVENT_READ)
        while pending:
            if cancelled.is_set():
                raise SearchCancelled
            now = time.monotonic()
            left = reading.deadline - now
            if left <= 0:
                raise RgOverBudget(current, budget)
            give_up = reading.give_up()
            if give_up is not None and give_up < reading.deadline:
                if now >= give_up:
                    run.abandoned = True
                    return
                left = min(left, give_up - now)
            for key, _ in selector.select(min(_POLL_S, left)):
                fd = int(key.fd)
                chunk = os.read(fd, _READ_BYTES)
                if not chunk:
                    selector.unregister(fd)
                    rest = pending.pop(fd)
                    lines = [rest] if rest else []
                else:
                    *lines, pending[fd] = (pending[fd] + chunk).split(b"\n")
                for line in lines:
                    if fd == out:
                        _match(run, line, prefix)
                        reading.last_line = time.monotonic()
                        if reading.on_match is not None and run.lines:
                            reading.on_match()
                            reading.on_match = None
                        if len(run.lines) > limit:
                            run.stopped = True
                            return
                    else:
                        _log(run, line)


def _match(run: _Run, line: bytes, prefix: bytes) -> None:
    path, _, rest = line.partition(b"\x00")
    number, _, rest = rest.partition(b":")
    column, _, raw = rest.partition(b":")
    if not number.isdigit() or not column.isdigit():
        return  # not a match line (rg prints none other with these flags)
    relative = path.removeprefix(prefix).replace(os.sep.encode(), b"/")
    text = raw.decode("utf-8", errors="replace").rstrip()
    at = len(raw[: int(column) - 1].decode("utf-8", errors="replace"))
    run.lines.append((_key(relative), int(number), cut_line(text, at)))


def _log(run: _Run, line: bytes) -> None:
    if line.strip():
        run.errors.append(line.decode("utf-8", errors="replace"))
