"""Compare toolpool's grep tool with ripgrep and GNU ``grep -rniE`` on a real source tree.

Usage: ``python -m benchmarks.grep [TREE] [--runs N] [--repeat R]``; TREE defaults to this
venv's site-packages. For each pattern it prints the number of matching lines our tool
returned; the wall time of our tool (through the real runner), of ``rg`` run directly and of
GNU grep, each the median of N runs, as min / median / max over R rounds; and the ratios of
our tool to each, taken per round (its median over the other's median in that round), as
min / median / max over the R rounds. Within a round the three take turns, run by run, so
that a change of load on a shared machine falls on all of them. Then one catastrophic
pattern, ``(a+)+$`` on a line of 100,000 a's and a b, through the tool, timed once per round.

rg and grep are told the same skips as the tool (node_modules, .git, dist; binary files) and,
for a pattern whose matches the tool caps at 50, are stopped after 50 lines by ``head`` so
that all do comparable work. All run warm: one untimed run first fills the page cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from executor import Settings, ToolCall, ToolRegistry, TruncationPolicy, truncate
from executor.contract import Workspace
from executor.wire import ToolStatus
from workers.pipeline._runner import CallEnvironment, run_call
from workers.tools._ripgrep_bin import find_rg
from workers.tools.search import GREP_MAX_MATCHES, GREP_SKIPPED_DIRS, grep


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
    # No literal a match must contain: no engine can skip a file without running the regex.
    Case("rare, no literal", r"[qz]{3}[0-9]{2}"),
)
CATASTROPHIC = r"(a+)+$"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("tree", nargs="?", default=site.getsitepackages()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (min / median / max)")
    args = parser.parse_args(argv)
    tree = Path(args.tree).resolve()
    rg = find_rg()
    if shutil.which("grep") is None or rg is None:
        print("GNU grep or rg is missing; nothing to compare with.", file=sys.stderr)
        return 1
    files = sum(1 for path in tree.rglob("*") if path.is_file())
    size = sum(path.stat().st_size for path in tree.rglob("*") if path.is_file())
    print(
        f"tree: {tree} ({files} files, {size / 1e6:.0f} MB); each time the median of "
        f"{args.runs} runs, as min / median / max of {args.repeat} rounds, and each ratio "
        f"taken per round; load {_load()}\n"
    )
    rounds: dict[str, list[Round]] = {case.pattern: [] for case in CASES}
    matches: dict[str, int] = {}
    catastrophic: list[float] = []
    for _ in range(args.repeat):
        for case in CASES:
            found, this_round = _time_round(rg, tree, case.pattern, args.runs)
            matches[case.pattern] = found
            rounds[case.pattern].append(this_round)
        catastrophic.append(_time_catastrophic())
    header = (
        f"{'case':<19} {'pattern':<23} {'matches':>7} {'toolpool ms':>12} {'rg ms':>12} "
        f"{'grep ms':>12} {'toolpool/rg':>15} {'toolpool/grep':>15}"
    )
    print(header)
    print("-" * len(header))
    for case in CASES:
        measured = rounds[case.pattern]
        print(
            f"{case.label:<19} {case.pattern:<23} {matches[case.pattern]:>7} "
            f"{_spread([r.tool for r in measured], '.0f'):>12} "
            f"{_spread([r.rg for r in measured], '.0f'):>12} "
            f"{_spread([r.grep for r in measured], '.0f'):>12} "
            f"{_spread([r.tool / r.rg for r in measured], '.2f'):>15} "
            f"{_spread([r.tool / r.grep for r in measured], '.2f'):>15}"
        )
    print(
        f"\n{CATASTROPHIC} on a 100,000-character line, through the tool: "
        f"{_spread(catastrophic, '.0f')} ms"
    )
    print(f"\nrg:   {_rg_command(rg, tree, '<pattern>')}\ngrep: {_grep_command(tree, '<pattern>')}")
    return 0


@dataclass(frozen=True)
class Round:
    """One round of one pattern: the median ms of the tool, of rg and of GNU grep."""

    tool: float
    rg: float
    grep: float


def _time_round(rg: str, tree: Path, pattern: str, runs: int) -> tuple[int, Round]:
    """The tool's match count, and the round's medians, the three taking turns run by run."""
    tool = _tool_call(tree, pattern)
    good, content = tool()  # warm-up, and the match count
    if not good:
        raise SystemExit(f"grep tool failed on {pattern!r}: {truncate(content, 300).text}")
    found = sum(1 for line in content.splitlines() if not line.startswith(("...", "(")))
    if content.startswith("No matches"):
        found = 0
    capped = found >= GREP_MAX_MATCHES
    rg_command = _shell(_rg_command(rg, tree, pattern), capped)
    grep_command = _shell(_grep_command(tree, pattern), capped)
    for command in (rg_command, grep_command):
        subprocess.run(command, shell=True, check=False)  # warm-up
    times: dict[str, list[float]] = {"tool": [], "rg": [], "grep": []}
    for _ in range(runs):
        times["tool"].append(_timed(tool))
        times["rg"].append(_timed(lambda: subprocess.run(rg_command, shell=True, check=False)))
        times["grep"].append(_timed(lambda: subprocess.run(grep_command, shell=True, check=False)))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return found, Round(**medians)


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _spread(values: list[float], spec: str) -> str:
    """min/median/max of ``values``, each formatted by ``spec``."""
    ordered = sorted(values)
    low, middle, high = ordered[0], statistics.median(ordered), ordered[-1]
    return f"{low:{spec}}/{middle:{spec}}/{high:{spec}}"


def _tool_call(tree: Path, pattern: str, path: str = ".") -> Callable[[], tuple[bool, str]]:
    # A generous result limit, so that the cost measured is the search and not truncation.
    settings = Settings(truncation=TruncationPolicy(default_max_chars=10**6, global_cap=10**6))
    env = CallEnvironment(workspace=Workspace(tree), settings=settings)
    registry = ToolRegistry([grep])
    call = ToolCall(name="grep", arguments={"pattern": pattern, "path": path})

    def run() -> tuple[bool, str]:
        result = run_call(call, registry, env)
        return result.status is ToolStatus.OK, result.content

    return run


def _time_catastrophic() -> float:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "aaa.txt").write_text("a" * 100_000 + "b\n")
        run = _tool_call(Path(folder), CATASTROPHIC, "aaa.txt")
        started = time.perf_counter()
        run()
        return (time.perf_counter() - started) * 1000


def _skips() -> str:
    return " ".join(f"--exclude-dir={name}" for name in sorted(GREP_SKIPPED_DIRS))


def _grep_command(tree: Path, pattern: str) -> str:
    return f"grep -rniIE {_skips()} -e {_quote(pattern)} {_quote(str(tree))}"


def _rg_command(rg: str, tree: Path, pattern: str) -> str:
    globs = " ".join(f"-g '!{name}/'" for name in sorted(GREP_SKIPPED_DIRS))
    return f"{_quote(rg)} -ni --no-require-git {globs} -e {_quote(pattern)} {_quote(str(tree))}"


def _shell(command: str, capped: bool) -> str:
    return command + (f" | head -n {GREP_MAX_MATCHES}" if capped else "") + " >/dev/null"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit(main())
