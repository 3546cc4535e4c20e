"""The fault run's processes: a restartable Redis, the worker pools, and the scan for leftovers.

Every process the run starts carries ``TOOLPOOL_FAULT_RUN=<mark>`` in its environment, so
``proc_scan`` finds them (and their bash children) in /proc, and nothing else on the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis
from _tcp_proxy import TcpProxy

from executor.embedded_redis import find_redis_server

MARK = "TOOLPOOL_FAULT_RUN"


def free_port() -> int:
    """A loopback port nothing listens on now; never 6379."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    if port == 6379:
        raise RuntimeError("the kernel offered 6379; refusing")
    return port


class AofRedis:
    """redis-server with AOF (fsync always) on one port and dir, restartable."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
                "--save", "", "--daemonize", "no",
                "--logfile", str(self.folder / "redis.log")]  # fmt: skip
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        probe = redis.Redis(port=self.port, socket_timeout=1.0)
        deadline = time.monotonic() + 15.0
        while True:
            with contextlib.suppress(redis.RedisError):
                if probe.ping():
                    break
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
        probe.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


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
    """Three ``workers.cli worker`` pools: one direct, up to two behind a ``TcpProxy`` each."""

    def __init__(self, redis_server: AofRedis, workspace: Path, log: Path, mark: str) -> None:
        self.redis, self.ws, self.log, self.mark = redis_server, workspace, log, mark
        self.supervisors: list[tuple[subprocess.Popen[bytes], TcpProxy | None]] = []

    def start(self, workers: int, lease_ms: int) -> None:
        """Start pools with ``workers`` workers in all; return once every one has registered."""
        direct = max(1, workers - 2)
        plan: list[tuple[int, TcpProxy | None]] = [(direct, None)]
        for _ in range(min(2, workers - 1)):
            plan.append((1, TcpProxy("127.0.0.1", self.redis.port).start()))
        closed = free_port()  # nothing listens: get_weather fails fast with a named error
        env = {**os.environ, MARK: self.mark, "TOOLPOOL_LOCK_LEASE_MS": str(lease_ms),
               "TOOLPOOL_CALL_LIVENESS_S": "2", "TOOLPOOL_CALL_HEARTBEAT_S": "0.5",
               "TOOLPOOL_EVENTS_MAXLEN": "1000000", "TOOLPOOL_HTTP_TIMEOUT": "1",
               "TOOLPOOL_WEATHER_URL": f"http://127.0.0.1:{closed}",
               "TOOLPOOL_GEOCODING_URL": f"http://127.0.0.1:{closed}"}  # fmt: skip
        with self.log.open("ab") as log:
            for count, proxy in plan:
                url = proxy.url if proxy else self.redis.url
                command = [sys.executable, "-m", "workers.cli", "worker", "--workers", str(count),
                           "--redis", url, "--workspace", str(self.ws), "--grace", "5"]  # fmt: skip
                process = subprocess.Popen(
                    command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
                self.supervisors.append((process, proxy))
        deadline = time.monotonic() + 60.0
        while len(self.workers()) < workers or self._registered() < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start; see {self.log}")
            time.sleep(0.1)

    def _registered(self) -> int:
        client = redis.Redis.from_url(self.redis.url)
        try:
            return int(client.scard("rq:workers:toolpool.default"))
        finally:
            client.close()

    def workers(self, proxied: bool | None = None) -> list[int]:
        """Live worker pids (children of our supervisors), optionally by kind of pool."""
        wanted = {p.pid for p, proxy in self.supervisors
                  if proxied is None or (proxy is not None) == proxied}  # fmt: skip
        return [pid for pid, ppid, comm in proc_scan(self.mark)
                if ppid in wanted and comm.startswith("python")]  # fmt: skip

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
