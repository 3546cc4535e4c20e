"""bash's own settings: its time limits and output cap, the variables it passes on, its sandbox
and the limits on one command (``TOOLPOOL_BASH_*``; docs/sandbox.md)."""

from __future__ import annotations

from dataclasses import dataclass

from executor._settings import SettingsGroup, at_least, between, one_of, setting

SANDBOX_MODES = ("off", "auto", "required")
# The worker's home and everyone's, host secrets, and sockets of local services (/run): hidden
# from sandboxed commands. The ~/... entries matter when the workspace is the home itself.
DEFAULT_HIDE = (
    "~ /root /home /run /var/run /etc/shadow /etc/gshadow /etc/ssh /etc/sudoers "
    "/etc/sudoers.d ~/.ssh ~/.aws ~/.azure ~/.config/gcloud ~/.kube ~/.docker ~/.netrc "
    "~/.gnupg ~/.git-credentials ~/.pypirc"
)
_NO_LIMIT = at_least(0, "no limit")
# Which of the host's other sessions a worker makes sandboxes ahead for (``warm_peers``).
PEER_MODES = ("off", "new", "all")


def _peer_mode(raw: str) -> str:
    """``warm_peers`` as written, or as the yes/no it was before it had modes: yes is "all"."""
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return "all"
    if word in ("0", "false", "no"):
        return "off"
    return word


@dataclass(frozen=True)
class BashSettings(SettingsGroup):
    """What the bash tool reads; a worker hands it to bash alone."""

    default_timeout: float = setting(
        10.0, "BASH_DEFAULT_TIMEOUT", "seconds a command may run when the call gives no timeout"
    )
    max_timeout: float = setting(600.0, "BASH_MAX_TIMEOUT", "the longest timeout a call may ask")
    max_output_bytes: int = setting(
        1024 * 1024, "BASH_MAX_OUTPUT_BYTES", "bytes of stdout and of stderr kept, each"
    )
    # Space-separated names (or fnmatch patterns) of worker environment variables that bash
    # commands get on top of the built-in allow-list; everything else stays with the worker.
    env: str = setting("", "BASH_ENV", "extra variable names bash commands get")
    # "off", "auto" (bubblewrap where it works, else unconfined with a warning at worker
    # start) or "required" (never unconfined).
    sandbox: str = setting(
        "auto", "BASH_SANDBOX", "bash's sandbox: off, auto or required", check=one_of(SANDBOX_MODES)
    )
    network: bool = setting(False, "BASH_NETWORK", "the network for sandboxed commands")
    # Space-separated paths sandboxed commands do not see (~ is the worker's home); the
    # worker's pool workspace and sessions root are hidden too, but for the call's own folder.
    hide: str = setting(DEFAULT_HIDE, "BASH_HIDE", "paths sandboxed commands do not see")
    # Limits on one command; 0 turns one off. Processes, memory and the CPU time of all its
    # processes together need a cgroup the worker can write (docs/sandbox.md#limits).
    cpu_seconds: float = setting(
        300.0, "BASH_CPU_SECONDS", "CPU seconds of one command", check=_NO_LIMIT
    )
    memory_mb: int = setting(
        2048, "BASH_MEMORY_MB", "MiB of memory of one command", check=_NO_LIMIT
    )
    max_processes: int = setting(
        512, "BASH_MAX_PROCESSES", "processes of one command at once", check=_NO_LIMIT
    )
    file_size_mb: int = setting(
        1024, "BASH_FILE_SIZE_MB", "MiB of one file a command writes", check=_NO_LIMIT
    )
    tmp_mb: int = setting(512, "BASH_TMP_MB", "MiB of a sandboxed command's /tmp", check=_NO_LIMIT)
    # Launches made ahead of commands, off the lock (docs/sandbox.md#made-ahead): a worker
    # process keeps one launcher ready and the sandboxes of the last this-many places
    # (sessions) it ran commands in; 0 makes each command's launch in its call.
    warm: int = setting(
        8, "BASH_WARM", "sandboxes a worker process keeps made ahead (0: none)", check=at_least(0)
    )
    # Also for the host's other sessions: "new" ones as they are made (a session's first call
    # lands on any worker of its host), "all" also as they run bash elsewhere (speculation
    # that pays with CPU to spare and few sessions, and costs a busy host of many a third of
    # its calls/s: benchmarks.many_sessions), or "off".
    warm_peers: str = setting(
        "new",
        "BASH_WARM_PEERS",
        "the host's other sessions whose sandboxes are made ahead: off, new or all",
        check=one_of(PEER_MODES),
        parse=_peer_mode,
    )
    # A session just made is made ahead only while the host's workers run no bash back to
    # back and, above 0, the machine's CPUs are at least this share idle (a machine shared
    # with other work: speculation would take from it).
    warm_peers_idle: float = setting(
        0.0,
        "BASH_WARM_PEERS_IDLE",
        "share of the machine's CPU idle for a new session's sandbox to be made ahead",
        check=between(0, 1),
    )
    # Background processes of a session (process_start): how many run at once, and each
    # one's limits beyond a command's (memory and processes are bash's own, per process).
    background_max: int = setting(
        8, "BASH_BACKGROUND_MAX", "background processes a session runs at once", check=at_least(1)
    )
    background_output_mb: int = setting(
        16,
        "BASH_BACKGROUND_OUTPUT_MB",
        "MiB of output kept of one background process",
        check=at_least(1),
    )
    background_cpu_seconds: float = setting(
        3600.0,
        "BASH_BACKGROUND_CPU_SECONDS",
        "CPU seconds of one background process",
        check=_NO_LIMIT,
    )
