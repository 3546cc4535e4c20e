"""``toolpool dashboard``: a live web page of the pool (the ``dashboard`` extra)."""

from __future__ import annotations

from executor.dashboard._app import dashboard_app

__all__ = ["dashboard_app"]
