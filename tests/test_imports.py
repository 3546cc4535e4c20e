"""The public faces load their names on first use: what an import loads, and that every name
of a face still resolves.

What a module loads is read in a fresh interpreter (this one has imported half the project).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from workers.tools import _grep_proc

ROOT = Path(__file__).resolve().parent.parent

# Every package face that loads its names on first use.
FACES = ["executor", "executor.wire", "workers", "workers.cli", "workers.pipeline", "workers.tools"]

# What only an orchestrator uses: a worker that loaded one of these would pay for it at every
# start of a pool child.
ORCHESTRATOR_ONLY = (
    "executor.client",
    "executor.mcp",
    "executor.dashboard",
    "executor.adapters",
    "executor.cli",
    "mcp",
    "starlette",
    "uvicorn",
)


def _loaded(statement: str, *flags: str) -> list[str]:
    """The modules in ``sys.modules`` of a fresh interpreter after ``statement``."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, *flags, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout)
    return names


def _under(names: list[str], *packages: str) -> list[str]:
    return [n for n in names if any(n == p or n.startswith(p + ".") for p in packages)]


@pytest.mark.parametrize(
    "module",
    [
        "workers.pipeline._runtime",  # what runs a worker's calls
        "workers.__main__",  # a pool child, `python -m workers`
        "workers.pool._process",
    ],
)
def test_the_worker_side_loads_nothing_only_an_orchestrator_uses(module: str) -> None:
    names = _loaded(f"import {module}")
    assert module in names
    assert _under(names, *ORCHESTRATOR_ONLY) == []


def test_the_tool_contract_loads_no_client() -> None:
    names = _loaded("import executor.contract")
    assert "executor.contract._tool" in names
    assert _under(names, "executor.client") == []


def test_the_lock_loads_neither_rq_nor_the_tool_contract() -> None:
    names = _loaded("import executor.lock")
    assert "executor.lock._rwlock" in names
    assert _under(names, "rq", "executor._rq", "executor.contract") == []


def test_importing_the_face_loads_none_of_its_names() -> None:
    names = _loaded("import executor, workers")
    # executor._lazy serves the faces' names; it imports the standard library alone.
    assert _under(names, "executor", "workers") == ["executor", "executor._lazy", "workers"]


def test_a_name_loads_its_own_module_and_none_of_the_others() -> None:
    names = _loaded("from executor import ToolError")
    assert "executor._errors" in names
    others = ["executor._settings", "executor.client", "executor.contract", "executor.wire"]
    assert _under(names, *others, "pydantic", "redis") == []


def test_greps_helper_imports_with_the_standard_library_alone() -> None:
    # The helper runs as `python -S -E`: no site-packages, so a face that imported a tool (and
    # pydantic with it) would fail here.
    boot = _grep_proc._BOOT.replace("serve()", "")
    assert "serve()" in _grep_proc._BOOT
    code = boot.replace("sys.argv[1]", repr(str(ROOT)))
    names = _loaded(code, "-S", "-E")
    assert "workers.tools._grep_search" in names
    # The faces' own helper, and the face it lives in, need nothing beyond the standard library.
    assert _under(names, "executor", "pydantic", "redis") == ["executor", "executor._lazy"]


@pytest.mark.parametrize("face", FACES)
def test_every_name_of_a_face_resolves_to_its_modules_object(face: str) -> None:
    module = importlib.import_module(face)
    table: dict[str, str] = module._MODULE_OF
    assert sorted(table) == sorted(module.__all__)
    for name, home in table.items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name), name
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("face", FACES)
def test_a_star_import_of_a_face_binds_all_its_names(face: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {face} import *", namespace)
    module = importlib.import_module(face)
    assert sorted(set(namespace) - {"__builtins__"}) == sorted(module.__all__)


@pytest.mark.parametrize("face", FACES)
def test_an_unknown_name_raises_attribute_error_naming_the_face(face: str) -> None:
    module: ModuleType = importlib.import_module(face)
    with pytest.raises(AttributeError, match=rf"^module '{face}' has no attribute 'Nonesuch'$"):
        module.Nonesuch  # noqa: B018
    with pytest.raises(ImportError, match="Nonesuch"):
        exec(f"from {face} import Nonesuch", {})


@pytest.mark.parametrize("face", FACES)
def test_no_module_of_a_face_bears_one_of_its_names(face: str) -> None:
    # Once imported, such a module would take the name's place in the face: the import system
    # binds a submodule to its package under the module's own name.
    module = importlib.import_module(face)
    clashes = [n for n in module.__all__ if importlib.util.find_spec(f"{face}.{n}") is not None]
    assert clashes == []
