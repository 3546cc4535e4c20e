"""The fault run: worker pools and orchestrators under load while faults are injected.

    .venv/bin/python scripts/fault_run.py [--calls N] [--workers N] [--orchestrators N]
        [--seconds S] [--lease-ms MS] [--max-faults N] [--fault-gap S] [--seed N]
        [--turn-timeout S] [--sessions N]

The run and its parts live in ``tests/support/fault/`` (``run`` holds the run); exit code 1
when a check found a violation that is not a known, reported fault. ``--sessions N`` spreads
the turns over N sessions (and the workspace); 0, the default, runs without sessions.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fault.run import main

if __name__ == "__main__":
    sys.exit(main())
