"""The figure of ``benchmarks.sessions``: the headline and the sweep, as a PNG.

Drawn with matplotlib (the ``bench`` extra, ``pip install -e '.[bench]'``); without it the
benchmark prints its figures and says the PNG was not written.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from benchmarks.figure import save, two_panels
from benchmarks.session_shape import (
    CALLS,
    HEADLINE_AGENTS,
    HEADLINE_WORKERS,
    SHARED_AGENTS,
    SLEEP_S,
    TARGET,
    Measured,
)


def plot(path: Path, headline: dict[int, list[Measured]], sweep: list[Measured]) -> str:
    """Draw the headline and the sweep into ``path``; what was done, as a line to print."""
    panels = two_panels(path)
    if isinstance(panels, str):
        return panels
    figure, left, right = panels
    labels = ["no sessions\n(one lock scope)", f"{HEADLINE_AGENTS} sessions"]
    walls = [statistics.median(m.wall_s for m in headline[s]) for s in (0, HEADLINE_AGENTS)]
    ideal = headline[HEADLINE_AGENTS][0].shape.ideal_s
    bars = right.bar(labels, walls, color=["#c0504d", "#4f81bd"])
    right.axhline(ideal, color="black", linestyle="--", linewidth=1)
    right.text(-0.45, ideal, f"ideal {ideal:.1f} s", va="bottom", ha="left", fontsize=8)
    for bar, wall in zip(bars, walls, strict=True):
        right.text(
            bar.get_x() + bar.get_width() / 2,
            wall,
            f"{wall:.2f} s\nefficiency {ideal / wall:.2f}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    right.set_ylabel("wall time, s (median)")
    right.set_ylim(0, max(walls) * 1.25)
    right.set_title(
        f"{HEADLINE_AGENTS} agents x {CALLS} bash `sleep {SLEEP_S:g}`, {HEADLINE_WORKERS} "
        f"workers (median of {len(headline[0])} run(s))",
        fontsize=9,
    )
    for sessions in sorted({m.shape.sessions for m in sweep}):
        cells = sorted(
            (m for m in sweep if m.shape.sessions == sessions), key=lambda m: m.shape.workers
        )
        shared = f", {SHARED_AGENTS} agents (ideal: its lock's {cells[0].shape.ideal_s:g} s)"
        left.plot(
            [m.shape.workers for m in cells],
            [m.efficiency for m in cells],
            marker="o",
            label=cells[0].shape.label + (shared if sessions == 1 else ""),
        )
    left.axhline(TARGET, color="gray", linestyle=":", linewidth=1, label=f"target {TARGET}")
    left.set_xscale("log", base=2)
    workers = sorted({m.shape.workers for m in sweep})
    left.set_xticks(workers, [str(w) for w in workers])
    left.set_ylim(0, 1.05)
    left.set_xlabel("workers")
    left.set_ylabel("efficiency (ideal / measured)")
    left.set_title(
        f"sweep: an agent a session, {CALLS} x sleep {SLEEP_S:g} each; one run a cell", fontsize=9
    )
    left.legend(fontsize=8, loc="lower left")
    return save(figure, path, f"toolpool sessions ({os.cpu_count()} cores, one machine)")
