"""Whether ``toolpool dashboard`` with live viewers slows the pool, measured side by side.

    .venv/bin/python scripts/bench_dashboard.py [--runs 3] [--seconds 10] [--rate 100]
        [--viewers 10] [--workers 2]

What it measures and how: ``tests/support/bench/dashboard.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable
# (the benchmark's spawned workers and viewers inherit this sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.dashboard import main

if __name__ == "__main__":
    sys.exit(main())
