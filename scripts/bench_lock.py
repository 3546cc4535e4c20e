"""Measure toolpool's distributed reader/writer lock on a private redis-server.

    .venv/bin/python scripts/bench_lock.py [--runs 2000] [--hand-offs 300] [--seconds 3]
        [--fair-attempts 20] [--rp-attempts 3]

What it measures and how: ``tests/support/bench/lock.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable
# (the benchmark's spawned children inherit this sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.lock import main

if __name__ == "__main__":
    sys.exit(main())
