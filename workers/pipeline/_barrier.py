"""Commit barrier: right after a grant, wait until no earlier holder's commit is in flight.

A holder whose lease just ended may still be inside its commit (it undoes the commit if so,
see ``workers._commit``); the call just granted must see the workspace after that,
not during it. The lease guard (``workers.pipeline._lock``) passes the barrier between the
grant and announcing it: a barrier that fails gives the lease back, and the call did not run.
"""

from __future__ import annotations

from pathlib import Path

from workers._commit import commit_barrier


class CommitBarrier:
    """The barrier of a workspace: raises ``ToolError`` if a commit outlasts ``timeout``."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout

    def __call__(self, root: Path) -> None:
        """Return once no commit is in flight in the workspace at ``root`` (at once, usually)."""
        commit_barrier(root, timeout=self._timeout)
