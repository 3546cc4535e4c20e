"""The bash sandbox in tests: which modes this machine can run, and settings for each."""

from __future__ import annotations

import pytest

from workers.tools._sandbox import probe
from workers.tools._shell_settings import BashSettings


def require_sandbox(network: bool = False) -> None:
    """Skip the test, saying why, where bubblewrap is missing or the kernel refuses it."""
    found = probe(network)
    if found.bwrap is None:
        pytest.skip(f"no bash sandbox here: {found.reason}")


def settings_for_mode(mode: str) -> BashSettings:
    """bash's settings in this sandbox mode."""
    return BashSettings(sandbox=mode)
