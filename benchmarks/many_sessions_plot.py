"""The figure of ``benchmarks.many_sessions``: create time and Redis memory by session count,
and the distribution of a turn's latency with many agents against one agent a worker.

Drawn with matplotlib (the ``bench`` extra, ``pip install -e '.[bench]'``); without it the
benchmark prints its figures and says the PNG was not written.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.agent_turns import CALLS_A_TURN, LoadRun, percentile
from benchmarks.figure import panels, save
from benchmarks.many_sessions_report import Timed


@dataclass(frozen=True)
class Bin:
    """A tenth of the creates, over every run: the sessions made at its end, p50 and p99
    of a create in ms with the host picked and given, Redis's memory over the start in MiB
    at its end (median of the runs)."""

    made: int
    picked_p50: float
    picked_p99: float
    given_p50: float
    given_p99: float
    memory_mib: float


def create_bins(creates: list[Timed]) -> list[Bin]:
    """The creates of every run, by tenths of the way (where the memory was read)."""
    marks = [made for made, _ in creates[0].memory]
    bins = []
    for first, last in itertools.pairwise(marks):
        picked = [t * 1000 for run in creates for t in run.of(True, first, last)]
        given = [t * 1000 for run in creates for t in run.of(False, first, last)]
        grown = statistics.median(dict(run.memory)[last] / 2**20 for run in creates)
        bins.append(
            Bin(
                last,
                _percentile(picked, 0.5),
                _percentile(picked, 0.99),
                _percentile(given, 0.5),
                _percentile(given, 0.99),
                grown,
            )
        )
    return bins


def _top(values: Iterable[float]) -> float:
    """The largest of ``values`` that is a number (1 if none is)."""
    return max((value for value in values if not math.isnan(value)), default=1.0)


def _percentile(values: list[float], share: float) -> float:
    # A tenth of very few sessions may hold creates of one kind only: no point drawn.
    return percentile(values, share) if values else math.nan


def plot(
    path: Path,
    creates: list[Timed],
    first: list[LoadRun],
    many: list[LoadRun],
    few: list[LoadRun],
    workers: int,
) -> str:
    """Draw the creates and the loads into ``path``; what was done, as a line to print."""
    found = panels(path, 3, width=16)
    if isinstance(found, str):
        return found
    figure, (created, held, turns) = found
    _draw_creates(created, creates)
    _draw_memory(held, creates)
    _draw_latencies(turns, first, many, few, workers)
    return save(
        figure,
        path,
        f"toolpool: {len(creates[0].times_s)} sessions on one host, {workers} workers "
        f"({os.cpu_count()} cores, one machine; {len(creates)} run(s))",
    )


def _log_ticks(along: Any) -> None:
    """Ticks at 1, 2 and 5 of each decade on a log axis, written plainly (50, not 5x10^1)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    along.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    along.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    along.set_minor_formatter(NullFormatter())


def _draw_creates(axis: Any, creates: list[Timed]) -> None:
    bins = create_bins(creates)
    made = [b.made for b in bins]
    for color, what, p50, p99 in (
        ("C0", "host picked", [b.picked_p50 for b in bins], [b.picked_p99 for b in bins]),
        ("C2", "host given", [b.given_p50 for b in bins], [b.given_p99 for b in bins]),
    ):
        axis.plot(made, p50, marker="o", color=color, label=f"{what}: p50")
        axis.plot(made, p99, marker="x", linestyle="--", color=color, label=f"{what}: p99")
    # Log: the default path's p99 is tens of times the given host's p50.
    axis.set_yscale("log")
    _log_ticks(axis.yaxis)
    axis.set_xlim(left=0)
    axis.set_xlabel("sessions on the host")
    axis.set_ylabel("Sessions.create, ms (log scale)")
    axis.legend(fontsize=8, loc="upper left")
    axis.set_title(
        "create, one after another: the host picked (the default) or given;\n"
        "p50 and p99 over each tenth of the sessions",
        fontsize=9,
    )


def _draw_memory(axis: Any, creates: list[Timed]) -> None:
    bins = create_bins(creates)
    made = [0, *(b.made for b in bins)]
    grown = [0.0, *(b.memory_mib for b in bins)]
    axis.plot(made, grown, marker=".", color="C3")
    each = grown[-1] * 2**20 / made[-1]
    axis.text(
        0.03,
        0.92,
        f"{each:,.0f} B a session, RQ's records\nof the create jobs included",
        transform=axis.transAxes,
        fontsize=8,
        va="top",
    )
    axis.set_xlim(left=0)
    axis.set_ylim(bottom=0, top=max(grown) * 1.25 or 1)
    axis.set_xlabel("sessions on the host")
    axis.set_ylabel("MiB over the start")
    axis.set_title("Redis used_memory less connections' buffers", fontsize=9)


def _draw_latencies(
    axis: Any, first: list[LoadRun], many: list[LoadRun], few: list[LoadRun], workers: int
) -> None:
    agents = many[0].agents
    sides = [
        (many, "C0", f"{agents} agents, a session each"),
        (first, "C2", "the same, a session's first turn"),
        (few, "C1", f"{few[0].agents} agents (one a worker)"),
    ]
    for loads, color, label in sides:
        latencies = sorted(t * 1000 for load in loads for t in load.latencies_s)
        shares = [(i + 1) / len(latencies) for i in range(len(latencies))]
        rate = statistics.median(load.rate for load in loads)
        axis.plot(latencies, shares, color=color, label=f"{label}: {rate:.0f} calls/s")
        for share, style in ((0.5, ":"), (0.99, "--")):
            axis.axvline(percentile(latencies, share), color=color, linestyle=style, lw=0.8)
    axis.set_xscale("log")
    _log_ticks(axis.xaxis)
    axis.set_ylim(0, 1.02)
    axis.set_xlabel("a turn's latency, ms (log scale; p50 dotted, p99 dashed)")
    axis.set_ylabel("share of turns at most this long")
    axis.set_title(
        f"turns of {CALLS_A_TURN} calls (write, read + grep, bash true) on {workers} workers",
        fontsize=9,
    )
    axis.legend(fontsize=8, loc="upper left")
