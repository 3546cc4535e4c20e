"""bash's sandbox through real workers: what a model's command can see, write, start and reach.

Each test sends the command a model might send, through a real redis-server and real worker
processes serving sessions, and checks the result it gets and the machine afterwards: secrets
and other sessions unseen, writes outside the session folder refused, every process the
command started gone when the call ends (found by a marker in their command line, since a
sandboxed command's own pids are its PID namespace's), the network off unless allowed, and
each limit ending its hog with a result that names it while the worker lives on.

Skipped, saying why, where bubblewrap is missing or the kernel refuses it namespaces.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor import ErrorType, Executor, Sessions, Settings, ToolResult, ToolStatus
from tests.support.pids import processes_with, sleep_marker, survivors
from tests.support.procs import MakeWorkers, WorkerProcess
from tests.support.sandbox import require_sandbox
from tests.support.sessions import call, host_settings, ok
from tests.support.waiting import PATIENCE_S
from workers.tools._cgroup import find_cgroups
from workers.tools._shell_settings import BashSettings

# A process-heavy proof (worker processes): `scripts/test --fast` leaves it out.
pytestmark = pytest.mark.proof


@pytest.fixture(autouse=True)
def _sandbox_works() -> None:
    require_sandbox()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The workers' home, holding a private key, as a developer's machine would."""
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_rsa").write_text("PRIVATE-KEY-MATERIAL\n")
    monkeypatch.setenv("HOME", str(folder))
    return folder


def _start(make_workers: MakeWorkers, settings: Settings, *sessions: str) -> WorkerProcess:
    (worker,) = make_workers(settings).start(1)
    with Sessions(settings=settings) as admin:
        for name in sessions:
            admin.create(name)
    return worker


def _run(settings: Settings, session: str, command: str, timeout: float = 20) -> ToolResult:
    with Executor(settings=settings, session=session) as executor:
        (result,) = executor.run(
            [call(f"c-{uuid.uuid4().hex}", "bash", command=command, timeout=timeout)],
            timeout=timeout + PATIENCE_S,
        )
    return result


def _folder(settings: Settings, session: str) -> Path:
    assert settings.worker.sessions_root is not None
    return Path(os.path.realpath(settings.worker.sessions_root / session))


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox="required")])


def test_home_secrets_and_other_sessions_cannot_be_read(
    settings: Settings, make_workers: MakeWorkers, home: Path
) -> None:
    _start(make_workers, settings, "a", "b")
    other = _folder(settings, "b")
    (other / "notes.txt").write_text("OTHER-SESSION-DATA\n")
    (_folder(settings, "a") / "mine.txt").write_text("MY-DATA\n")

    content = ok(
        _run(
            settings,
            "a",
            f"cat ~/.ssh/id_rsa {home}/.ssh/id_rsa; ls -A /root; cat {other}/notes.txt "
            "../b/notes.txt; ls /etc/ssh; cat mine.txt",
        )
    )

    assert "MY-DATA" in content
    for secret in ("PRIVATE-KEY-MATERIAL", "OTHER-SESSION-DATA", "ssh_host"):
        assert secret not in content
    assert "No such file or directory" in content


def test_writes_outside_the_session_folder_fail(
    settings: Settings, make_workers: MakeWorkers, tmp_path: Path
) -> None:
    _start(make_workers, settings, "a", "b")
    scratch = f"toolpool-sandbox-{os.getpid()}"
    other = _folder(settings, "b")

    content = ok(
        _run(
            settings,
            "a",
            f"echo x > /etc/{scratch}; echo x > {other}/planted; echo x > "
            f"{settings.worker.workspace}/planted; echo x > /usr/{scratch}; echo kept > "
            f"/tmp/{scratch} && cat /tmp/{scratch}"
            "; echo ok > mine.txt",
        )
    )

    assert content.count("Read-only file system") + content.count("No such file") >= 4, content
    assert (_folder(settings, "a") / "mine.txt").read_text() == "ok\n"
    assert "kept" in content  # the private /tmp works, and is the command's own:
    for path in (
        Path("/etc", scratch),
        other / "planted",
        settings.worker.workspace / "planted",
        Path("/usr", scratch),
        Path("/tmp", scratch),
    ):
        assert not path.exists(), path


