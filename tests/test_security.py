"""Security: Redis with a password, an ACL user and TLS; key prefixes; narrowed workers; bash env.

Everything runs as real processes: a redis-server of the test's own (never port 6379), a
``toolpool worker`` pool, and the ``toolpool`` commands an operator would type. Credentials
travel in ``TOOLPOOL_REDIS_URL`` (not on command lines, where ``ps`` shows them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from executor import Settings, ToolRegistry, ToolResult, ToolStatus
from executor.client import Executor
from executor.lock import RWLock
from executor.wire import ErrorType, Keys, read_events
from tests.support.ports import free_port
from tests.support.tls import make_certificates, tls_server_args
from tests.support.waiting import wait_for
from workers import builtin_registry
from workers.processes._daemon import TOKEN_ENV

# A process-heavy proof (redis-servers with credentials and TLS, worker pools):
# `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof

TOOLPOOL = [sys.executable, "-m", "executor.cli"]
PATIENCE_S = 30.0
PASSWORD = "pw-7f3a9c-not-for-models"
AWS_SECRET = "aws-secret-4b1e-not-for-models"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
    env.update(extra)
    return env


def _toolpool(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    """Run a ``toolpool`` command to its end; its stdout, or a failed assertion with stderr."""
    done = subprocess.run(
        [*TOOLPOOL, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert done.returncode == 0, f"toolpool {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


# -- a redis-server with credentials or TLS -------------------------------------------------


@dataclass
class SecureRedis:
    """A redis-server on a free loopback port that only answers with the right credentials."""

    mode: str
    url: str
    process: subprocess.Popen[bytes]
    folder: Path

    @classmethod
    def start(cls, mode: str, folder: Path) -> SecureRedis:
        folder.mkdir(parents=True)
        port = free_port()
        base = [
            shutil.which("redis-server") or "redis-server",
            "--bind",
            "127.0.0.1",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(folder / "redis.log"),
        ]
        if mode == "password":
            args = ["--port", str(port), "--requirepass", PASSWORD]
            url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
        elif mode == "acl":
            # The default user is switched off: only the named user gets in.
            args = [
                "--port",
                str(port),
                "--user",
                "default",
                "off",
                "--user",
                "toolpool",
                "on",
                f">{PASSWORD}",
                "~*",
                "&*",
                "+@all",
            ]
            url = f"redis://toolpool:{PASSWORD}@127.0.0.1:{port}/0"
        else:
            ca = make_certificates(folder / "tls")
            args = ["--port", "0", *tls_server_args(ca, port)]
            url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
        quiet = subprocess.DEVNULL
        process = subprocess.Popen([*base, *args], stdin=quiet, stdout=quiet, stderr=quiet)
        server = cls(mode, url, process, folder)
        try:
            wait_for(server._answers, f"redis-server ({mode}) to answer")
        except BaseException:
            server.stop()
            raise
        return server

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5.0)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def _answers(self) -> bool:
        log = self.folder / "redis.log"
        assert self.process.poll() is None, log.read_text() if log.exists() else "no log"
        client = self.client()
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False
        finally:
            client.close()


@pytest.fixture(scope="module", params=["password", "acl", "tls"])
def secure_redis(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureRedis]:
    if request.param == "tls" and shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a throw-away certificate")
    server = SecureRedis.start(request.param, tmp_path_factory.mktemp("redis") / request.param)
    try:
        yield server
    finally:
        server.stop()


# -- a `toolpool worker` pool -----------------------------------------------------------------


@dataclass
class Pool:
    """A ``toolpool worker`` process, the banner it printed and its workers' names."""

    process: subprocess.Popen[str]
    banner: str
    workers: list[str]

    @classmethod
    def start(cls, env: dict[str, str], *args: str, count: int = 1) -> Pool:
        process = subprocess.Popen(
            [*TOOLPOOL, "worker", "-n", str(count), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        watchdog = threading.Timer(PATIENCE_S, process.kill)  # a silent pool fails, not hangs
        watchdog.start()
        lines: list[str] = []
        try:
            while sum(line.startswith("worker ") for line in lines) < count:
                line = process.stdout.readline()
                if not line:
                    process.wait()
                    pytest.fail(f"toolpool worker ended early: {''.join(lines)}")
                lines.append(line)
        finally:
            watchdog.cancel()
        names = [line.split()[1] for line in lines if line.startswith("worker ")]
        return cls(process, "".join(lines), names)

    def wait_registered(self, client: redis.Redis) -> None:
        for name in self.workers:
            wait_for(
                lambda n=name: client.exists(f"rq:worker:{n}"),  # type: ignore[misc]
                f"worker {name} to register",
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.communicate(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def pools() -> Iterator[list[Pool]]:
    """Pools a test started; each is stopped by its PID afterwards."""
    started: list[Pool] = []
    yield started
    for pool in started:
        pool.stop()


def _workspace(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


# -- 1. credentials and TLS through every command --------------------------------------------


def test_every_command_works_with_credentials_or_tls(
    secure_redis: SecureRedis, tmp_path: Path, pools: list[Pool]
) -> None:
    with secure_redis.client() as client:
        client.flushall()
    workspace = _workspace(tmp_path, "ws")
    (workspace / "a.txt").write_text("alpha\n")
    env = _clean_env(TOOLPOOL_REDIS_URL=secure_redis.url)
    pool = Pool.start(env, "--workspace", str(workspace))
    pools.append(pool)
    assert PASSWORD not in pool.banner, "the worker printed its Redis password"
    with secure_redis.client() as client:
        pool.wait_registered(client)

    arguments = json.dumps({"path": "b.txt", "content": "bravo"})
    called = json.loads(
        _toolpool(
            "call", "write_file", "--id", "sec-call-1", "--args", arguments, "--json", env=env
        )
    )
    assert called["status"] == ToolStatus.OK.value, called
    assert (workspace / "b.txt").read_text() == "bravo"

    turn = [
        {"id": "sec-run-1", "name": "read_file", "arguments": {"path": "b.txt"}},
        {"id": "sec-run-2", "name": "grep", "arguments": {"pattern": "alpha"}},
        {"id": "sec-run-3", "name": "bash", "arguments": {"command": "env"}},
    ]
    lines = _toolpool("run", "-", env=env, stdin=json.dumps(turn)).splitlines()
    results = [ToolResult.model_validate_json(line) for line in lines]
    assert [r.status for r in results] == [ToolStatus.OK] * 3, results
    assert "bravo" in results[0].content
    assert "a.txt" in results[1].content
    assert "PATH=" in results[2].content
    assert PASSWORD not in results[2].content, "bash saw the worker's Redis password"

    status = json.loads(_toolpool("status", "--json", env=env))
    assert [w["name"] for w in status["workers"]] == pool.workers
    assert status["queue"]["queued"] == 0

    events = [json.loads(x) for x in _toolpool("events", "--json", env=env).splitlines()]
    answered = {e["call_id"] for e in events if e["event"] == "tool_result"}
    assert {"sec-call-1", "sec-run-1", "sec-run-2", "sec-run-3"} <= answered

    assert "free" in _toolpool("lock", "status", env=env)


# -- 2. two deployments on one Redis ----------------------------------------------------------


def _write(call_id: str, content: str) -> dict[str, Any]:
    return {"id": call_id, "name": "write_file", "arguments": {"path": "w.txt", "content": content}}


def test_two_prefixes_on_one_redis_never_see_each_other(
    redis_url: str, tmp_path: Path, pools: list[Pool]
) -> None:
    spaces = {prefix: _workspace(tmp_path, prefix) for prefix in ("alpha", "beta")}
    started = {
        prefix: Pool.start(
            _clean_env(TOOLPOOL_REDIS_URL=redis_url, TOOLPOOL_KEY_PREFIX=prefix),
            "--workspace",
            str(folder),
        )
        for prefix, folder in spaces.items()
    }
    pools.extend(started.values())
    client = redis.Redis.from_url(redis_url)
    executors = {
        prefix: Executor(settings=Settings(redis_url=redis_url, key_prefix=prefix))
        for prefix in spaces
    }
    alpha_lock = RWLock.from_url(redis_url, keys=Keys("alpha"))
    try:
        for pool in started.values():
            pool.wait_registered(client)
        # Alpha's exclusive lock is held, so alpha's write waits; beta's must not.
        with alpha_lock.acquire_exclusive(timeout=5) as lease:
            alpha_turn = executors["alpha"].submit([_write("alpha-w", "from alpha")])
            beta = executors["beta"].run([_write("beta-w", "from beta")], timeout=PATIENCE_S)
            assert beta[0].status is ToolStatus.OK, beta
            assert not client.exists(Keys("alpha").result("alpha-w")), "alpha ran under its lock"
            held = alpha_lock.status()
            assert [h.token for h in held.holders] == [lease.token]
            assert not RWLock(client, keys=Keys("beta")).status().holders
        alpha = executors["alpha"].collect(alpha_turn, timeout=PATIENCE_S)
        assert alpha[0].status is ToolStatus.OK, alpha
        assert (spaces["alpha"] / "w.txt").read_text() == "from alpha"
        assert (spaces["beta"] / "w.txt").read_text() == "from beta"

        for prefix, own, other in (("alpha", "alpha-w", "beta-w"), ("beta", "beta-w", "alpha-w")):
            seen = [e for _, e in read_events(client, Keys(prefix))]
            assert own in {e.call_id for e in seen}
            assert other not in {e.call_id for e in seen}
            servers = {e.worker for e in seen if e.event == "tool_result"}
            assert servers == set(started[prefix].workers), (prefix, servers)
            env = _clean_env(TOOLPOOL_REDIS_URL=redis_url)
            status = json.loads(_toolpool("status", "--json", "--prefix", prefix, env=env))
            assert [w["name"] for w in status["workers"]] == started[prefix].workers
    finally:
        alpha_lock.close()
        for executor in executors.values():
            executor.close()
        client.close()


# -- 3. workers that serve fewer tools ------------------------------------------------------


def _run_on_pool(
    redis_url: str, calls: list[dict[str, Any]], registry: ToolRegistry | None = None
) -> list[ToolResult]:
    with Executor(settings=Settings(redis_url=redis_url), registry=registry) as executor:
        return executor.run(calls, timeout=PATIENCE_S)


def test_read_only_worker_refuses_tools_that_change_things(
    redis_url: str, tmp_path: Path, pools: list[Pool]
) -> None:
    workspace = _workspace(tmp_path, "ws")
    (workspace / "a.txt").write_text("kept\n")
    pool = Pool.start(
        _clean_env(TOOLPOOL_REDIS_URL=redis_url), "--workspace", str(workspace), "--read-only"
    )
    pools.append(pool)
    assert "read-only" in pool.banner
    with redis.Redis.from_url(redis_url) as client:
        pool.wait_registered(client)
    write, read, shell = _run_on_pool(
        redis_url,
        [
            {"id": "ro-1", "name": "write_file", "arguments": {"path": "a.txt", "content": "lost"}},
            {"id": "ro-2", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "ro-3", "name": "bash", "arguments": {"command": "touch b.txt"}},
        ],
    )
    # The client answers from the workers' published catalog, with their reason.
    assert write.status is ToolStatus.ERROR
    assert write.error_type is ErrorType.UNKNOWN_TOOL
    assert (
        "write_file is not served on queue 'toolpool.default': the worker runs read-only"
        in write.content
    )
    assert shell.error_type is ErrorType.UNKNOWN_TOOL
    assert "bash is not served on queue 'toolpool.default'" in shell.content
    assert read.status is ToolStatus.OK
    assert "kept" in read.content
    # A client that declares the tools itself reaches the worker, which has the last word.
    [forced] = _run_on_pool(
        redis_url,
        [{"id": "ro-4", "name": "write_file", "arguments": {"path": "a.txt", "content": "lost"}}],
        registry=builtin_registry(),
    )
    assert forced.error_type is ErrorType.UNKNOWN_TOOL
    assert "write_file is not served by this worker: the worker runs read-only" in forced.content
    assert (workspace / "a.txt").read_text() == "kept\n"
    assert not (workspace / "b.txt").exists()


def test_disabled_tools_are_refused_and_the_rest_served(
    redis_url: str, tmp_path: Path, pools: list[Pool]
) -> None:
    workspace = _workspace(tmp_path, "ws")
    env = _clean_env(TOOLPOOL_REDIS_URL=redis_url, TOOLPOOL_DISABLE_TOOLS="bash grep")
    pool = Pool.start(env, "--workspace", str(workspace))
    pools.append(pool)
    assert "disabled: bash, grep" in pool.banner
    with redis.Redis.from_url(redis_url) as client:
        pool.wait_registered(client)
    shell, search, write = _run_on_pool(
        redis_url,
        [
            {"id": "off-1", "name": "bash", "arguments": {"command": "touch b.txt"}},
            {"id": "off-2", "name": "grep", "arguments": {"pattern": "x"}},
            {"id": "off-3", "name": "write_file", "arguments": {"path": "c.txt", "content": "c"}},
        ],
    )
    assert shell.error_type is ErrorType.UNKNOWN_TOOL
    assert (
        "bash is not served on queue 'toolpool.default': it is disabled on the worker"
        in shell.content
    )
    assert "grep is not served on queue 'toolpool.default'" in search.content
    assert write.status is ToolStatus.OK
    assert (workspace / "c.txt").read_text() == "c"
    assert not (workspace / "b.txt").exists()


def test_disabling_a_tool_that_does_not_exist_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*TOOLPOOL, "worker", "--workspace", str(tmp_path), "--disable-tool", "bsh"],
        env=_clean_env(TOOLPOOL_REDIS_URL="redis://127.0.0.1:1/0"),
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert done.returncode != 0
    assert "Cannot disable 'bsh': no such tool" in done.stderr


# -- 4. bash's environment -------------------------------------------------------------------


def test_bash_gets_only_allow_listed_environment(
    redis_url: str, tmp_path: Path, pools: list[Pool]
) -> None:
    workspace = _workspace(tmp_path, "ws")
    env = _clean_env(
        TOOLPOOL_REDIS_URL=redis_url,
        TOOLPOOL_BASH_ENV="KEEP_ME",
        AWS_SECRET_ACCESS_KEY=AWS_SECRET,
        KEEP_ME="kept-value",
        LC_TIME="C",
    )
    pool = Pool.start(env, "--workspace", str(workspace))
    pools.append(pool)
    with redis.Redis.from_url(redis_url) as client:
        pool.wait_registered(client)
    (result,) = _run_on_pool(
        redis_url, [{"id": "env-1", "name": "bash", "arguments": {"command": "env"}}]
    )
    assert result.status is ToolStatus.OK, result
    names = {line.split("=", 1)[0] for line in result.content.splitlines() if "=" in line}
    assert {"PATH", "KEEP_ME", "LC_TIME"} <= names
    assert "kept-value" in result.content
    assert AWS_SECRET not in result.content
    # The pool's marker stays, so that the pool can kill what a dead worker's command left.
    assert TOKEN_ENV in names
    leaked = {n for n in names if n.startswith(("TOOLPOOL_", "AWS_"))} - {TOKEN_ENV}
    assert not leaked
    assert redis_url not in result.content
