"""What ``benchmarks.many_sessions`` measured, run by run, and its report: each figure as
min / median / max over the runs, and the one-line summaries printed as each run goes.

Apart from the run so that its figure (``many_sessions_plot``) takes these types without
importing the module that ``python -m benchmarks.many_sessions`` runs as ``__main__``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks import session_memory as memory
from benchmarks.agent_turns import CALLS_A_TURN, LoadRun, percentile
from benchmarks.processes import spread


@dataclass(frozen=True)
class Timed:
    """Sessions made (or deleted) one after another: each one's seconds, the whole run's,
    and (creates) Redis's memory over its start (``used_memory`` less the connections'
    buffers) as (sessions made, bytes) pairs."""

    times_s: tuple[float, ...]
    total_s: float
    memory: tuple[tuple[int, int], ...] = ()
    # Creates: for each, whether ``Sessions.create`` picked the host (the default) rather
    # than being given it.
    picked: tuple[bool, ...] = ()

    def of(self, picked: bool, first: int = 0, last: int | None = None) -> list[float]:
        """The times of the creates ``first`` to ``last`` whose host was picked (or given)."""
        return [
            took
            for took, chosen in zip(self.times_s[first:last], self.picked[first:last], strict=True)
            if chosen is picked
        ]


@dataclass(frozen=True)
class Memory:
    """Redis memory of ``sessions`` idle sessions: ``used_memory`` after less before, the
    connections' buffers left out (``held_delta_b``), by how much those buffers moved
    meanwhile (``clients_delta_b``), and bytes by key family (``session_memory``'s names),
    each summed over the sessions."""

    sessions: int
    held_delta_b: int
    clients_delta_b: int
    families: dict[str, int]


@dataclass(frozen=True)
class Holders:
    """The network holders the used sessions keep on the host: how many live, their PSS."""

    sessions: int
    alive: int
    pss_kb: int


@dataclass
class Runs:
    """Every run's figures, in run order."""

    creates: list[Timed] = field(default_factory=list)
    deletes: list[Timed] = field(default_factory=list)
    idle: list[Memory] = field(default_factory=list)
    used: list[Memory] = field(default_factory=list)
    holders: list[Holders] = field(default_factory=list)
    first: list[LoadRun] = field(default_factory=list)
    many: list[LoadRun] = field(default_factory=list)
    few: list[LoadRun] = field(default_factory=list)


# -- lines and rows --------------------------------------------------------------------------


def create_line(made: Timed) -> str:
    """A run's creates, on one line."""
    parts = [
        f"{what} p50 {percentile(made.of(picked), 0.5) * 1000:.1f} ms, p99 "
        f"{percentile(made.of(picked), 0.99) * 1000:.1f} ms"
        for picked, what in ((True, "host picked:"), (False, "host given:"))
    ]
    return f"{len(made.times_s)} sessions in {made.total_s:.1f} s; " + "; ".join(parts)


def families_line(found: Memory) -> str:
    """Each key family's bytes a session, on one line."""
    return ", ".join(
        f"{name.split(' (')[0]} {size / found.sessions:.0f} B"
        for name, size in found.families.items()
    )


def memory_line(found: Memory) -> str:
    """A run's memory figures, on one line."""
    return (
        f"used_memory less connections' buffers +{found.held_delta_b / 2**20:.2f} MiB, "
        f"{found.held_delta_b / found.sessions:.0f} B a session (the buffers moved "
        f"{found.clients_delta_b / found.sessions:+.0f} B a session); by key family, a "
        "session: " + families_line(found)
    )


def load_line(load: LoadRun, workers: int) -> str:
    """A load's figures, on one line."""
    return (
        f"{load.agents} agents x {load.turns} turn(s) on {workers} workers: {load.calls} calls "
        f"in {load.wall_s:.1f} s, {load.rate:.0f} calls/s; a turn p50 "
        f"{percentile(load.latencies_s, 0.5) * 1000:.0f} ms, p99 "
        f"{percentile(load.latencies_s, 0.99) * 1000:.0f} ms; failed {load.failed}"
        + (f" (the first: {load.example})" if load.example else "")
    )


def _row(label: str, values: Sequence[float], form: str = ".1f") -> None:
    print(f"  {label:<58} {spread(values, form):>22}", flush=True)


def _load_rows(title: str, loads: list[LoadRun]) -> None:
    print(f"\n{title}")
    _row("calls/s", [load.rate for load in loads], ".0f")
    _row("a turn, p50, ms", [percentile(load.latencies_s, 0.5) * 1000 for load in loads], ".0f")
    _row("a turn, p99, ms", [percentile(load.latencies_s, 0.99) * 1000 for load in loads], ".0f")
    _row("failed calls", [load.failed for load in loads], ".0f")


def _timed_rows(what: str, count: int, timed: list[Timed]) -> None:
    _row(f"{what}, p50, ms", [percentile(r.times_s, 0.5) * 1000 for r in timed])
    _row(f"{what}, p99, ms", [percentile(r.times_s, 0.99) * 1000 for r in timed])
    _row(f"all {count}, s", [r.total_s for r in timed], ".2f")


def report(args: argparse.Namespace, runs: Runs) -> None:
    """Every figure as min / median / max over the runs."""
    count, workers, agents = args.sessions, args.workers, args.agents
    print(f"\nAll figures: min / median / max of {args.runs} run(s)")
    print(
        f"\nCreating {count} sessions, one after another (Sessions.create, empty folders), "
        "by turns with the host left to create to pick (the default) and given"
    )
    for picked, what in ((True, "host picked (the default)"), (False, "host given")):
        _row(f"{what}, p50, ms", [percentile(r.of(picked), 0.5) * 1000 for r in runs.creates])
        _row(f"{what}, p99, ms", [percentile(r.of(picked), 0.99) * 1000 for r in runs.creates])
    _row(f"all {count}, s", [r.total_s for r in runs.creates], ".2f")
    print(f"\nRedis memory per idle session, B ({count} sessions just made, workers idle)")
    held = [m.held_delta_b / count for m in runs.idle]
    _row("used_memory after - before, less connections' buffers", held, ".0f")
    for family in (*memory.FAMILIES, memory.RQ_RECORDS):
        _row(f"  {family}", [m.families[family] / count for m in runs.idle], ".0f")
    rest = [(m.held_delta_b - sum(m.families.values())) / count for m in runs.idle]
    _row("  elsewhere (the first row less the keys above)", rest, ".0f")
    moved = [m.clients_delta_b / count for m in runs.idle]
    _row("(connections' buffers moved meanwhile, left out)", moved, "+.0f")
    used = runs.used[0].sessions
    print(f"\nA session idle after its agent's {args.turns + 1} turns, B ({used} sessions)")
    for family in memory.FAMILIES[:-1]:
        _row(f"  {family}", [m.families[family] / m.sessions for m in runs.used], ".0f")
    print("A session's processes on the host after its turns")
    _row("  network holders live, per session", [h.alive / h.sessions for h in runs.holders], ".2f")
    _row(
        "  a network holder's PSS, MiB",
        [h.pss_kb / max(1, h.alive) / 1024 for h in runs.holders],
        ".2f",
    )
    each = f"of {CALLS_A_TURN} calls each"
    _load_rows(
        f"A session's first turn: {agents} agents at once, 1 turn {each} on {workers} workers",
        runs.first,
    )
    _load_rows(
        f"{agents} agents, a session each, on {workers} workers: {args.turns} turn(s) {each}",
        runs.many,
    )
    _load_rows(
        f"Beside it: {workers} agents (one a worker), as many calls: {runs.few[0].turns} turns",
        runs.few,
    )
    ratios = [m.rate / f.rate for m, f in zip(runs.many, runs.few, strict=True)]
    _row(f"calls/s, {agents} agents / {workers} agents (per run)", ratios, ".2f")
    print(f"\nDeleting the {count} sessions, one after another (Sessions.delete)")
    _timed_rows("a session", count, runs.deletes)
