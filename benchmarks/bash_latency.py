"""The bash tool's extra latency over ``subprocess.run``: does it hear the shell end at once?

Usage: ``python -m benchmarks.bash_latency [--runs 3] [--pairs 30] [--warmup 3]``. The tool is
called in-process as a worker calls it (validate, then invoke), unconfined (sandbox off, no
cgroup: ``benchmarks.sandbox`` measures what those add), in a temporary workspace removed at
the end, against ``subprocess.run(["bash", "-c", command])`` of the same command. Per run and
command: the median of paired differences, tool minus ``subprocess.run``, the two of a pair
back to back in alternating order (so load hits both sides alike); over ``--runs`` runs,
min / median / max of those medians.

Commands: ``true``, ``echo hi``, ``sleep 0.05``, ``sleep 0.1``, ``sleep 0.1 & echo hi`` (the
shell exits at once and its background child holds stdout: the tool kills the child, where
``subprocess.run`` waits for the pipe), and a shell that exits while its background child
(``sleep 5``) holds the tool's pipes, against a reference whose child writes elsewhere: the
time the tool takes to hear that exit and end the child. Reference children are ended by the
pids they print.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from executor import ToolContext
from executor.contract import Workspace
from workers.tools import _confine
from workers.tools._cgroup import Cgroups
from workers.tools._shell_settings import BashSettings
from workers.tools.shell import bash

COMMANDS = ("true", "echo hi", "sleep 0.05", "sleep 0.1", "sleep 0.1 & echo hi")
BACKGROUND = "shell exits, its background child holds the pipes"


def tool_call(context: ToolContext, command: str) -> Callable[[], str]:
    """The tool as the worker calls it, minus the runner: validate, then invoke."""

    def run() -> str:
        result = bash.invoke(context, bash.validate({"command": command}))
        if not isinstance(result, str):
            raise RuntimeError(f"bash answered {result!r}")
        return result

    return run


def reference_call(command: str, cwd: Path) -> Callable[[], str]:
    """``subprocess.run`` of ``command`` in ``cwd``; its standard output."""

    def run() -> str:
        done = subprocess.run(["bash", "-c", command], capture_output=True, cwd=cwd, check=False)
        return done.stdout.decode()

    return run


def paired_extra_ms(
    tool: Callable[[], str], reference: Callable[[], str], pairs: int, warmup: int
) -> float:
    """Median of (tool - reference) over ``pairs`` interleaved pairs, after ``warmup``."""
    for _ in range(warmup):
        tool()
        reference()
    differences = []
    for index in range(pairs):
        first, second = (reference, tool) if index % 2 else (tool, reference)
        times = {}
        for side in (first, second):
            start = time.perf_counter()
            side()
            times[side] = (time.perf_counter() - start) * 1000.0
        differences.append(times[tool] - times[reference])
    return statistics.median(differences)


def _background(context: ToolContext, root: Path, pairs: int, warmup: int) -> float:
    children: list[int] = []
    run_reference = reference_call("sleep 5 >/dev/null 2>&1 & echo $!", root)

    def reference() -> str:
        output = run_reference()
        children.append(int(output))
        return output

    try:
        return paired_extra_ms(tool_call(context, "sleep 5 & echo $!"), reference, pairs, warmup)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def measure(runs: int, pairs: int, warmup: int) -> dict[str, list[float]]:
    """Per command (and the background case), the run medians of the paired extra, ms."""
    figures: dict[str, list[float]] = {name: [] for name in (*COMMANDS, BACKGROUND)}
    # No cgroup: on some kernels a sleeping process in a cgroup wakes late. Put back after,
    # for a process (a test) that goes on.
    namespace = vars(_confine)  # the name the tool looks the cgroups up by
    found = namespace["find_cgroups"]
    namespace["find_cgroups"] = lambda: Cgroups(None, None, None)
    try:
        with tempfile.TemporaryDirectory(prefix="toolpool-bash-latency-") as folder:
            root = Path(folder)
            settings = BashSettings(sandbox="off")
            context = ToolContext(workspace=Workspace(root), settings=settings)
            for _ in range(runs):
                for command in COMMANDS:
                    tool, reference = tool_call(context, command), reference_call(command, root)
                    figures[command].append(paired_extra_ms(tool, reference, pairs, warmup))
                figures[BACKGROUND].append(_background(context, root, pairs, warmup))
    finally:
        namespace["find_cgroups"] = found
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bash_latency")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    if min(args.runs, args.pairs) < 1 or args.warmup < 0:
        parser.error("--runs and --pairs must be at least 1, --warmup not negative")
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    figures = measure(args.runs, args.pairs, args.warmup)
    print(
        f"bash tool over subprocess.run, unconfined, median of {args.pairs} paired differences "
        f"a run; min / median / max over {args.runs} run(s), ms"
    )
    for name, values in figures.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"  {name:52s} {low:+7.2f} / {mid:+7.2f} / {high:+7.2f}")
    print(f"load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
