"""The wheel a user builds installs and works on its own: docs/install.md's path, end to end.

The wheel is built from a copy of what the build reads (the build writes ``build/`` and
``toolpool.egg-info`` into its source), installed with every user extra into a fresh venv
outside the checkout, and run from a folder outside it with no ``PYTHONPATH``: so what runs is
the installed wheel, not the checkout. pip's cache makes the install fast after the first run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

from tests.support.waiting import PATIENCE_S
from workers._embedded_redis import RedisServer

# The proofs here build a wheel, make a venv, install, run a worker.
proof = pytest.mark.proof

ROOT = Path(__file__).resolve().parent.parent
# Installs for a user: every extra but the project's own test and lint tools.
NOT_FOR_USERS = {"dev"}
# pip resolves and downloads on a first run; later runs take their wheels from pip's cache.
_PIP_TIMEOUT_S = 900.0


def _run(
    args: list[str | Path], *, cwd: Path, env: dict[str, str], timeout: float = PATIENCE_S * 2
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _outside_env() -> dict[str, str]:
    """Our environment without what would make the checkout importable or set toolpool up."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TOOLPOOL_")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv, outside the checkout, holding the wheel and every user extra."""
    base = tmp_path_factory.mktemp("wheel-install")
    assert not base.resolve().is_relative_to(ROOT)
    env = _outside_env()

    source = base / "toolpool"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("executor", "workers"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )

    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", venv], cwd=base, env=env, timeout=120)
    pip_works = made.returncode == 0 and (
        _run([venv / "bin" / "python", "-m", "pip", "--version"], cwd=base, env=env).returncode == 0
    )
    if not pip_works:
        reason = f"a venv with pip cannot be made here: {made.stderr.strip()[-400:]}"
        print(reason)
        pytest.skip(reason)
    python = venv / "bin" / "python"
    pip: list[str | Path] = [python, "-m", "pip", "--disable-pip-version-check"]

    # As docs/install.md builds it: the wheel alone, into a folder of its own.
    dist = base / "dist"
    built = _run(
        [*pip, "wheel", "--no-deps", source, "-w", dist], cwd=base, env=env, timeout=_PIP_TIMEOUT_S
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("toolpool-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        headers = HeaderParser().parsestr(archive.read(metadata).decode())
    extras = sorted(set(headers.get_all("Provides-Extra") or []) - NOT_FOR_USERS)
    assert "mcp" in extras, extras

    done = _run(
        [*pip, "install", "--quiet", f"toolpool[{','.join(extras)}] @ {wheel.as_uri()}"],
        cwd=base,
        env=env,
        timeout=_PIP_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working folder outside the checkout, with a file for the end-to-end call."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(ROOT)
    (folder / "hello.txt").write_text("hello from outside the checkout\n")
    return folder


@proof
def test_the_installed_command_runs_from_outside_the_checkout(
    installed: Path, outside: Path
) -> None:
    helped = _run([installed / "bin" / "toolpool", "--help"], cwd=outside, env=_outside_env())

    assert helped.returncode == 0, helped.stderr
    # The worker side's commands come from the wheel's entry points, the MCP server too.
    for command in ("call", "worker", "up", "demo", "mcp", "dashboard"):
        assert f"  {command} " in helped.stdout, helped.stdout


@proof
def test_the_installed_packages_are_the_wheel_with_its_data(installed: Path, outside: Path) -> None:
    wanted = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "executor").rglob("*.lua"))
    wanted += ["executor/dashboard/page.html", "executor/py.typed", "workers/py.typed"]
    assert len(wanted) > 3
    probe = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        import executor, workers
        import mcp, openai  # the extras' packages import
        site = Path(executor.__file__).parents[1]
        wanted = json.loads(sys.argv[1])
        print(json.dumps({
            "site": str(site),
            "workers_site": str(Path(workers.__file__).parents[1]),
            "missing": [name for name in wanted if not (site / name).is_file()],
        }))
        """
    )
    done = _run(
        [installed / "bin" / "python", "-c", probe, json.dumps(wanted)],
        cwd=outside,
        env=_outside_env(),
    )

    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["site"]).is_relative_to(installed), found
    assert found["workers_site"] == found["site"]
    assert found["missing"] == []