def test_setsid_and_double_forked_daemons_are_gone_when_the_call_ends(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    _start(make_workers, settings, "a")
    lone, daemon = sleep_marker(), sleep_marker()
    # The command returns only once both run, so they were alive when bash exited.
    command = (
        f"setsid sleep {lone} >/dev/null 2>&1 & ( ( setsid sleep {daemon} >/dev/null 2>&1 & ) & ); "
        f"until grep -qs {lone} /proc/[0-9]*/cmdline && grep -qs {daemon} /proc/[0-9]*/cmdline; "
        "do sleep 0.01; done; echo both-running"
    )

    content = ok(_run(settings, "a", command))

    assert "both-running" in content
    assert survivors(lone) == []
    assert survivors(daemon) == []


def test_a_timeout_ends_what_the_command_started(
    settings: Settings, make_workers: MakeWorkers
) -> None:
    _start(make_workers, settings, "a")
    marker = sleep_marker()

    result = _run(settings, "a", f"setsid sleep {marker} & sleep {marker}", timeout=2)

    assert result.error_type is ErrorType.TIMEOUT, result.content
    assert "timed out after 2 s" in result.content
    assert survivors(marker) == []


@pytest.fixture
def listener() -> Iterator[tuple[int, threading.Event]]:
    """A TCP server on the machine's loopback; the event is set when someone connects."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    connected = threading.Event()

    def accept() -> None:
        try:
            peer, _ = server.accept()
        except OSError:
            return  # closed at the end of the test
        connected.set()
        peer.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    server.close()
    thread.join(5)


def test_network_is_off_by_default_and_on_when_allowed(
    redis_url: str,
    tmp_path: Path,
    make_workers: MakeWorkers,
    listener: tuple[int, threading.Event],
) -> None:
    port, connected = listener
    command = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected || echo no-network"
    closed = host_settings(redis_url, tmp_path, "h1", tools=[BashSettings(sandbox="required")])
    opened = host_settings(
        redis_url, tmp_path, "h2", tools=[BashSettings(sandbox="required", network=True)]
    )
    _start(make_workers, closed, "off")
    _start(make_workers, opened, "on")

    assert "no-network" in ok(_run(closed, "off", command))
    assert not connected.is_set()
    assert "connected" in ok(_run(opened, "on", command)).split("stdout:\n")[1]
    assert connected.wait(PATIENCE_S)


@pytest.fixture
def limited(redis_url: str, tmp_path: Path) -> Settings:
    found = find_cgroups()
    if found.pids is None or found.memory is None:
        pytest.skip(f"no writable pids and memory cgroups here: {'; '.join(found.missing)}")
    return host_settings(
        redis_url,
        tmp_path,
        "h1",
        tools=[
            BashSettings(
                sandbox="required",
                max_processes=64,
                memory_mb=128,
                file_size_mb=16,
                cpu_seconds=3,
            )
        ],
    )


@pytest.mark.parametrize(
    ("command", "limit"),
    [
        # The shell waits a while: a bomb whose shell has exited dies with the call, limit or not.
        pytest.param(":(){ :|:& };:; sleep 5", "the limit of 64 processes", id="fork-bomb"),
        pytest.param(
            "python3 -c 'b = bytearray(1 << 30); print(len(b))' {tag}",
            "the memory limit of 128 MiB",
            id="memory-hog",
        ),
        pytest.param(
            "head -c 10G /dev/zero > big; ls -l big",
            "the file size limit of 16 MiB",
            id="10-GB-file",
        ),
        pytest.param(
            "python3 -c 'while True: pass' {tag}", "the CPU time limit of 3 s", id="cpu-burner"
        ),
        pytest.param(
            "for i in 1 2 3 4; do python3 -c 'while True: pass' {tag} & done; wait",
            "the CPU time limit of 3 s (all its processes together)",
            id="cpu-spread",
        ),
    ],
)
def test_each_limit_ends_its_hog_with_a_result_naming_it(
    limited: Settings, make_workers: MakeWorkers, command: str, limit: str
) -> None:
    worker = _start(make_workers, limited, "a")
    # The hogs carry a tag of their own in their command line: the machine may run other
    # `while True` burners (CI does), and those are not ours to find.
    tag = f"hog-{uuid.uuid4().hex}"

    result = _run(limited, "a", command.replace("{tag}", tag), timeout=20)

    # Each ends by itself at its limit; a fork bomb may instead keep bash retrying its refused
    # forks into the time limit (a busy machine), and then that result is a timeout naming the
    # limit that held it.
    assert limit in result.content
    if "timed out after 20 s" in result.content:
        assert limit == "the limit of 64 processes", result.content
        assert result.error_type is ErrorType.TIMEOUT, result.content
    else:
        assert result.error_type is ErrorType.TOOL_ERROR, result.content
    big = _folder(limited, "a") / "big"
    assert not big.exists() or big.stat().st_size <= 16 * 1024 * 1024
    # The worker lived through it and serves the next call.
    assert worker.alive()
    after = _run(limited, "a", "echo alive")
    assert after.status is ToolStatus.OK
    assert "alive" in after.content
    assert processes_with(tag) == []
