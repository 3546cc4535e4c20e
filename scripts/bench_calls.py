"""Measure toolpool's calls against raw RQ, side by side on one private Redis.

    .venv/bin/python scripts/bench_calls.py [--calls 2000] [--workers 1,4] [--repeat 3]
        [--samples 200] [--batch-workers 4,8] [--profile] [--quick]

What it measures and how: ``tests/support/bench/calls.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable
# (the benchmark's spawned workers inherit this sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.calls import main

if __name__ == "__main__":
    sys.exit(main())
