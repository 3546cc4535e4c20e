"""``toolpool up --sessions-root`` twice on one root: the second pool's sessions are made anew.

A private Redis goes with its pool, the records of its sessions too: the pool removes the
folders it made for them, so the same names can be created at the next ``up``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from executor.cli import main
from executor.wire import Keys, read_entries
from tests.support.waiting import wait_for
from tests.test_worker_cli import PATIENCE_S, TOOLPOOL, clean_env, end, read_until_workers

pytestmark = pytest.mark.proof  # Redis and a worker pool, twice


def _up_create_and_stop(workspace: Path, root: Path, name: str) -> str:
    """Run ``up``, create session ``name`` on it, stop it with Ctrl-C; ``up``'s output."""
    process = subprocess.Popen(
        [*TOOLPOOL, "up", "-n", "1", "--workspace", str(workspace), "--sessions-root", str(root)],
        env=clean_env(TOOLPOOL_HOST="h1"),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        text, _ = read_until_workers(process, 1)
        exported = re.search(r"export TOOLPOOL_REDIS_URL=(\S+)", text)
        assert exported, text
        client = redis.Redis.from_url(exported.group(1))
        try:  # the worker is listed once started; it serves once its catalog entry is out
            wait_for(lambda: any(e.host_queue for e in read_entries(client, Keys())), "a worker")
        finally:
            client.close()
        made = CliRunner().invoke(
            main, ["session", "create", name, "--redis", exported.group(1)], env=clean_env()
        )
        assert made.exit_code == 0, made.output
        assert (root / name).is_dir()
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        text += end(process)
    return text


def test_a_second_up_on_the_same_sessions_root_creates_the_same_session_again(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    first = _up_create_and_stop(tmp_path, root, "agent-1")
    assert f"removed the folders of sessions agent-1 from {root}" in first
    assert not (root / "agent-1").exists()
    second = _up_create_and_stop(tmp_path, root, "agent-1")
    assert "removed the folders of sessions agent-1" in second
