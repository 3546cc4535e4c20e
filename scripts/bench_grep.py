"""Compare toolpool's grep tool with ripgrep and GNU ``grep -rniE`` on a real source tree.

    .venv/bin/python scripts/bench_grep.py [TREE] [--runs N] [--repeat R]

TREE defaults to this venv's site-packages. What it measures and how:
``tests/support/bench/grep.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.grep import main

if __name__ == "__main__":
    sys.exit(main())
