"""``examples/agent_loop.py`` runs as a user would run it: offline, in one command, to the end.

The scripted model's answer is built from the tool results it was sent, so the line it prints
proves the whole loop: the pool's tools offered to the model through the ``openai`` client, the
three calls it asked for run on the pool, their results fed back.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import python_path_env
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.proof  # a Redis and a worker pool of its own

ROOT = Path(__file__).resolve().parent.parent


def test_the_example_agent_loop_runs_offline_to_its_answer() -> None:
    pytest.importorskip("openai", reason="the example uses the openai client (the dev extra)")
    env = {k: v for k, v in python_path_env().items() if not k.startswith("TOOLPOOL_")}
    done = subprocess.run(
        [sys.executable, "examples/agent_loop.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S * 4,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("user: What is this project")
    assert [line.split("(")[0].strip() for line in lines[1:4]] == [
        "list_directory",
        "read_file",
        "grep",
    ]
    assert all("(ok)" in line for line in lines[1:4]), lines
    assert re.fullmatch(
        r"assistant: This is toolpool: the folder has \d+ entries, and its demo starts in "
        r"workers/cli/_demo\.py\.",
        lines[-1],
    ), lines[-1]
