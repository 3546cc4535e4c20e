"""What bash's confinement costs per call, against unconfined bash, measured in the same run.

Usage: ``python -m benchmarks.sandbox [--runs 3] [--calls 60] [--warmup 3]
[--only true,sleep]``. The tool is called in-process, as the tests call it (validate, then
invoke), in a temporary workspace removed at the end, in three modes:

- ``unconfined``: sandbox off, every limit 0 and no cgroup: bash as it ran before it was
  confined (the launcher is skipped, ``bash -c`` starts directly);
- ``limits only``: sandbox off, the default limits, in the cgroups this machine offers;
- ``sandbox``: sandbox required (bubblewrap) with the default limits: what a user gets by
  default where bubblewrap works. Left out, saying why, where bubblewrap is missing or refused;
- ``sandbox, no cgroup``: the same without the limits that need a cgroup (processes, memory,
  total CPU): what bubblewrap itself costs.

Commands: ``true`` (the fixed cost) and ``sleep 0.1``. A worker makes each command's launch
ahead (``workers.tools._shell_warm``): after a mode's first call, its calls find their cgroup
joined and their sandbox made, and the next one's is made in the background meanwhile, as on
a worker; ``benchmarks.sandbox_parts`` times a launch made in the call, stage by stage, and
``benchmarks.sandbox_pool`` the same calls through a pool. Each round calls every mode once, with
``unconfined`` between the first two confined modes and the order reversed every other round,
so load hits all modes alike and each confined call is paired with the unconfined one of its
round (right before or after it, for the first two). Per run, mode and command: the median
per-call time over ``--calls`` rounds, and the overhead, the median of the paired differences
against ``unconfined``. Over ``--runs``
runs: min / median / max of those medians.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.entry import at_least, run_bench
from executor import ToolContext, ToolError
from executor.contract import Workspace
from workers.tools import _confine
from workers.tools._cgroup import Cgroups
from workers.tools._confine import describe
from workers.tools._sandbox import probe
from workers.tools._shell_settings import BashSettings
from workers.tools.shell import bash

UNCONFINED = "unconfined"
LIMITS = "limits only"
SANDBOX = "sandbox"
SANDBOX_ALONE = "sandbox, no cgroup"
COMMANDS = {"true": "true", "sleep": "sleep 0.1"}
GOAL_MS = 10.0
GOAL = f"goal: sandbox overhead under {GOAL_MS:g} ms median per call"


class BenchError(Exception):
    """A call did not run as measured (it failed, or its mode could not be set up)."""


@dataclass(frozen=True)
class Mode:
    """One way of running bash; ``cgroups=False`` makes the call find no cgroup at all."""

    name: str
    settings: BashSettings
    cgroups: bool = True


def modes(sandbox: bool) -> list[Mode]:
    """The modes measured, ``unconfined`` first; ``sandbox`` only where it works."""
    # The calls get no worker folders, as on a worker whose pool workspace is the call's own
    # folder: only the configured paths are hidden from a sandboxed command.
    base = BashSettings(sandbox="off")
    found = [
        Mode(
            UNCONFINED,
            replace(base, cpu_seconds=0, memory_mb=0, max_processes=0, file_size_mb=0),
            cgroups=False,
        ),
        Mode(LIMITS, base),
    ]
    if sandbox:
        found.append(Mode(SANDBOX, replace(base, sandbox="required")))
        # The sandbox without the limits that need a cgroup: what bubblewrap alone costs.
        found.append(
            Mode(
                SANDBOX_ALONE,
                replace(base, sandbox="required", cpu_seconds=0, memory_mb=0, max_processes=0),
            )
        )
    return found


@contextlib.contextmanager
def no_cgroups() -> Iterator[None]:
    """Calls made inside find no cgroup (as ``benchmarks.bash_latency`` arranges it)."""
    names = vars(_confine)
    saved = names["find_cgroups"]
    names["find_cgroups"] = lambda: Cgroups(None, None, None)
    try:
        yield
    finally:
        names["find_cgroups"] = saved


def call_ms(mode: Mode, workspace: Workspace, command: str) -> float:
    """One call of the bash tool in ``mode``, in milliseconds; a failed command is an error."""
    context = ToolContext(workspace=workspace, settings=mode.settings)
    arguments = bash.validate({"command": command})
    with contextlib.nullcontext() if mode.cgroups else no_cgroups():
        started = time.perf_counter()
        result = bash.invoke(context, arguments)
        took = (time.perf_counter() - started) * 1000.0
    if not isinstance(result, str) or not result.startswith("exit code: 0"):
        raise BenchError(f"{command!r} failed in mode {mode.name!r}: {str(result)[:300]!r}")
    return took


def order(measured: Sequence[Mode], round_index: int) -> list[Mode]:
    """This round's order: ``unconfined`` (the first mode) between the next two, so their
    pairs run back to back (the later modes' within the same round), and the whole order
    reversed every other round."""
    first, *others = measured
    ordered = [*others[:1], first, *others[1:]]
    return ordered[::-1] if round_index % 2 else ordered


def measure(
    measured: Sequence[Mode], workspace: Workspace, command: str, calls: int, warmup: int
) -> dict[str, list[float]]:
    """Per mode, the time of each of ``calls`` rounds (index i: round i), after warm-ups."""
    for index in range(warmup):
        for mode in order(measured, index):
            call_ms(mode, workspace, command)
    times: dict[str, list[float]] = {mode.name: [] for mode in measured}
    for index in range(calls):
        for mode in order(measured, index):
            times[mode.name].append(call_ms(mode, workspace, command))
    return times


def overhead(times: dict[str, list[float]], mode: str) -> float:
    """Median of the paired differences of ``mode``'s calls against unconfined ones."""
    pairs = zip(times[mode], times[UNCONFINED], strict=True)
    return statistics.median(mine - theirs for mine, theirs in pairs)


@dataclass
class Figures:
    """Per command and mode, one median per run: of the per-call times, of the overheads."""

    per_call: dict[tuple[str, str], list[float]]
    overheads: dict[tuple[str, str], list[float]]

    def add(self, command: str, times: dict[str, list[float]]) -> None:
        for mode, values in times.items():
            self.per_call.setdefault((command, mode), []).append(statistics.median(values))
            if mode != UNCONFINED:
                self.overheads.setdefault((command, mode), []).append(overhead(times, mode))


def spread(values: Sequence[float], signed: bool = False) -> str:
    """``min / median / max``, to a hundredth of a millisecond."""
    form = "+.2f" if signed else ".2f"
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"{low:{form}} / {middle:{form}} / {high:{form}}"


def table(figures: Figures, commands: Sequence[str], names: Sequence[str]) -> list[str]:
    """The summary: per command and mode, min / median / max over runs of each run's median."""
    header = (
        f"{'command':<10} {'mode':<12} {'per call ms (min / median / max)':>34} "
        f"{'overhead ms (min / median / max)':>34}"
    )
    lines = [header, "-" * len(header)]
    for command in commands:
        for name in names:
            extra = figures.overheads.get((command, name))
            lines.append(
                f"{command:<10} {name:<12} {spread(figures.per_call[(command, name)]):>34} "
                f"{'-' if extra is None else spread(extra, signed=True):>34}"
            )
    return lines


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (min / median / max)")
    parser.add_argument("--calls", type=at_least(1), default=60, help="timed calls per mode")
    parser.add_argument("--warmup", type=at_least(0), default=3, help="untimed rounds before each")
    parser.add_argument(
        "--only", default=",".join(COMMANDS), help=f"commands, of {', '.join(COMMANDS)}"
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in COMMANDS]
    if unknown or not chosen:
        parser.error(f"--only takes names from {', '.join(COMMANDS)}, got {args.only!r}")
    args.commands = [COMMANDS[name] for name in dict.fromkeys(chosen)]
    return args


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average at start {_load()}"
    )
    found = probe(False)
    with tempfile.TemporaryDirectory(prefix="toolpool-bench-sandbox-") as folder:
        root = Path(folder).resolve()
        workspace = Workspace(root)
        measured = modes(found.bwrap is not None)
        print(f"workspace: {root} (removed at the end)\nmodes:")
        print(f"  {UNCONFINED:<19} sandbox off, no limits, no cgroup")
        limits = describe(measured[1].settings).lines[-1]
        print(f"  {LIMITS:<19} sandbox off; {limits}")
        if found.bwrap is None:
            print(f"sandbox: not measured: {found.reason}")
        else:
            print(f"  {SANDBOX:<19} {found.version or found.bwrap} (required); the same limits")
            print(
                f"  {SANDBOX_ALONE:<19} the same, without the limits that need a cgroup "
                "(processes, memory, total CPU)"
            )
        print(
            f"{_count(args.calls, 'call')} per mode and command after "
            f"{_count(args.warmup, 'warm-up round')}, modes interleaved; overhead: median of "
            f"paired differences against {UNCONFINED}, pairs in the same round, in alternating "
            f"order; {_count(args.runs, 'run')}"
        )
        print(GOAL + "\n")
        figures = Figures({}, {})
        for index in range(args.runs):
            for command in args.commands:
                times = measure(measured, workspace, command, args.calls, args.warmup)
                figures.add(command, times)
                parts = [f"{UNCONFINED} {statistics.median(times[UNCONFINED]):.2f} ms"]
                parts.extend(
                    f"{mode.name} {statistics.median(times[mode.name]):.2f} ms "
                    f"({overhead(times, mode.name):+.2f})"
                    for mode in measured[1:]
                )
                print(f"run {index + 1}/{args.runs}  {command:<10} " + ", ".join(parts))
    names = [mode.name for mode in measured]
    print()
    print("\n".join(table(figures, args.commands, names)))
    print(f"\nload average at end: {_load()}")
    if found.bwrap is None:
        print(f"{GOAL}: not measured (no sandbox here)")
        return
    verdicts = []
    for command in args.commands:
        middle = statistics.median(figures.overheads[(command, SANDBOX)])
        verdicts.append(f"{command} {middle:+.2f} ms ({'met' if middle < GOAL_MS else 'NOT met'})")
    print(f"{GOAL}: median over runs " + ", ".join(verdicts))


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when a call failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(
        lambda: run(args),
        (BenchError, ToolError),
        stopped="the running call and the workspace were cleaned up",
    )


if __name__ == "__main__":
    sys.exit(main())
