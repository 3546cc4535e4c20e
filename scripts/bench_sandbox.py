"""What bash's sandbox and limits cost per call, against unconfined bash, in the same run.

    .venv/bin/python scripts/bench_sandbox.py [--runs N] [--calls N] [--warmup N]
        [--only true,sleep]

What it measures and how: ``tests/support/bench/sandbox.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.sandbox import main

if __name__ == "__main__":
    sys.exit(main())
