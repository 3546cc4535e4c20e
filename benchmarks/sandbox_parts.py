"""Where a sandboxed bash command's launch time goes: each stage of the launch timed alone.

Usage: ``python -m benchmarks.sandbox_parts [--runs 3] [--calls 30] [--together 1]``. Each
chain runs ``bash -c 'echo $EPOCHREALTIME; sleep 0.1; echo $EPOCHREALTIME'``, timed on two sides:
*start*, from the spawn to bash's first line, and *end*, from bash's last line to its process
seen ending (through a pidfd, as the tool hears it). The chains, each one stage more than a
plain ``bash`` (a fresh cgroup, a session's network namespace and a workspace made before
the clock, as in a call):

- ``bash``: ``bash -c`` alone;
- ``launcher``: bash's ``/bin/sh`` launcher first (ulimits);
- ``+ cgroup join``: the launcher joining the command's cgroups (pids, memory, cpu);
- ``nsenter``: into a network namespace held by another process (root only);
- ``bwrap``: bubblewrap with the tool's mounts and namespaces;
- ``cold chain``: launcher, cgroup join, nsenter and bwrap: a call that makes its launch;
- ``made ahead``: the same chain started before the clock, waiting (``_shell_warm``); only
  the script handed over is timed.

Also: how long after a sandbox's bwrap reports the command's end its init takes to go (it
takes the sandbox's namespaces down). Per run, the median of ``--calls`` calls, chains
interleaved; min / median / max over runs.

``--together N`` starts each call N times at once (N threads released together), as N
workers do whose calls start in the same moment (a session's first call on each): the kernel
sets up mounts and namespaces one at a time, so a launch made in the call takes longer with
company than alone, where one made ahead does not.
"""

from __future__ import annotations

import argparse
import os
import select
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.entry import at_least, run_bench
from workers.tools._cgroup import CallCgroup, Limits, find_cgroups
from workers.tools._sandbox import SandboxSpec, bwrap_argv, hidden_paths, probe, sandbox_init
from workers.tools._shell_settings import DEFAULT_HIDE, BashSettings
from workers.tools._shell_unit import Place, Unit, script

_COMMAND = "echo $EPOCHREALTIME; sleep 0.1; echo $EPOCHREALTIME"
_LAUNCHER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class BenchError(Exception):
    """A chain did not run as measured."""


@dataclass(frozen=True)
class Timing:
    """One call: spawn to bash's first line, and bash's last line to its end seen (ms)."""

    start: float
    end: float


def timed(argv: list[str], cleanup: Callable[[], None] = lambda: None) -> Timing:
    """Spawn ``argv`` (whose tail prints two timestamps) and time both sides."""
    spawned = time.time()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True, env={})
    return _finish(process, spawned, cleanup)


def _finish(
    process: subprocess.Popen[bytes], spawned: float, cleanup: Callable[[], None]
) -> Timing:
    handle = os.pidfd_open(process.pid)
    try:
        select.select([handle], [], [])
        ended = time.time()
    finally:
        os.close(handle)
    assert process.stdout is not None
    lines = process.stdout.read().split()
    process.stdout.close()
    process.wait()
    cleanup()
    if process.returncode != 0 or len(lines) != 2:
        raise BenchError(f"a chain failed ({process.returncode}): {process.args!r}")
    return Timing((float(lines[0]) - spawned) * 1000, (ended - float(lines[1])) * 1000)


@contextmanager
def network_holder() -> Iterator[list[str]]:
    """A process holding a network namespace of its own, and the prefix that joins it."""
    nsenter = shutil.which("nsenter")
    if os.geteuid() != 0 or nsenter is None:
        yield []
        return
    holder = subprocess.Popen(["unshare", "-n", "sleep", "3600"])
    try:
        deadline = time.monotonic() + 10
        ours = os.stat("/proc/self/ns/net").st_ino
        while os.stat(f"/proc/{holder.pid}/ns/net").st_ino == ours:
            if time.monotonic() > deadline:
                raise BenchError("the network holder did not get its namespace")
            time.sleep(0.005)
        yield [nsenter, f"--net=/proc/{holder.pid}/ns/net", "--"]
    finally:
        holder.kill()
        holder.wait()


