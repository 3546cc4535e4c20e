"""Session folders on this host's disk: made whole or not at all, removed out of sight first.

A folder is built under a hidden name and renamed into place, so a session never shows half a
template; a folder being removed is renamed away first, so no call finds half of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from executor import SessionError

# The names under the sessions root that hold no session (a session name never starts so).
_BUILDING, _REMOVING = ".creating-", ".removing-"


def make_folder(root: Path, name: str, template: str = "") -> Path:
    """Create ``root/name``, empty or a copy of ``template`` (a folder on this host)."""
    target = root / name
    if target.exists():
        raise SessionError(
            f"{target} already exists on this host (left by an earlier session?); remove it "
            "or choose another session name."
        )
    building = root / f"{_BUILDING}{name}-{uuid.uuid4().hex[:8]}"
    try:
        if template:
            _copy(Path(template), building)
        else:
            building.mkdir()
        os.rename(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return target


def _copy(template: Path, into: Path) -> None:
    """Copy ``template`` as ``cp -a`` does (links, modes, times kept; reflinks where possible)."""
    if not template.is_absolute() or not template.is_dir():
        raise SessionError(f"Template {str(template)!r} is not a folder on this host.")
    done = subprocess.run(
        ["cp", "-a", "--reflink=auto", "--", str(template), str(into)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SessionError(f"Copying template {template} failed: {done.stderr.strip()}")


def remove_folder(root: Path, name: str) -> bool:
    """Remove ``root/name`` if it exists: renamed out of sight, then deleted. True if it was."""
    target = root / name
    if not target.exists():
        return False
    removing = root / f"{_REMOVING}{name}-{uuid.uuid4().hex[:8]}"
    os.rename(target, removing)
    shutil.rmtree(removing, ignore_errors=True)
    return True


def folder_size(folder: Path) -> int:
    """Bytes used by the files under ``folder`` (links not followed)."""
    total = 0
    for path, _dirs, files in os.walk(folder):
        for file in files:
            try:
                total += os.lstat(os.path.join(path, file)).st_size
            except OSError:
                continue
    return total
