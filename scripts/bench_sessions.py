"""Measure sessions: agents' exclusive calls in sessions of their own against one shared lock.

    .venv/bin/python scripts/bench_sessions.py [--runs 3] [--quick] [--plot PATH]

What it measures and how: ``tests/support/bench/sessions.py``. The figure (default
``docs/figures-sessions.png``; none with ``--quick`` unless ``--plot`` is given) needs
matplotlib; without it the figures are printed only.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable
# (the benchmark's spawned workers inherit this sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.sessions import main

if __name__ == "__main__":
    sys.exit(main())
