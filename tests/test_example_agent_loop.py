"""``examples/agent_loop.py`` runs as a user would run it: offline, in one command, to the end.

The scripted model's answer is built from the tool results it was sent, so the line it prints
proves the whole loop: the pool's tools offered to the model through the ``openai`` client, the
three calls it asked for run on the pool, their results fed back.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from executor import ConfigurationError
from tests.support.procs import python_path_env
from tests.support.waiting import PATIENCE_S
from workers import LocalPool

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


def test_the_example_imports_public_names_only() -> None:
    # What a user copies from the example must not lean on modules that change without notice.
    tree = ast.parse((ROOT / "examples" / "agent_loop.py").read_text())
    modules = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    modules += [
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    ]
    private = [m for m in modules if m != "__future__" and "._" in f".{m}"]
    assert "workers" in modules
    assert private == []


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"workers": 0}, "workers >= 1, got 0"),
        ({"workers": True}, "workers >= 1, got True"),
        ({"tools": "mytools:registry"}, "tools=['mytools:registry']"),
        ({"ready_timeout": 0}, "ready_timeout > 0"),
        ({"tools": ["no_such_module_here:registry"]}, "no_such_module_here"),
        ({"workspace": "/nonexistent/folder"}, "workspace is not a folder: /nonexistent/folder"),
    ],
)
def test_a_local_pool_refuses_bad_arguments_before_it_starts_anything(
    arguments: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        LocalPool(**arguments)


def test_a_local_pool_has_no_settings_before_it_starts() -> None:
    with pytest.raises(ConfigurationError, match="not started"):
        _ = LocalPool().settings
