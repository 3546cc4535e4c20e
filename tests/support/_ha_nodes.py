"""The processes under ``RedisHA``: data nodes and Sentinels, each started in a folder of its own.

A data node is ``redis-server`` with the append-only file on, so a node killed and started
again in the same folder comes back with what it had written; a Sentinel is
``redis-server sentinel.conf --sentinel`` on a config file it may rewrite. Every process is
ours, found and ended by its pid; every port is a free loopback port, never 6379.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.ports import free_port
from workers._embedded_redis import find_redis_server

_LOG_TAIL = 2000
_POLL_S = 0.05


class HAError(RuntimeError):
    """Something the HA harness waited for did not happen before its deadline."""


def client(port: int, *, db: int = 0, timeout: float = 5.0) -> redis.Redis:
    """A plain client to one server of the harness (tests only)."""
    return redis.Redis(
        host="127.0.0.1", port=port, db=db, socket_timeout=timeout, socket_connect_timeout=timeout
    )


def wait_until(what: str, condition: object, deadline: float, explain: object = None) -> None:
    """Poll ``condition()`` until true; past ``deadline`` (monotonic) raise HAError(``what``).

    A condition that raises a Redis error counts as not yet true: servers come and go here.
    """
    assert callable(condition)
    last_error = ""
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError) as error:
            last_error = f" (last error: {error!r})"
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if callable(explain) else ""
            raise HAError(f"timed out waiting for {what}{last_error}{detail}")
        time.sleep(_POLL_S)


@dataclass
class Process:
    """One redis-server process of the harness: its port, folder and log."""

    port: int
    folder: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.folder / "redis.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self, deadline: float) -> None:
        """Start the process and wait until it answers PING (and has loaded its data)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        # Output goes to a file, not a pipe: nobody drains a pipe while the server runs.
        with (self.folder / "redis.out").open("ab") as output:
            self.process = subprocess.Popen(
                self.args, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
            )
        probe = client(self.port, timeout=1.0)
        try:
            wait_until(
                f"redis-server on port {self.port} to answer PING",
                self._answers(probe),
                deadline,
                self.tail,
            )
        finally:
            probe.close()

    def kill(self) -> None:
        """SIGKILL (a stopped process too) and reap it."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else "(no log)"
        return f"--- port {self.port} (pid {self.pid}, exit {self._exit()}):\n{text[-_LOG_TAIL:]}"

    def _exit(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def _answers(self, probe: redis.Redis) -> object:
        def check() -> bool:
            if not self.alive():
                raise HAError(f"redis-server on port {self.port} exited\n{self.tail()}")
            return bool(probe.ping())

        return check


def data_node(folder: Path, port: int | None = None) -> Process:
    """A data node: append-only, no snapshots, full syncs without the diskless delay."""
    port = port or free_port()
    folder = folder / f"node-{port}"
    args = [
        find_redis_server(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(folder),
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--daemonize", "no",
        "--logfile", str(folder / "redis.log"),
        # Redis waits 5 s by default before a diskless full sync, to batch replicas: the
        # harness has one replica and a restarted node should catch up at once.
        "--repl-diskless-sync-delay", "0",
    ]  # fmt: skip
    return Process(port, folder, args)


def replica_args(node: Process, primary_port: int) -> list[str]:
    """``node``'s arguments with ``--replicaof`` the given primary (replacing an earlier one)."""
    args = list(node.args)
    if "--replicaof" in args:
        at = args.index("--replicaof")
        del args[at : at + 3]
    return [*args, "--replicaof", "127.0.0.1", str(primary_port)]


def sentinel(
    folder: Path, service: str, primary_port: int, *, down_after_ms: int, failover_timeout_ms: int
) -> Process:
    """A Sentinel watching ``service`` at ``primary_port`` (quorum 2), on a config it owns."""
    port = free_port()
    folder = folder / f"sentinel-{port}"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "sentinel.conf"
    config.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {folder}",
                f"logfile {folder / 'redis.log'}",
                f"sentinel monitor {service} 127.0.0.1 {primary_port} 2",
                f"sentinel down-after-milliseconds {service} {down_after_ms}",
                f"sentinel failover-timeout {service} {failover_timeout_ms}",
                f"sentinel parallel-syncs {service} 1",
                "",
            ]
        )
    )
    return Process(port, folder, [find_redis_server(), str(config), "--sentinel"])
