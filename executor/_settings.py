"""Settings shared by the orchestrator and the workers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from executor._errors import ConfigurationError

ENV_PREFIX = "TOOLPOOL_"
BASH_SANDBOX_MODES = ("off", "auto", "required")
# The worker's home and everyone's, host secrets, and sockets of local services (/run): hidden
# from sandboxed commands. The ~/... entries matter when the workspace is the home itself.
DEFAULT_BASH_HIDE = (
    "~ /root /home /run /var/run /etc/shadow /etc/gshadow /etc/ssh /etc/sudoers "
    "/etc/sudoers.d ~/.ssh ~/.aws ~/.azure ~/.config/gcloud ~/.kube ~/.docker ~/.netrc "
    "~/.gnupg ~/.git-credentials ~/.pypirc"
)


@dataclass(frozen=True)
class TruncationPolicy:
    """How tool output is cut before a model sees it.

    ``default_max_chars`` applies to tools that set no ``max_result_chars`` (3000);
    ``global_cap`` is the ceiling no tool may exceed (50,000); ``head_ratio`` is the share of
    the kept characters taken from the start (0.6; 0.5 keeps half and half).
    """

    default_max_chars: int = 3000
    global_cap: int = 50_000
    head_ratio: float = 0.6

    def __post_init__(self) -> None:
        if self.default_max_chars < 1:
            raise ConfigurationError(
                f"default_max_chars must be at least 1, got {self.default_max_chars}"
            )
        if self.global_cap < 1:
            raise ConfigurationError(f"global_cap must be at least 1, got {self.global_cap}")
        if not 0.0 <= self.head_ratio <= 1.0:
            raise ConfigurationError(f"head_ratio must be between 0 and 1, got {self.head_ratio}")

    def limit_for(self, tool_max_chars: int | None) -> int:
        """The character limit for a tool: its own or the default, never above the cap."""
        wanted = self.default_max_chars if tool_max_chars is None else tool_max_chars
        return min(wanted, self.global_cap)


@dataclass(frozen=True)
class Settings:
    """Everything configurable, frozen; build it with ``Settings(...)`` or ``from_env()``."""

    redis_url: str | None = None
    key_prefix: str = "toolpool"
    queue: str = "default"
    scope: str = "global"
    workspace: Path = Path()
    lock_lease_ms: int = 10_000
    lock_wait_timeout: float = 300.0
    # How long results and turn plans are kept: an hour, as full outputs. Redis then holds
    # about an hour of calls (under 1 KB each for a small result), not a day's.
    result_ttl: int = 3600
    # How long RQ keeps a finished job's own record (its hash). toolpool's result keys
    # (result_ttl) are what callers read; RQ needs its records only minutes.
    rq_record_ttl: int = 600
    full_output_ttl: int = 3600
    full_output_max_bytes: int = 16 * 1024 * 1024
    events_maxlen: int = 10_000
    call_heartbeat_s: float = 1.0
    call_liveness_s: float = 5.0
    turn_timeout: float = 900.0
    truncation: TruncationPolicy = TruncationPolicy()
    bash_default_timeout: float = 10.0
    bash_max_timeout: float = 600.0
    bash_max_output_bytes: int = 1024 * 1024
    # Space-separated names (or fnmatch patterns) of worker environment variables that bash
    # commands get on top of the built-in allow-list; everything else stays with the worker.
    bash_env: str = ""
    # bash's sandbox (docs/sandbox.md): "off", "auto" (bubblewrap where it works, else
    # unconfined with a warning at worker start) or "required" (never unconfined).
    bash_sandbox: str = "auto"
    bash_network: bool = False
    # Space-separated paths sandboxed commands do not see (~ is the worker's home); the
    # worker's pool workspace and sessions root are hidden too, but for the call's own folder.
    bash_hide: str = DEFAULT_BASH_HIDE
    # Limits on one command; 0 turns one off. Processes, memory and the CPU time of all its
    # processes together need a cgroup the worker can write (docs/sandbox.md#limits).
    bash_cpu_seconds: float = 300.0
    bash_memory_mb: int = 2048
    bash_max_processes: int = 512
    bash_file_size_mb: int = 1024
    bash_tmp_mb: int = 512
    # Sessions: a worker with a sessions root serves session S in sessions_root/S, on the
    # queue of its host (default: the machine's host name). ``session`` is the client's
    # default session (TOOLPOOL_SESSION); a created session expires after this idle time.
    sessions_root: Path | None = None
    # False: the worker takes only session calls (started with a sessions root, no workspace).
    serve_pool_calls: bool = True
    host: str = ""
    session: str | None = None
    session_idle_ttl: float = 24 * 3600.0
    session_sweep_s: float = 30.0
    weather_url: str = "https://api.open-meteo.com"
    geocoding_url: str = "https://geocoding-api.open-meteo.com"
    http_timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.bash_sandbox not in BASH_SANDBOX_MODES:
            raise ConfigurationError(
                f"bash_sandbox must be one of {', '.join(BASH_SANDBOX_MODES)}, got "
                f"{self.bash_sandbox!r}"
            )
        for name in (
            "bash_cpu_seconds",
            "bash_memory_mb",
            "bash_max_processes",
            "bash_file_size_mb",
            "bash_tmp_mb",
        ):
            if getattr(self, name) < 0:
                raise ConfigurationError(
                    f"{name} must be 0 (no limit) or more, got {getattr(self, name)}"
                )

    def with_changes(self, **changes: Any) -> Settings:
        """A copy with some fields replaced."""
        return replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``TOOLPOOL_*`` variables; unset ones keep their defaults.

        Names: ``TOOLPOOL_`` + the field name in capitals (``TOOLPOOL_REDIS_URL``,
        ``TOOLPOOL_KEY_PREFIX``, ``TOOLPOOL_QUEUE``, ``TOOLPOOL_SCOPE``, ``TOOLPOOL_WORKSPACE``,
        ``TOOLPOOL_LOCK_LEASE_MS``, ...), and for truncation
        ``TOOLPOOL_MAX_RESULT_CHARS``, ``TOOLPOOL_RESULT_CAP`` and ``TOOLPOOL_HEAD_RATIO``.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        for name, kind in types.items():
            raw = env.get(ENV_PREFIX + name.upper())
            if name == "truncation" or raw is None:
                continue
            values[name] = _parse(name, raw, str(kind))
        trunc: dict[str, Any] = {}
        for env_name, field_name, kind in (
            ("MAX_RESULT_CHARS", "default_max_chars", "int"),
            ("RESULT_CAP", "global_cap", "int"),
            ("HEAD_RATIO", "head_ratio", "float"),
        ):
            raw = env.get(ENV_PREFIX + env_name)
            if raw is not None:
                trunc[field_name] = _parse(env_name.lower(), raw, kind)
        if trunc:
            values["truncation"] = TruncationPolicy(**trunc)
        return cls(**values)


def _parse(name: str, raw: str, kind: str) -> Any:
    """Convert one environment value to the field's type, naming the variable on failure."""
    try:
        if "Path" in kind:
            return Path(raw)
        if kind.startswith("bool"):
            return _boolean(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
    except ValueError:
        raise ConfigurationError(
            f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind.split(maxsplit=1)[0]}"
        ) from None
    return raw


def _boolean(raw: str) -> bool:
    words = {
        "1": True,
        "true": True,
        "yes": True,
        "on": True,
        "0": False,
        "false": False,
        "no": False,
        "off": False,
    }
    try:
        return words[raw.strip().lower()]
    except KeyError:
        raise ValueError(raw) from None


def shown_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
