"""The layout's promises: the orchestrator side never needs the worker side; one public API."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import executor

ROOT = Path(__file__).resolve().parent.parent

# Imports every module of the orchestrator's side, in a process where any import of `workers`
# fails, then runs the CLI's help (which lists installed commands without needing them).
_WITHOUT_WORKERS = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class NoWorkers:
        def find_spec(self, name, path=None, target=None):
            if name == "workers" or name.startswith("workers."):
                raise ImportError(f"{name} must not be imported by the orchestrator's side")
            return None

    sys.meta_path.insert(0, NoWorkers())
    import executor
    for module in pkgutil.walk_packages(executor.__path__, "executor."):
        importlib.import_module(module.name)
    from executor import Executor, ToolCall
    from executor.cli import main
    assert not [m for m in sys.modules if m == "workers" or m.startswith("workers.")]
    print("imported", len([m for m in sys.modules if m.startswith("executor")]))
    """
)


def test_the_orchestrator_side_imports_without_the_worker_side() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_WORKERS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported")


def test_no_module_of_executor_names_workers_in_an_import() -> None:
    offenders = []
    for path in sorted((ROOT / "executor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}"
                for n in names
                if n == "workers" or n.startswith("workers.")
            ]
    assert offenders == []


def _documented_api() -> list[str]:
    """The names in the first column of the table in docs/api.md."""
    text = (ROOT / "docs" / "api.md").read_text()
    return re.findall(r"^\| `(\w+)` \|", text, flags=re.MULTILINE)


def test_executor_all_is_exactly_the_documented_api() -> None:
    documented = _documented_api()
    assert documented, "docs/api.md has no table of names"
    assert len(documented) == len(set(documented)), "a name is documented twice"
    assert sorted(executor.__all__) == sorted(documented)
    for name in executor.__all__:
        assert hasattr(executor, name), name
