"""Latency of one MCP ``tools/call`` (stdio and streamable HTTP) against ``Executor.run``.

    .venv/bin/python scripts/bench_mcp.py [--runs 3] [--calls 200] [--warmup 20]
        [--mode auto|legacy]

What it measures and how: ``tests/support/bench/mcp.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file from a fresh clone: the repository root makes ``tests.support`` importable
# (the benchmark's spawned workers inherit this sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bench.mcp import main

if __name__ == "__main__":
    sys.exit(main())
