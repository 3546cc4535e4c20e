"""Compare toolpool's grep tool with GNU ``grep -rniE`` on a real source tree.

Usage: ``python scripts/bench_grep.py [TREE] [--runs N]``; TREE defaults to this venv's
site-packages. For each pattern it prints the number of matching lines our tool returned, the
median wall time of our tool (through the real runner) and of grep, and their ratio.

grep is told the same skips as the tool (node_modules, .git, dist; binary files) and, for a
pattern whose matches the tool caps at 50, is stopped after 50 lines by ``head`` so both do
comparable work. Both run warm: one untimed run first fills the page cache.
"""

from __future__ import annotations

import argparse
import shutil
import site
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from executor import (
    Settings,
    ToolCall,
    ToolRegistry,
    TruncationPolicy,
    truncate,
)
from executor.contract import Workspace
from executor.wire import ToolStatus
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools.search import GREP_MAX_MATCHES, grep


@dataclass(frozen=True)
class Case:
    """One pattern to time, and why it is in the set."""

    label: str
    pattern: str


CASES = (
    Case("many (stops at 50)", r"import\s+\w+"),
    Case("medium (< 50)", r"lru_cache\(maxsize"),
    Case("medium, classes", r"class \w+Error\("),
    Case("rare (whole tree)", r"zq_never_occurs_[0-9]+"),
    Case("rare, alternation", r"frobnicate|xyzzy_quux"),
    # No literal a match must contain: the prefilter cannot help, the regex reads every file.
    Case("rare, no literal", r"[qz]{3}[0-9]{2}"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=site.getsitepackages()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    if shutil.which("grep") is None:
        print("GNU grep is not on PATH; nothing to compare with.", file=sys.stderr)
        return 1
    files = sum(1 for path in tree.rglob("*") if path.is_file())
    size = sum(path.stat().st_size for path in tree.rglob("*") if path.is_file())
    print(f"tree: {tree} ({files} files, {size / 1e6:.0f} MB), median of {args.runs} runs\n")
    header = f"{'case':<20} {'pattern':<24} {'matches':>7} {'toolpool ms':>12} {'grep ms':>9}"
    print(header + f" {'ratio':>6}")
    print("-" * (len(header) + 7))
    for case in CASES:
        matches, ours = _time_tool(tree, case.pattern, args.runs)
        theirs = _time_grep(tree, case.pattern, args.runs, capped=matches >= GREP_MAX_MATCHES)
        print(
            f"{case.label:<20} {case.pattern:<24} {matches:>7} {ours:>12.1f} {theirs:>9.1f} "
            f"{ours / theirs:>6.2f}"
        )
    return 0


def _time_tool(tree: Path, pattern: str, runs: int) -> tuple[int, float]:
    # A generous result limit, so that the cost measured is the search and not truncation.
    settings = Settings(truncation=TruncationPolicy(default_max_chars=10**6, global_cap=10**6))
    env = CallEnvironment(workspace=Workspace(tree), settings=settings)
    registry = ToolRegistry([grep])
    call = ToolCall(name="grep", arguments={"pattern": pattern, "path": "."})
    result = run_call(call, registry, env)  # warm-up, and the match count
    if result.status is not ToolStatus.OK:
        raise SystemExit(f"grep tool failed on {pattern!r}: {truncate(result.content, 300).text}")
    matches = sum(1 for line in result.content.splitlines() if not line.startswith(("...", "(")))
    if result.content.startswith("No matches"):
        matches = 0
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run_call(call, registry, env)
        times.append((time.perf_counter() - started) * 1000)
    return matches, statistics.median(times)


def _time_grep(tree: Path, pattern: str, runs: int, capped: bool) -> float:
    grep_command = (
        "grep -rniIE --exclude-dir=node_modules --exclude-dir=.git --exclude-dir=dist "
        f"-e {_quote(pattern)} {_quote(str(tree))}"
    )
    command = grep_command + (f" | head -n {GREP_MAX_MATCHES}" if capped else "") + " >/dev/null"
    subprocess.run(command, shell=True, check=False)  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, shell=True, check=False)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
