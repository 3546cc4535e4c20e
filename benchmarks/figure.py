"""What the benchmarks' figures share: matplotlib, headless, panels side by side, the PNG.

matplotlib is the ``bench`` extra (``pip install -e '.[bench]'``); without it a benchmark
prints its figures and says the PNG was not written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def two_panels(path: Path) -> tuple[Any, Any, Any] | str:
    """A figure and its left and right axes; or, without matplotlib, the line to print."""
    found = panels(path, 2, width=11)
    if isinstance(found, str):
        return found
    figure, (left, right) = found
    return figure, left, right


def panels(path: Path, count: int, width: float) -> tuple[Any, list[Any]] | str:
    """A figure ``width`` inches wide and its ``count`` axes side by side; or, without
    matplotlib, the line to print."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            f"no figure: matplotlib is not installed (pip install matplotlib); {path} not written"
        )
    figure, axes = plt.subplots(1, count, figsize=(width, 4.2))
    return figure, list(axes)


def save(figure: Any, path: Path, title: str) -> str:
    """Title ``figure``, write it to ``path`` as a PNG and let it go; the line to print."""
    import matplotlib.pyplot as plt

    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"figure written to {path}"
