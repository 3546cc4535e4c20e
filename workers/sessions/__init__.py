"""The worker's side of sessions: their folders on this host, created, measured and removed."""

from workers.sessions._admin import SessionAdmin
from workers.sessions._sweeper import SessionSweeper

__all__ = ["SessionAdmin", "SessionSweeper"]