@dataclass
class Chains:
    """The chains measured, built once; each call makes what a call would make first."""

    workspace: Path
    network: list[str]
    bwrap: str
    settings: BashSettings

    def launcher(self, procs: list[str]) -> list[str]:
        return ["/bin/sh", "-c", _LAUNCHER, "toolpool-launch", *procs, "--"]

    def sandbox(self) -> list[str]:
        hidden = hidden_paths(DEFAULT_HIDE, self.workspace, ())
        spec = SandboxSpec(self.workspace, hidden, bool(self.network), 512 * 1024 * 1024)
        return [*self.network, *bwrap_argv(self.bwrap, spec, self.workspace)]

    def all(self) -> dict[str, Callable[[], Timing]]:
        bash = [shutil.which("bash") or "/bin/bash", "-c", _COMMAND]
        chains: dict[str, Callable[[], Timing]] = {
            "bash": lambda: timed(bash),
            "launcher": lambda: timed([*self.launcher([]), *bash]),
            "+ cgroup join": self._joined(bash, []),
        }
        if self.network:
            chains["nsenter"] = lambda: timed([*self.network, *bash])
        chains["bwrap"] = lambda: timed([*self.sandbox()[len(self.network) :], *bash])
        chains["cold chain"] = self._joined(bash, self.sandbox())
        chains["made ahead"] = self._ahead(bash)
        return chains

    def _joined(self, bash: list[str], middle: list[str]) -> Callable[[], Timing]:
        def run() -> Timing:
            cgroup = CallCgroup(find_cgroups(), Limits(512, 2048 * 1024 * 1024, 300.0))
            return timed([*self.launcher(cgroup.procs_files), *middle, *bash], cgroup.remove)

        return run

    def _ahead(self, bash: list[str]) -> Callable[[], Timing]:
        place = Place(
            self.settings,
            find_cgroups(),
            self.bwrap,
            self.workspace,
            (),
            tuple(self.network),
        )

        def run() -> Timing:
            unit = Unit.make(place)
            _ready(unit)
            spawned = time.time()
            unit.go(script(bash, {}, self.workspace))
            return _finish(unit.process, spawned, unit.close)

        return run


def _ready(unit: Unit) -> None:
    """Until the unit's sandbox has its shell waiting (its init's child, in the cgroup)."""
    cgroup = unit.confinement.cgroup
    deadline = time.monotonic() + 10
    while cgroup is not None and len(cgroup.pids()) < 3:
        if time.monotonic() > deadline:
            raise BenchError("a unit made ahead did not get ready")
        time.sleep(0.002)


def init_lingers(chains: Chains) -> float:
    """After bwrap has reported the command's end, how long its init takes to go (ms)."""
    cgroup = CallCgroup(find_cgroups(), Limits(512, 0, 0))
    process = subprocess.Popen(
        [*chains.launcher(cgroup.procs_files), *chains.sandbox(), "true"], env={}
    )
    try:
        process.wait()
        reported = time.monotonic()
        inits = [pid for pid in cgroup.pids() if sandbox_init(pid)]
        handles = [os.pidfd_open(pid) for pid in inits]
        if handles:
            select.select(handles, [], [], 10)
        gone = time.monotonic()
        for handle in handles:
            os.close(handle)
        return (gone - reported) * 1000
    finally:
        cgroup.remove()


def together(chain: Callable[[], Timing], count: int) -> list[Timing]:
    """``chain`` called ``count`` times at once, each in a thread, released together."""
    if count == 1:
        return [chain()]
    gate = threading.Barrier(count)
    found: list[Timing | BaseException] = []

    def call() -> None:
        try:
            gate.wait(30)
            found.append(chain())
        except BaseException as exc:  # handed to the caller, which raises it
            found.append(exc)

    threads = [threading.Thread(target=call, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    timings = [item for item in found if isinstance(item, Timing)]
    if len(timings) != count:
        raise BenchError(f"a chain started {count} at once failed: {found!r}")
    return timings


def _spread(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"load average at start: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    found = probe(False)
    cgroups = find_cgroups()
    if found.bwrap is None or None in (cgroups.pids, cgroups.memory, cgroups.cpu):
        raise BenchError(f"needs bubblewrap and the three cgroups: {found.reason or cgroups}")
    starts: dict[str, list[float]] = {}
    ends: dict[str, list[float]] = {}
    lingers: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="toolpool-bench-parts-") as folder,
        network_holder() as net,
    ):
        parts = Chains(Path(folder).resolve(), net, found.bwrap, BashSettings(sandbox="required"))
        chains = parts.all()
        for index in range(args.runs):
            taken: dict[str, list[Timing]] = {name: [] for name in chains}
            for call in range(args.calls + 2):
                names = list(chains) if call % 2 else list(chains)[::-1]
                for name in names:
                    timings = together(chains[name], args.together)
                    if call >= 2:  # two untimed rounds first
                        taken[name].extend(timings)
            for name, timings in taken.items():
                starts.setdefault(name, []).append(statistics.median(t.start for t in timings))
                ends.setdefault(name, []).append(statistics.median(t.end for t in timings))
            lingers.append(statistics.median(init_lingers(parts) for _ in range(args.calls)))
            print(f"run {index + 1}/{args.runs} done", flush=True)
    at_once = f", {args.together} at once" if args.together > 1 else ""
    print(f"\n{'chain' + at_once:<14} {'start ms (min / median / max)':>32} {'end ms':>24}")
    for name in chains:
        print(f"{name:<14} {_spread(starts[name]):>32} {_spread(ends[name]):>24}")
    print(f"\nsandbox init going after bwrap reported the end: {_spread(lingers)} ms")
    print(f"load average at end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when a chain failed, 130 when interrupted."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (min / median / max)")
    parser.add_argument("--calls", type=at_least(1), default=30, help="timed calls per chain")
    parser.add_argument(
        "--together", type=at_least(1), default=1, help="start each call this many times at once"
    )
    args = parser.parse_args(argv)
    return run_bench(lambda: run(args), (BenchError, OSError), stopped="the chains were ended")


if __name__ == "__main__":
    sys.exit(main())
