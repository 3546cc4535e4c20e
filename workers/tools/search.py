"""The search tools: ``glob`` finds files by name pattern, ``grep`` finds lines by regex.

Both walk the tree without following symbolic links (a link could lead out of the workspace
or into a loop), in name order so that results are deterministic, and show paths relative to
the workspace root so they can be passed straight to read_file.

Both leave out what the ``.gitignore`` and ``.ignore`` files of the workspace exclude (from
the root down to the folder searched, as git and ripgrep read them) and never enter an ignored
folder, so a project's virtual environment or build output costs nothing. grep also skips
hidden files and folders, as ripgrep does; glob matches a hidden name only when the pattern
spells out its dot. What is named explicitly is searched all the same: grep's ``path`` when it
is (or is inside) a hidden or ignored folder, and a name a glob pattern spells out in full.

grep runs on ripgrep (``_ripgrep``), whose regex engine takes linear time, so no pattern can
pin a CPU; a pattern it cannot run (a lookaround, a backreference: see ``_ripgrep_regex``),
or a machine without the ``rg`` binary, runs on Python's ``re`` in a helper process that is
stopped at the call's time limit (``_grep_proc``). glob walks with ``_walk``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import bracex
from pydantic import Field

from executor import ToolCancelledError, ToolError, ToolTimeoutError
from executor.contract import ToolContext, tool
from workers.tools._glob_pattern import MAX_ALTERNATIVES, GlobMatcher, GlobStates
from workers.tools._grep_proc import (
    SearchCancelled,
    SearchFailed,
    SearchOverBudget,
    run_search,
)
from workers.tools._grep_search import (
    BINARY_EXTENSIONS,
    GREP_MAX_FILE_BYTES,
    GREP_MAX_LINE_CHARS,
    GREP_MAX_MATCHES,
    GREP_SKIPPED_DIRS,
    Findings,
    binary_name,
    compile_pattern,
)
from workers.tools._ripgrep import RegexRejected, RgOverBudget, search_file, search_tree
from workers.tools._ripgrep_bin import find_rg
from workers.tools._ripgrep_regex import rust_regex
from workers.tools._walk import Skipped, ignores_at, join_relative, walk_files

__all__ = [
    "BINARY_EXTENSIONS",
    "GLOB_MAX_RESULTS",
    "GREP_MAX_FILE_BYTES",
    "GREP_MAX_LINE_CHARS",
    "GREP_MAX_MATCHES",
    "GREP_MAX_PATTERN_CHARS",
    "GREP_SKIPPED_DIRS",
    "GREP_TIMEOUT",
    "glob",
    "grep",
]

GLOB_MAX_RESULTS = 200
GLOB_IGNORED_DIRS = frozenset({"node_modules", ".git"})

GREP_TIMEOUT = 30.0
# Seconds of the time limit kept back for the answer, so grep reports its own timeout.
GREP_ANSWER_MARGIN_S = 1.0
# A longer pattern is almost surely a mistake (a file pasted as pattern) and slow to compile.
GREP_MAX_PATTERN_CHARS = 4000
# A repeated group that contains a repetition: the classic shape of catastrophic backtracking.
_NESTED_QUANTIFIER = re.compile(r"\([^()]*[*+}][^()]*\)(?:[*+]|\{\d*,)")


# ---------------------------------------------------------------------------------- glob


@tool(concurrency_safe=True, read_only=True)
def glob(
    ctx: ToolContext,
    pattern: Annotated[
        str,
        Field(
            description='Glob pattern relative to path, e.g. "**/*.py", "src/*.{ts,tsx}", '
            '"test_?.py". ** matches any number of directories.'
        ),
    ],
    path: Annotated[
        str, Field(description="Directory to search from, relative to the workspace root.")
    ] = ".",
) -> str:
    """Find files whose path matches a glob pattern; returns paths relative to the workspace root.

    Supports *, ?, [abc], {a,b} and **. Skips hidden files and folders (names starting with
    ".") and what .gitignore/.ignore files exclude, unless the pattern names them
    (".github/*.yml", "build/**/*.js") or path is inside them; also skips node_modules and
    .git, and does not follow symbolic links. Results are sorted, at most 200.
    """
    matcher = GlobMatcher(pattern)
    base = _existing(ctx, path)
    if not base.is_dir():
        raise ToolError(
            f"Not a directory: {path}. glob searches a directory; give a folder as path "
            "(use read_file to read a single file)."
        )

    def enter(states: GlobStates, name: str) -> GlobStates | None:
        return None if name in GLOB_IGNORED_DIRS else matcher.enter_directory(states, name)

    skipped = Skipped()
    walk = walk_files(
        base,
        matcher.start,
        enter,
        ctx.cancelled,
        ignores=ignores_at(ctx.workspace.root, base),
        named=_named(pattern),
        wanted=matcher.matches_file,
        skipped=skipped,
    )
    found = [relative for relative, _, _ in walk]
    shown = ctx.workspace.relative(base)
    if not found:
        examples = [join_relative(shown, example) for example in skipped.examples]
        return f'No files match "{pattern}" in {shown}' + _skipped_note(
            skipped.count, examples, "spell its name out in the pattern to include it"
        )
    found.sort()
    lines = [join_relative(shown, relative) for relative in found[:GLOB_MAX_RESULTS]]
    if len(found) > GLOB_MAX_RESULTS:
        lines.append(
            f"... and {len(found) - GLOB_MAX_RESULTS} more files ({len(found)} matched; "
            f"showing the first {GLOB_MAX_RESULTS}). Narrow the pattern or path."
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- grep


@tool(concurrency_safe=True, read_only=True, timeout=GREP_TIMEOUT)
def grep(
    ctx: ToolContext,
    pattern: Annotated[
        str,
        Field(
            description="Python regular expression, matched case-insensitively within each "
            'line, e.g. "def \\w+_handler" or "TODO|FIXME". Lookarounds and backreferences '
            "work but are slower."
        ),
    ],
    path: Annotated[
        str,
        Field(description="File or directory to search, relative to the workspace root."),
    ] = ".",
) -> str:
    """Search file contents for a regular expression, like grep -rni; returns path:line: text.

    A directory is searched recursively in name order. Skips hidden files and folders (names
    starting with ".") and what .gitignore/.ignore files exclude, unless path names them
    (path=".venv" searches all of .venv); also skips node_modules and dist, binary files and
    files over 10 MB, and does not follow symbolic links. At most 50 matching lines are
    returned; ^ and $ anchor at line starts and ends. Runs on ripgrep's linear-time engine;
    a pattern with a lookaround ((?=, (?!, (?<=, (?<!), a backreference (\\1, (?P=name)), an
    atomic group or possessive repeat, \\A, \\Z or (?a) runs on Python's re instead, which
    is slower and stops at the time limit.
    """
    _check_pattern(pattern)
    base = _existing(ctx, path)
    shown = ctx.workspace.relative(base)
    is_dir = base.is_dir()
    if not is_dir and binary_name(base.name):
        raise ToolError(f"{shown} looks like a binary file; grep searches text files only.")
    if ctx.cancelled.is_set():
        return _report(Findings(), pattern, shown)
    # The search must answer before the runner's limit, which would abandon it unanswered.
    budget = max(min(GREP_TIMEOUT, ctx.remaining()) - GREP_ANSWER_MARGIN_S, 0.1)
    try:
        found = _search(pattern, base, shown, ctx, is_dir=is_dir, budget=budget)
    except SearchOverBudget as exc:
        raise ToolTimeoutError(_over_budget_message(pattern, exc)) from None
    except SearchCancelled:
        raise ToolCancelledError("grep was cancelled before it finished.") from None
    except SearchFailed as exc:
        raise ToolError(f"grep failed: {exc}. Try again, or narrow the path.") from None
    if not is_dir and found.binary:
        raise ToolError(f"{shown} is a binary file; grep searches text files only.")
    if not is_dir and found.too_large:
        raise ToolError(
            f"{shown} is larger than {GREP_MAX_FILE_BYTES // (1024 * 1024)} MB; grep "
            "skips files that large. Read parts of it with read_file instead."
        )
    return _report(found, pattern, shown)


def _search(
    pattern: str, base: Path, shown: str, ctx: ToolContext, *, is_dir: bool, budget: float
) -> Findings:
    """The findings, on rg where it can run the pattern, else on Python's ``re``."""
    rg, regex = find_rg(), rust_regex(pattern)
    if rg is not None and regex is not None:
        try:
            if not is_dir:
                return search_file(
                    rg, regex, str(base), shown, budget=budget, cancelled=ctx.cancelled
                )
            return search_tree(
                rg,
                regex,
                str(base),
                shown,
                root=str(ctx.workspace.root),
                budget=budget,
                cancelled=ctx.cancelled,
            )
        except RegexRejected:
            # Too large for rg's engine (a{1,100000}, say): Python's compiles it.
            budget = max(min(budget, ctx.remaining() - GREP_ANSWER_MARGIN_S), 0.1)
    return run_search(
        pattern,
        str(base),
        shown,
        is_dir=is_dir,
        root=str(ctx.workspace.root),
        budget=budget,
        cancelled=ctx.cancelled,
    )


def _check_pattern(pattern: str) -> None:
    if not pattern:
        raise ToolError('Empty pattern. Give a regular expression such as "def main".')
    if len(pattern) > GREP_MAX_PATTERN_CHARS:
        raise ToolError(
            f"The pattern is {len(pattern)} characters long; grep takes patterns of up to "
            f"{GREP_MAX_PATTERN_CHARS}. Search for a shorter, distinctive part of the text."
        )
    try:
        compile_pattern(pattern)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ToolError(
            f'Invalid regular expression "{pattern}": {exc.msg}{where}. grep takes a Python '
            "regular expression; escape special characters such as ( [ { . * + ? with a "
            "backslash to match them literally."
        ) from None


def _over_budget_message(pattern: str, exc: SearchOverBudget) -> str:
    where = f" (it was searching {exc.current})" if exc.current else ""
    message = (
        f'grep stopped: the regular expression "{_cut(pattern)}" took longer than '
        f"{exc.seconds:.1f} s{where}."
    )
    # rg's engine takes linear time: only Python's backtracks on nested repeats.
    if not isinstance(exc, RgOverBudget) and _NESTED_QUANTIFIER.search(pattern):
        return message + (
            " It repeats a group that itself contains a repetition, such as (a+)+ or (\\w*)*, "
            "which can take exponential time on a long line. Remove the nesting (a+ instead "
            "of (a+)+) or make the pattern more specific."
        )
    return message + " Make the pattern more specific, or search a narrower path."


def _cut(pattern: str) -> str:
    return pattern if len(pattern) <= 200 else pattern[:200] + "..."


def _report(found: Findings, pattern: str, shown: str) -> str:
    lines = list(found.matches) or [
        f'No matches for "{_cut(pattern)}" in {shown}'
        + _skipped_note(found.skipped_count, found.skipped, "give one as path to search it")
    ]
    if found.full:
        # The search stops at the cap, so whether more exist is unknown (and likely).
        lines.append(
            f"... (results capped at {GREP_MAX_MATCHES} matches; narrow the pattern or path)"
        )
    if found.large_count:
        listed = ", ".join(found.large_files) + (
            ", ..." if found.large_count > len(found.large_files) else ""
        )
        lines.append(
            f"(skipped {found.large_count} file(s) larger than "
            f"{GREP_MAX_FILE_BYTES // (1024 * 1024)} MB: {listed})"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------- shared


def _skipped_note(count: int, examples: list[str], advice: str) -> str:
    """What a search that found nothing left out, so that the model can look there too."""
    if not count:
        return ""
    more = ", ..." if count > len(examples) else ""
    return (
        f" (skipped {count} hidden or ignored path{'s' if count != 1 else ''}: "
        f"{', '.join(examples)}{more}; {advice})"
    )


def _named(pattern: str) -> frozenset[str]:
    """The names a glob pattern spells out in full: a segment without wildcards, e.g.
    "build" in "build/**/*.js"; such an entry is listed even if ignored."""
    names: set[str] = set()
    # GlobMatcher has checked the pattern, so the expansion succeeds and stays small.
    for alternative in bracex.expand(pattern, keep_escapes=True, limit=MAX_ALTERNATIVES):
        for part in alternative.split("/"):
            if part and not _WILDCARD.search(part):
                names.add(re.sub(r"\\(.)", r"\1", part))
    return frozenset(names)


_WILDCARD = re.compile(r"(?<!\\)[*?\[]")


def _existing(ctx: ToolContext, path: str) -> Path:
    resolved = ctx.workspace.resolve(path)
    try:
        resolved.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(
            f"Path not found: {path}. Check the path with list_directory or glob."
        ) from None
    except OSError as exc:  # a name too long, a link loop, no permission
        raise ToolError(f"Cannot open {path}: {exc.strerror}.") from None
    return resolved