@proof
def test_an_installed_worker_answers_a_real_call_and_stops_by_its_pid(
    installed: Path, outside: Path
) -> None:
    toolpool = installed / "bin" / "toolpool"
    env = _outside_env()
    with RedisServer() as server:
        worker = subprocess.Popen(
            [toolpool, "worker", "--redis", server.url, "--workspace", outside, "-n", "1"],
            cwd=outside,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            called = _run(
                [
                    toolpool,
                    "call",
                    "read_file",
                    "--args",
                    json.dumps({"path": "hello.txt"}),
                    "--redis",
                    server.url,
                    "--wait-for-workers",
                    str(PATIENCE_S * 2),
                ],
                cwd=outside,
                env=env,
                timeout=PATIENCE_S * 4,
            )
            # Its pool's children, which the stop below must end with it.
            children = _children(worker.pid)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                output, _ = worker.communicate(timeout=PATIENCE_S * 2)
            except subprocess.TimeoutExpired:
                worker.kill()
                output, _ = worker.communicate()
                pytest.fail(f"the worker (pid {worker.pid}) did not stop on SIGTERM: {output}")

        assert called.returncode == 0, called.stdout + called.stderr
        assert "hello from outside the checkout" in called.stdout
        assert "-- ok  read_file" in called.stdout, called.stdout
        assert worker.returncode == 0, output
        # The pool stopped its own children, and RQ recorded each one's end.
        assert len(children) == 1, children
        assert [pid for pid in children if Path(f"/proc/{pid}").exists()] == []
        client = server.client()
        keys = client.keys("rq:worker:*")
        assert keys, "no worker ever registered with RQ"
        assert [k for k in keys if client.hget(k, "death") is None] == []
        client.close()


def _children(pid: int) -> list[int]:
    """The process ids of ``pid``'s children (Linux's /proc)."""
    listed = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in listed.read_text().split()] if listed.exists() else []


def test_after_the_demo_the_script_says_where_toolpool_is_and_how_to_reach_it(
    tmp_path: Path,
) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    command = venv_bin / "toolpool"
    command.write_text('#!/bin/sh\necho "the venv\'s toolpool"\n')
    command.chmod(0o755)
    (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
    bare = {"PATH": "/usr/bin:/bin", "TOOLPOOL_VENV": str(tmp_path / "venv")}
    said = _run(["bash", "-c", "source scripts/_venv.sh && say_where_toolpool"], cwd=ROOT, env=bare)

    assert said.returncode == 0, said.stderr
    lines = said.stdout.strip().splitlines()
    assert lines[0].startswith(f"The toolpool command is {command}, not on your PATH.")
    assert f'"command": "{command}"' in said.stdout
    # Each way it gives, run in a shell, puts that very command on PATH.
    ways = [line.split(":", 1)[1].strip() for line in lines[1:3]]
    assert ways[0] == f"source {venv_bin}/activate"
    assert ways[1] == f'export PATH="{venv_bin}:$PATH"'
    for way in ways:
        found = _run(["bash", "-c", f"{way} && toolpool"], cwd=tmp_path, env=bare)
        assert found.stdout == "the venv's toolpool\n", (way, found.stderr)

    on_path = _run(
        ["bash", "-c", "source scripts/_venv.sh && say_where_toolpool"],
        cwd=ROOT,
        env={**bare, "PATH": f"{venv_bin}:/usr/bin:/bin"},
    )
    assert f"The toolpool command, {command}, is on your PATH." in on_path.stdout


def test_the_demo_script_ends_with_where_toolpool_is() -> None:
    script = (ROOT / "scripts" / "demo").read_text()
    demo = script.index('"$VENV/bin/toolpool" demo "$@"')
    assert script.index("say_where_toolpool", demo) > demo
    assert "exec " not in script[demo - 5 : demo]


@proof
def test_the_installed_python_api_starts_a_local_pool_and_stops_every_process(
    installed: Path, outside: Path
) -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from executor import Executor
        from workers import LocalPool

        with LocalPool(sys.argv[1], workers=1, read_only=True) as pool:
            pids = pool.worker_pids
            with Executor(settings=pool.settings) as ex:
                (result,) = ex.run([{"name": "read_file", "arguments": {"path": "hello.txt"}}])
        print(json.dumps({"pids": pids, "status": result.status.value, "content": result.content}))
        """
    )
    done = _run(
        [installed / "bin" / "python", "-c", script, outside],
        cwd=outside,
        env=_outside_env(),
        timeout=PATIENCE_S * 4,
    )

    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["status"] == "ok", found
    assert "hello from outside the checkout" in found["content"]
    assert len(found["pids"]) == 1, found
    assert [pid for pid in found["pids"] if Path(f"/proc/{pid}").exists()] == []
