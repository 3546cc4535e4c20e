"""The figure of ``benchmarks.scale``: calls/s and per-call latency against workers.

Drawn with matplotlib (the ``bench`` extra, ``pip install -e '.[bench]'``); without it the
benchmark prints its table and says the PNG was not written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.figure import save, two_panels

if TYPE_CHECKING:
    # Only a type here: at run time this module would load a second copy of the module that
    # ``python -m benchmarks.scale`` runs as ``__main__``.
    from benchmarks.scale import Cell


def plot(path: Path, cells: list[Cell], seconds: float) -> str:
    """Draw the sweep into ``path``; what was done, as a line to print."""
    panels = two_panels(path)
    if isinstance(panels, str):
        return panels
    figure, left, right = panels
    from matplotlib.ticker import FuncFormatter, NullFormatter

    workers = sorted({c.workers for c in cells})
    for index, turn in enumerate(sorted({c.turn for c in cells})):
        row = sorted((c for c in cells if c.turn == turn), key=lambda c: c.workers)
        color = f"C{index}"
        label = f"turns of {turn} call{'s' if turn > 1 else ''}"
        xs = [c.workers for c in row]
        left.plot(xs, [c.rate for c in row], marker="o", color=color, label=label)
        right.plot(xs, [c.p50_ms for c in row], marker="o", color=color, label=f"{label}, p50")
        right.plot(
            xs,
            [c.p99_ms for c in row],
            marker="x",
            linestyle="--",
            color=color,
            label=f"{label}, p99",
        )
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(workers, [str(w) for w in workers])
        axis.set_xlabel("workers")
    left.set_ylim(bottom=0)
    left.set_ylabel("calls/s")
    left.set_title("throughput: trivial concurrency-safe calls", fontsize=9)
    left.legend(fontsize=8, loc="best")
    right.set_yscale("log")
    right.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    right.yaxis.set_minor_formatter(NullFormatter())
    right.set_ylabel("latency per call, ms (log scale)")
    right.set_title("latency, a call's turn submitted -> collected: p50 (o), p99 (x)", fontsize=9)
    right.legend(fontsize=7, loc="best", ncol=2)
    return save(
        figure,
        path,
        f"toolpool scale sweep ({os.cpu_count()} cores, one machine; {seconds:g} s "
        "a cell, closed-loop agents, 2 calls a worker in flight)",
    )
