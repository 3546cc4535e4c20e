"""The shapes ``benchmarks.sessions`` measures and what one run of a shape measured.

Apart from the run so that its figure (``sessions_plot``) takes the same constants without
importing the module that ``python -m benchmarks.sessions`` runs as ``__main__``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CALLS = 5
SLEEP_S = 0.2
HEADLINE_AGENTS = 8
HEADLINE_WORKERS = 4
# The 1-session row of the sweep: this many agents share the one session.
SHARED_AGENTS = 8
TARGET = 0.85


@dataclass(frozen=True)
class Shape:
    """One configuration: workers, sessions (0: none, the one global scope) and agents."""

    workers: int
    sessions: int
    agents: int

    @property
    def label(self) -> str:
        if self.sessions == 0:
            return "no sessions"
        return f"{self.sessions} session{'s' if self.sessions > 1 else ''}"

    @property
    def ideal_s(self) -> float:
        """The work over the workers, but no faster than one scope's calls in a row."""
        per_scope_agents = math.ceil(self.agents / self.sessions) if self.sessions else 1
        return max(self.agents * CALLS * SLEEP_S / self.workers, per_scope_agents * CALLS * SLEEP_S)


@dataclass(frozen=True)
class Measured:
    """One run of a shape: its wall time, the calls that did not end ``exit code: 0``, and
    from the workers' events the median hold of a call (lock granted to released: the bash
    run) and the median gap between two calls of one worker (dispatch, and lock waits)."""

    shape: Shape
    wall_s: float
    failed: int
    hold_s: float
    gap_s: float

    @property
    def efficiency(self) -> float:
        return self.shape.ideal_s / self.wall_s
