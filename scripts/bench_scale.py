"""Measure how toolpool scales: calls/s and p50/p99 latency by workers and turn size.

    .venv/bin/python scripts/bench_scale.py [--workers 1,2,4,8] [--turns 1,8,32]
        [--seconds 6] [--warm-s 1] [--figure docs/figures-scale.png] [--markdown PATH] [--quick]

What it measures and how: ``tests/support/bench/scale.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable
# (the benchmark's spawned workers inherit this sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.scale import main

if __name__ == "__main__":
    sys.exit(main())
