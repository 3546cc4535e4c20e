"""``LocalPool``: a private Redis and a worker pool on it, started and stopped from Python.

What ``toolpool demo`` and ``toolpool up`` start, for a program (an example, a notebook, a
test of one's own agent) that wants a whole pool in one ``with`` and nothing to run by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from executor import ConfigurationError, Settings, load_registry
from workers._embedded_redis import RedisServer
from workers.pool._pool import WorkerPool


class LocalPool:
    """A private ``redis-server`` (on a unix socket in a temp folder) and ``workers`` worker
    processes serving ``workspace``; ``settings`` (after ``start()``) points an ``Executor``
    at them. Use it as a context manager, or call ``start()`` and ``stop()``.

    ``settings`` are the pool's and the clients' settings (default ``Settings()``); their
    ``redis_url`` is replaced by the private Redis's. ``read_only`` serves the read-only tools
    alone; ``tools`` are ``--tools`` import strings (``module:attr``) of tools served beside the
    built-in ones.
    """

    def __init__(
        self,
        workspace: str | Path | None = None,
        *,
        workers: int = 2,
        read_only: bool = False,
        tools: Sequence[str] = (),
        settings: Settings | None = None,
        ready_timeout: float = 60.0,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigurationError(f"LocalPool needs workers >= 1, got {workers!r}.")
        if isinstance(tools, str):
            raise ConfigurationError(
                f"LocalPool's tools is a list of import strings, got the string {tools!r}; "
                f"write tools=[{tools!r}]."
            )
        for spec in tools:
            # Loaded here once, so a bad import string fails now, not in every worker.
            for name_spec in spec.split():
                load_registry(name_spec)
        if ready_timeout <= 0:
            raise ConfigurationError(f"LocalPool needs ready_timeout > 0, got {ready_timeout!r}.")
        base = settings if settings is not None else Settings()
        folder = Path(workspace) if workspace is not None else Path(base.worker.workspace)
        if not folder.is_dir():
            raise ConfigurationError(f"LocalPool's workspace is not a folder: {folder}")
        self.workspace = folder.resolve()
        self.workers = workers
        self.read_only = read_only
        self.tools = tuple(tools)
        self.ready_timeout = ready_timeout
        self._base = base
        self._redis: RedisServer | None = None
        self._pool: WorkerPool | None = None
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        """The settings for an ``Executor`` on this pool: ``Executor(settings=pool.settings)``."""
        if self._settings is None:
            raise ConfigurationError("The LocalPool is not started; call start() or use `with`.")
        return self._settings

    @property
    def redis_url(self) -> str:
        """The private Redis's URL (a ``unix://`` socket), for ``--redis`` or another client."""
        if self._redis is None:
            raise ConfigurationError("The LocalPool is not started; call start() or use `with`.")
        return self._redis.url

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the live workers."""
        if self._pool is None:
            return []
        return [c.pid for c in self._pool.children if c.alive and c.pid is not None]

    def start(self) -> LocalPool:
        """Start Redis and the workers; return once every worker takes calls."""
        if self._pool is not None:
            return self
        self._redis = RedisServer().start()
        try:
            url = self._redis.url
            self._settings = self._base.with_changes(redis_url=url, workspace=self.workspace)
            self._pool = WorkerPool(
                url,
                self._settings,
                workers=self.workers,
                tool_specs=self.tools,
                read_only=self.read_only,
            )
            self._pool.start()
            self._pool.wait_ready(timeout=self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stop the workers (each call in flight gets up to ``grace`` s), then Redis."""
        pool, self._pool = self._pool, None
        server, self._redis = self._redis, None
        self._settings = None
        try:
            if pool is not None:
                pool.stop(grace)
        finally:
            if server is not None:
                server.stop()

    def __enter__(self) -> LocalPool:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
