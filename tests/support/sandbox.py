"""The bash sandbox in tests: which modes this machine can run, and settings for each."""

from __future__ import annotations

import pytest

from executor import Settings
from workers.tools._sandbox import probe


def require_sandbox(network: bool = False) -> None:
    """Skip the test, saying why, where bubblewrap is missing or the kernel refuses it."""
    found = probe(network)
    if found.bwrap is None:
        pytest.skip(f"no bash sandbox here: {found.reason}")


def settings_for_mode(mode: str, **changes: object) -> Settings:
    return Settings(bash_sandbox=mode).with_changes(**changes)
