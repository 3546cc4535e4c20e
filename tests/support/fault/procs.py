"""The fault run's processes: its Redis, the worker pools, and the scan for leftovers.

The Redis is the embedded one with AOF (``RedisServer(tcp=True, append_only=True)``: fsync
always, a free port, never 6379); ``crash_restart`` SIGKILLs it and starts it again on the same
port and AOF dir.

Every process the run starts carries ``TOOLPOOL_FAULT_RUN=<mark>`` in its environment, so
``proc_scan`` finds them (and their bash children) in /proc, and nothing else on the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import redis

from tests.support.fault.proxy import TcpProxy
from tests.support.ports import free_port
from workers._embedded_redis import RedisServer

MARK = "TOOLPOOL_FAULT_RUN"


class Server(Protocol):
    """What the run's parts need of its Redis: a URL of the current primary."""

    @property
    def tcp_url(self) -> str: ...


def aof_redis() -> RedisServer:
    """The run's Redis: AOF with fsync always, on a free TCP port (and a unix socket)."""
    return RedisServer(tcp=True, append_only=True, startup_timeout=15.0)


def tcp_port(server: RedisServer) -> int:
    """The TCP port of a started ``aof_redis()``."""
    assert server.port is not None, "the run's Redis listens on TCP once started"
    return server.port


def crash_restart(server: RedisServer, down_s: float) -> None:
    """SIGKILL the server (a crash), stay down ``down_s``, start it on the same port and AOF."""
    pid = server.pid
    assert pid is not None, "the run's Redis is not running"
    os.kill(pid, signal.SIGKILL)
    server.restart(downtime=down_s)


def proc_scan(mark: str) -> list[tuple[int, int, str]]:
    """(pid, ppid, comm) of every process whose environment carries ``mark``."""
    needle = f"\0{MARK}={mark}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in b"\0" + (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found.append((int(entry.name), ppid, comm))
    return found


class Pools:
    """Three ``workers.cli worker`` pools: one direct, up to two behind a ``TcpProxy`` each.

    With ``sessions_root``, every pool also serves sessions, all from that one folder under
    the one ``host`` name: they share the disk, as they share the workspace, so a session's
    calls still move between pools when one is killed or cut off.
    """

    def __init__(
        self,
        redis_server: Server,
        workspace: Path,
        log: Path,
        mark: str,
        *,
        sessions_root: Path | None = None,
        host: str = "",
        url: str | None = None,
        proxies: bool = True,
        replicas: int = 0,
    ) -> None:
        self.redis, self.ws, self.log, self.mark = redis_server, workspace, log, mark
        self.sessions_root, self.host = sessions_root, host
        # The failover mode: every pool at ``url`` (Sentinel's, or a proxy following the
        # primary), none behind a proxy of its own, each waiting for ``replicas``.
        self.url, self.proxies, self.replicas = url, proxies, replicas
        self.supervisors: list[tuple[subprocess.Popen[bytes], TcpProxy | None]] = []

    def start(self, workers: int, lease_ms: int) -> None:
        """Start pools with ``workers`` workers in all; return once every one has registered."""
        direct = max(1, workers - 2)
        plan: list[tuple[int, TcpProxy | None]] = [(direct, None)]
        for _ in range(min(2, workers - 1)):
            if not self.proxies:
                plan.append((1, None))
                continue
            assert isinstance(self.redis, RedisServer), "a pool's proxy needs the embedded server"
            plan.append((1, TcpProxy("127.0.0.1", tcp_port(self.redis)).start()))
        closed = free_port()  # nothing listens: get_weather fails fast with a named error
        env = {
            **os.environ,
            MARK: self.mark,
            "TOOLPOOL_LOCK_LEASE_MS": str(lease_ms),
            "TOOLPOOL_CALL_LIVENESS_S": "2",
            "TOOLPOOL_CALL_HEARTBEAT_S": "0.5",
            "TOOLPOOL_EVENTS_MAXLEN": "1000000",
            "TOOLPOOL_HTTP_TIMEOUT": "1",
            "TOOLPOOL_WEATHER_URL": f"http://127.0.0.1:{closed}",
            "TOOLPOOL_GEOCODING_URL": f"http://127.0.0.1:{closed}",
            "TOOLPOOL_REDIS_REPLICAS": str(self.replicas),
        }
        with self.log.open("ab") as log:
            for count, proxy in plan:
                url = proxy.url if proxy else self.url or self.redis.tcp_url
                command = [
                    sys.executable,
                    "-m",
                    "workers.cli",
                    "worker",
                    "--workers",
                    str(count),
                    "--redis",
                    url,
                    "--workspace",
                    str(self.ws),
                    "--grace",
                    "5",
                ]
                if self.sessions_root is not None:
                    command += ["--sessions-root", str(self.sessions_root), "--host", self.host]
                process = subprocess.Popen(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self.supervisors.append((process, proxy))
        deadline = time.monotonic() + 60.0
        while len(self.workers()) < workers or self._registered() < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start; see {self.log}")
            time.sleep(0.1)

    def _registered(self) -> int:
        client = redis.Redis.from_url(self.redis.tcp_url)
        try:
            return int(client.scard("rq:workers:toolpool.default"))
        finally:
            client.close()

    def workers(self, proxied: bool | None = None) -> list[int]:
        """Live worker pids (children of our supervisors), optionally by kind of pool."""
        wanted = {
            p.pid
            for p, proxy in self.supervisors
            if proxied is None or (proxy is not None) == proxied
        }
        return [
            pid
            for pid, ppid, comm in proc_scan(self.mark)
            if ppid in wanted and comm.startswith("python")
        ]

    def workers_of(self, supervisor: int) -> list[int]:
        """Pids of the children of the supervisor with pid ``supervisor``."""
        return [pid for pid, ppid, _ in proc_scan(self.mark) if ppid == supervisor]

    def stop(self) -> list[int]:
        """SIGTERM the supervisors, stop the proxies; SIGKILL and return what is left after."""
        for process, _ in self.supervisors:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process, proxy in self.supervisors:
            try:
                process.wait(timeout=20.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if proxy is not None:
                proxy.stop()
        deadline = time.monotonic() + 10.0
        while (left := proc_scan(self.mark)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, _, _ in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return [pid for pid, _, _ in left]
