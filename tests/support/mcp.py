"""What the MCP server's tests share: its environment, its HTTP transport as a process, and
clients of both transports."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx2
import redis
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from executor import Settings
from executor.wire import Keys, read_catalog
from tests.support.ports import free_port
from tests.support.procs import MakeWorkers, Workers, python_path_env, stop_process
from tests.support.waiting import PATIENCE_S, wait_for
from workers.tools._shell_settings import BashSettings
from workers.tools.weather import WeatherSettings

ROOT = Path(__file__).resolve().parents[2]
TOOLPOOL = [sys.executable, "-m", "executor.cli"]


def http_command(redis_url: str, port: int) -> list[str]:
    """``toolpool mcp --http`` on the loopback at ``port``, against ``redis_url``."""
    return [
        *TOOLPOOL,
        "mcp",
        "--http",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--redis",
        redis_url,
    ]


def mcp_env(**extra: str) -> dict[str, str]:
    """The server's environment: ours without any TOOLPOOL_* variable, the repository on the
    path, plus ``extra`` (otherwise settings come from the command line only)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")}
    return python_path_env({**env, **extra})


class _Output:
    """A process's stdout read line by line in a thread (so the pipe never fills), and an
    event set once a wanted line has been seen."""

    def __init__(self, process: subprocess.Popen[str], wanted: str) -> None:
        self.lines: list[str] = []
        self.seen = threading.Event()
        self._process = process
        self._wanted = wanted
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line)
            if line.strip() == self._wanted:
                self.seen.set()

    def text(self) -> str:
        return "".join(self.lines)

    def close(self) -> None:
        """After the process ended: the rest of its output read, the pipe closed."""
        self._thread.join(timeout=PATIENCE_S)
        assert self._process.stdout is not None
        self._process.stdout.close()


@contextmanager
def http_server(
    redis_url: str,
    log: Path,
    token: str | None = None,
    *,
    token_in_env: bool = False,
    options: Sequence[str] = (),
) -> Iterator[str]:
    """``toolpool mcp --http [options]`` on a free loopback port; yields its MCP URL once it
    listens.

    ``token`` goes on the command line, or with ``token_in_env`` in TOOLPOOL_MCP_TOKEN."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = http_command(redis_url, port)
    env = mcp_env()
    if token is not None and token_in_env:
        env["TOOLPOOL_MCP_TOKEN"] = token
    elif token is not None:
        argv += ["--token", token]
    argv += options
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    output = _Output(process, f"toolpool mcp: serving on {url}")
    try:
        # Either the line comes or the process ends (its stdout closes): no waiting past that.
        wait_for(
            lambda: output.seen.is_set() or process.poll() is not None,
            f"the server to say it serves {url}",
        )
        assert output.seen.is_set(), (
            f"the server ended (exit {process.poll()}) before serving; its stdout: "
            f"{output.text()!r}"
        )
        yield url
    finally:
        stop_process(process, PATIENCE_S)
        output.close()
        print(f"--- MCP server stdout ---\n{output.text()[-3000:]}")


# Nothing listens on the discard port of the loopback: get_weather fails at once, offline.
NOWHERE = "http://127.0.0.1:9"


def start_builtin_pool(
    make_workers: MakeWorkers, redis_url: str, workspace: Path, count: int = 2
) -> Workers:
    """``count`` worker processes serving the nine built-in tools on ``workspace`` (bash
    unconfined, the weather offline), once all have published their tools: tools/list reads
    them."""
    settings = Settings(
        redis_url=redis_url,
        workspace=workspace,
        tools=[
            BashSettings(sandbox="off"),
            WeatherSettings(weather_url=NOWHERE, geocoding_url=NOWHERE),
        ],
    )
    workers = make_workers(settings)
    workers.start(count, registry="workers:builtin_registry")
    client = redis.Redis.from_url(redis_url)
    try:
        keys = Keys(settings.redis.key_prefix)
        wait_for(
            lambda: read_catalog(client, keys, keys.queue_name()).workers == count,
            "the workers' catalog",
        )
    finally:
        client.close()
    return workers


@asynccontextmanager
async def stdio_session(
    redis_url: str | None, log: Path, mode: str = "auto", *options: str, **env: str
) -> AsyncIterator[Client]:
    """A client connected to a ``toolpool mcp`` process it started, over stdio: ``--redis
    redis_url``, or (``None``) nothing on the command line, ``env`` saying it all; then
    ``options``."""
    args = ["-m", "executor.cli", "mcp"]
    if redis_url is not None:
        args += ["--redis", redis_url]
    args += options
    params = StdioServerParameters(command=sys.executable, args=args, env=mcp_env(**env), cwd=ROOT)
    with log.open("a") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=PATIENCE_S * 2
        ) as client:
            yield client


@asynccontextmanager
async def http_session(
    url: str, token: str | None = None, mode: str = "auto"
) -> AsyncIterator[Client]:
    """A client connected to a running HTTP server, sending ``token`` as a bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(PATIENCE_S, read=PATIENCE_S * 4)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=PATIENCE_S * 2) as client:
            yield client
