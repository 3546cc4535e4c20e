"""Where grep's engine, the ``rg`` binary, is: the one the ``ripgrep`` wheel installs.

The wheel puts ``rg`` among the interpreter's scripts (``.venv/bin``), which need not be on
PATH (a worker started as ``.venv/bin/toolpool worker``). On a platform the wheel has no build
for, pip skips it (see the marker in pyproject.toml); an ``rg`` on PATH is then used if it is
recent enough, else grep runs on Python's ``re`` (``_grep_proc``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# Older releases lack flags grep passes (--no-require-git came in 11, --no-ignore-parent and
# --no-ignore-messages are older); 13 is what current distributions ship.
MIN_VERSION = (13, 0)
_NAME = "rg.exe" if os.name == "nt" else "rg"


@functools.cache
def find_rg() -> str | None:
    """The path of a working ``rg`` of at least ``MIN_VERSION``, or None (checked once)."""
    candidates = [
        sysconfig.get_path("scripts"),
        os.path.dirname(sys.executable),
        # A venv's interpreter may be a link to the base one: the venv's own scripts first.
        os.path.join(sys.prefix, "Scripts" if os.name == "nt" else "bin"),
    ]
    seen: set[str] = set()
    for folder in candidates:
        path = os.path.join(folder, _NAME)
        if path not in seen and os.path.isfile(path) and _works(path):
            return path
        seen.add(path)
    on_path = shutil.which("rg")
    if on_path is not None and on_path not in seen and _works(on_path):
        return str(Path(on_path).resolve())
    return None


def _works(path: str) -> bool:
    try:
        answer = subprocess.run([path, "--version"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    found = re.match(rb"ripgrep (\d+)\.(\d+)", answer.stdout)
    return (
        answer.returncode == 0
        and found is not None
        and (int(found[1]), int(found[2])) >= MIN_VERSION
    )
