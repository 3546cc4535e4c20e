"""How long a session takes to create from a big template, against ``cp -a`` of the same folder.

A session's folder is made by its host's worker with ``cp -a`` (reflinks where the file system
has them) under a hidden name, then renamed into place; the client waits for the worker's
answer. So a session should take as long as ``cp -a`` plus a round trip through the host's
queue. The template is this Python's site-packages (thousands of files, hundreds of MB).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sysconfig
import time
from pathlib import Path
from typing import Protocol

from executor import Sessions


class _Bench(Protocol):
    sessions: Sessions
    host: str
    folder: Path
    summary: list[str]

    def tag(self) -> str: ...

    def out(self, line: str = "") -> None: ...


def _tree(path: Path) -> tuple[int, int]:
    files = size = 0
    for item in path.rglob("*"):
        if item.is_file() and not item.is_symlink():
            files += 1
            size += item.stat().st_size
    return files, size


def measure_create(bench: _Bench, runs: int) -> None:
    """``runs`` times, alternating which goes first: ``cp -a`` of the template, then
    ``Sessions.create(template=...)``; print min / median / max of both and their ratio."""
    template = Path(sysconfig.get_paths()["purelib"]).resolve()
    files, size = _tree(template)
    bench.out(
        f"\nCreating a session from a template: {template} ({files:,} files, "
        f"{size / 2**20:,.0f} MiB), against `cp -a` of it on the same disk"
    )
    copies: list[float] = []
    creates: list[float] = []
    for run in range(runs):
        order = ("cp", "create") if run % 2 == 0 else ("create", "cp")
        for what in order:
            if what == "cp":
                target = bench.folder / f"cp-{bench.tag()}"
                began = time.monotonic()
                subprocess.run(["cp", "-a", "--", str(template), str(target)], check=True)
                copies.append(time.monotonic() - began)
                shutil.rmtree(target)
            else:
                name = f"{bench.tag()}-template"
                began = time.monotonic()
                bench.sessions.create(name, template=template, host=bench.host, timeout=600)
                creates.append(time.monotonic() - began)
                bench.sessions.delete(name, timeout=600)
    ratios = sorted(c / p for c, p in zip(creates, copies, strict=True))
    bench.out(f"  cp -a            {_spread(copies)} s")
    bench.out(f"  session create   {_spread(creates)} s")
    bench.out(f"  ratio create / cp -a, per run: {_spread(ratios)}")
    bench.summary.append(
        f"session create from a {size / 2**20:,.0f} MiB template / cp -a: "
        f"{_spread(ratios)} (min / median / max)"
    )


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{ordered[0]:.2f} / {statistics.median(ordered):.2f} / {ordered[-1]:.2f}"
