"""Asking a keeper to stop when its process folder is already gone (the session was deleted
while the keeper was still exiting): the keeper is signalled all the same, and the ask raises
nothing, so a session's end or a test's clean-up never fails on that race."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import wait_for
from workers.processes._table import ask_stop


def _names(pid: int, folder: Path) -> bool:
    try:
        return str(folder).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def test_a_keeper_whose_folder_went_is_still_signalled(tmp_path: Path) -> None:
    folder = tmp_path / ".toolpool-host" / "s" / "p1"  # never made: it went with its session
    # A stand-in keeper: named by its folder on its command line, as a real one is.
    keeper = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(600)", str(folder)]
    )
    try:
        # Named so once it runs its own command line, as a keeper is before it is recorded.
        wait_for(lambda: _names(keeper.pid, folder), "the stand-in keeper to start")
        ask_stop(folder, keeper.pid, "the session was deleted")
        assert keeper.wait(60) == -signal.SIGTERM
    finally:
        if keeper.poll() is None:
            keeper.kill()
            keeper.wait()
    assert not folder.exists()


def test_asking_a_gone_keeper_in_a_gone_folder_raises_nothing(tmp_path: Path) -> None:
    ask_stop(tmp_path / "gone" / "p1", 0, "the test ended")
