"""``toolpool demo``: seven scenarios on an embedded Redis and a real worker pool.

Nothing to install by hand: it starts a private ``redis-server`` and three worker processes,
runs the scenarios against the current folder (writes go to ``.toolpool/demo/`` only and are
removed afterwards), prints what happened, and tears everything down.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from executor import Settings, ToolpoolError
from executor.client import Executor, Sessions
from executor.wire import Event, ToolCall, ToolResult, ToolStatus, read_events
from workers.tools._sandbox import probe
from workers.tools._shell_settings import BashSettings

SCRATCH = Path(".toolpool") / "demo"
_BAR = 40


@dataclass
class _Span:
    call_id: str
    tool: str
    mode: str
    start: float
    end: float
    worker: str


def run_demo(workspace: Path, workers: int, echo: Callable[[str], None] = click.echo) -> None:
    """Start Redis and a pool, run the seven scenarios, tear everything down."""
    from workers._local import LocalPool

    workspace = workspace.resolve()
    sessions_root = workspace / SCRATCH / "sessions"
    sessions_root.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_env(tools=(BashSettings,)).with_changes(
        lock_lease_ms=5000, sessions_root=sessions_root, host="demo"
    )
    try:
        with LocalPool(workspace, workers=workers, settings=settings, ready_timeout=30) as pool:
            processes = "process" if workers == 1 else "processes"
            echo(
                f"toolpool demo: Redis at {pool.redis_url}, {workers} worker {processes}, "
                f"workspace {workspace}\n"
            )
            with Executor(settings=pool.settings) as executor:
                _scenarios(executor, echo)
    finally:
        shutil.rmtree(workspace / SCRATCH, ignore_errors=True)
    echo("\nDone: workers stopped, Redis stopped, .toolpool/demo removed.")


def _scenarios(executor: Executor, echo: Callable[[str], None]) -> None:
    echo('1. "Look at the current folder": list_directory(".")')
    (listing,) = executor.run([ToolCall(id="look", name="list_directory", arguments={})])
    _show(listing, echo, lines=12)

    echo('\n2. "Read pyproject.toml": read_file (its results are capped at 500 characters)')
    (read,) = executor.run(
        [ToolCall(id="pyproject", name="read_file", arguments={"path": "pyproject.toml"})]
    )
    _show(read, echo, lines=30)
    if read.truncated:
        _kept(executor, read, echo)

    echo("\n3. Concurrency: one turn, calls in order; safe calls share the lock, writes are alone")
    scratch = str(SCRATCH / "notes.md")
    turn = [
        ToolCall(id="grep-1", name="grep", arguments={"pattern": r"[qz]{3}[0-9]{2}"}),
        ToolCall(id="grep-2", name="grep", arguments={"pattern": r"def \w+_lock\("}),
        ToolCall(id="glob", name="glob", arguments={"pattern": "**/*.lua"}),
        ToolCall(id="readme", name="read_file", arguments={"path": "README.md", "limit": 5}),
        ToolCall(
            id="write",
            name="write_file",
            arguments={"path": scratch, "content": "# written by the demo\n"},
        ),
        ToolCall(
            id="edit",
            name="edit_file",
            arguments={"path": scratch, "old_string": "demo", "new_string": "toolpool demo"},
        ),
        ToolCall(id="check", name="read_file", arguments={"path": scratch}),
    ]
    started = time.time()
    results = executor.run(turn)
    for result in results:
        echo(
            f"   {result.call_id:7} {result.name:11} {result.status.value:5} "
            f"{_first_line(result.content)}"
        )
    spans = _spans(executor, [c.id for c in turn], started)
    _timeline(spans, echo)
    _verdict(spans, echo)

    echo('\n4. Truncation: bash "seq 1 100000" (kept: the first 60% and last 40% of 3000 chars)')
    (big,) = executor.run([ToolCall(id="big", name="bash", arguments={"command": "seq 1 100000"})])
    head, _, tail = big.content.partition("\n\n... [")
    marker, _, rest = tail.partition("] ...\n\n")
    echo(
        f"   {big.original_chars:,} characters out, {len(big.content):,} shown: "
        f"{len(head):,} from the head, {len(rest):,} from the tail"
    )
    echo(f"   marker: ... [{marker}] ...")
    _kept(executor, big, echo)
    echo(
        "   With a running pool (`toolpool up`, or `toolpool worker` on your Redis), read a\n"
        "   truncated call's full output with `toolpool output CALL_ID`. This demo's Redis\n"
        "   stops when it ends, and the full outputs kept on it go with it."
    )
    _sessions(executor, echo)
    _sandbox(executor, echo)
    _background(executor, echo)


# A model's command that tries to leave its place; run only inside the sandbox.
_HOSTILE = (
    "echo pwned > /etc/toolpool-demo; ls -A ~ /root | head -3; "
    "exec 3<>/dev/tcp/1.1.1.1/53 || echo 'network: none'; "
    "setsid sleep 600 & echo 'a daemon started'"
)


def _sandbox(executor: Executor, echo: Callable[[str], None]) -> None:
    echo(
        "\n6. bash's sandbox: a command that tries to write /etc, look at the home folders,\n"
        "   reach the network and leave a daemon behind"
    )
    bash = executor.settings.tool(BashSettings)
    found = probe(bash.network)
    if bash.sandbox == "off" or found.bwrap is None:
        why = "it is off" if found.bwrap is not None else found.reason
        echo(f"   skipped: bash runs unconfined here ({why}); see docs/sandbox.md")
        return
    (result,) = executor.run([ToolCall(id="escape", name="bash", arguments={"command": _HOSTILE})])
    _show(result, echo, lines=12)
    echo("   /etc stayed read-only, the homes empty, no network; the daemon died with the call.")


def _sessions(executor: Executor, echo: Callable[[str], None]) -> None:
    echo(
        "\n5. Sessions: two agents, each with its own folder, lock and shell; each runs\n"
        '   [bash "mkdir -p src && cd src && sleep 0.5", bash "pwd"]'
    )
    names = ("agent-a", "agent-b")
    with Sessions(settings=executor.settings) as sessions:
        for name in names:
            sessions.create(name, idle_ttl=0)
    results: dict[str, list[ToolResult]] = {}
    started = time.time()

    def agent(name: str) -> None:
        turn = [
            ToolCall(
                id=f"{name}-cd",
                name="bash",
                arguments={"command": "mkdir -p src && cd src && sleep 0.5"},
            ),
            ToolCall(id=f"{name}-pwd", name="bash", arguments={"command": "pwd"}),
        ]
        with Executor(settings=executor.settings) as own:
            results[name] = own.run(turn, session=name)

    threads = [threading.Thread(target=agent, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [f"{name}-{step}" for name in names for step in ("cd", "pwd")]
    spans = _spans(executor, ids, started)
    _timeline(spans, echo)
    by_id = {span.call_id: span for span in spans}
    a, b = by_id.get("agent-a-cd"), by_id.get("agent-b-cd")
    if a is not None and b is not None:
        when = "at the same time" if a.start < b.end and b.start < a.end else "one after another"
        echo(f"   the two sessions' exclusive calls ran {when}: each session has a lock of its own")
    for name in names:
        where = results[name][-1].content.splitlines()[-1] if name in results else "?"
        echo(f"   {name}: the next command ran in {where}")
    echo("   (`toolpool session create NAME --from DIR` copies a folder, e.g. a checkout.)")


# Fetch the demo's page from the loopback, saying what came back or why nothing did.
_FETCH = (
    'python3 -c "import sys, urllib.request as u\n'
    "try: print('got:', u.urlopen('http://127.0.0.1:{port}/', timeout=5).read().decode().strip())\n"
    "except OSError as e: print('refused:', getattr(e, 'reason', e))\""
)


def _background(executor: Executor, echo: Callable[[str], None]) -> None:
    port = _free_port()
    echo(
        "\n7. A server in the background: agent-a runs process_start with\n"
        f'   "python3 -m http.server {port}"; its later calls, and agent-b\'s, fetch the page'
    )
    folder = executor.settings.worker.sessions_root
    assert folder is not None
    # The process starts where agent-a's shell is: in src, since scenario 5.
    (folder / "agent-a" / "src" / "index.html").write_text("hello from agent-a's server\n")
    command = f"python3 -u -m http.server {port} --bind 127.0.0.1"
    start = ToolCall(id="serve", name="process_start", arguments={"command": command, "wait": 2})
    (started,) = executor.run([start], session="agent-a")
    echo(f"   {_first_line(started.content)}")
    if started.status is not ToolStatus.OK:
        return
    fetch = {"command": f"sleep 0.5; {_FETCH.format(port=port)}"}
    answers = []
    for name in ("agent-a", "agent-b"):
        (fetched,) = executor.run(
            [ToolCall(id=f"fetch-{name}", name="bash", arguments=fetch)], session=name
        )
        said = [line for line in fetched.content.splitlines() if line.startswith(("got", "ref"))]
        answers.append(said[0] if said else _first_line(fetched.content))
        echo(f"   {name}: {answers[-1]}")
    log = ToolCall(id="log", name="process_output", arguments={"process": "p1"})
    stop = ToolCall(id="stop", name="process_stop", arguments={"process": "p1"})
    logged, stopped = executor.run([log, stop], session="agent-a")
    requests = [line for line in logged.content.splitlines() if '"GET /' in line]
    echo(f"   its log: {requests[0].strip() if requests else '(no request logged)'}")
    echo(f"   {stopped.content.splitlines()[0]}")
    if answers[-1].startswith("refused"):
        echo("   (each session has a network of its own: no other session reaches its servers.)")
    else:
        echo("   (no network of its own here, so every session reaches it: docs/processes.md)")


def _free_port() -> int:
    # In a session's own network any port is free; without one (no sandbox) the host's is used.
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port: int = probe_socket.getsockname()[1]
    return port


def _kept(executor: Executor, result: ToolResult, echo: Callable[[str], None]) -> None:
    """Read the full output of a truncated result back while the demo's Redis still runs."""
    full = executor.full_output(result.call_id)
    if full is None:
        echo(f"   (the full output of {result.call_id!r} was not kept on Redis)")
        return
    echo(
        f"   the full output was kept on the demo's Redis while it ran: {len(full):,} "
        "characters, read back from it"
    )


def _show(result: ToolResult, echo: Callable[[str], None], *, lines: int) -> None:
    if result.is_error:
        echo(f"   error ({result.error_type}): {result.content}")
        return
    shown = result.content.splitlines()
    for line in shown[:lines]:
        echo(f"   | {line}")
    if len(shown) > lines:
        echo(f"   | ... ({len(shown) - lines} more lines)")


def _first_line(text: str) -> str:
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= 60 else first[:57] + "..."


def _spans(executor: Executor, call_ids: Sequence[str], since: float) -> list[_Span]:
    """Each call's hold of the lock, from the workers' events."""
    opened: dict[str, Event] = {}
    spans: list[_Span] = []
    for _, item in read_events(executor.client, executor.keys):
        if item.call_id not in call_ids or item.ts < since:
            continue
        if item.event == "lock_acquired":
            opened[item.call_id] = item
        elif item.event == "lock_released" and item.call_id in opened:
            begin = opened.pop(item.call_id)
            end = float(item.data.get("released_at", item.ts))
            spans.append(
                _Span(
                    item.call_id, item.tool, str(item.data.get("mode")), begin.ts, end, item.worker
                )
            )
    order = {call_id: i for i, call_id in enumerate(call_ids)}
    return sorted(spans, key=lambda s: order[s.call_id])


def _timeline(spans: list[_Span], echo: Callable[[str], None]) -> None:
    if not spans:
        echo("   (no lock events recorded)")
        return
    origin = min(s.start for s in spans)
    total = max(s.end for s in spans) - origin or 1e-9
    echo(f"\n   lock held, ms from the turn's first grant (0 .. {total * 1000:.0f} ms):")
    width = max(7, *(len(span.call_id) for span in spans))
    for span in spans:
        first = int((span.start - origin) / total * _BAR)
        last = max(first + 1, int((span.end - origin) / total * _BAR))
        bar = " " * first + "#" * (last - first)
        echo(
            f"   {span.call_id:{width}} {span.tool:11} {span.mode:9} |{bar:<{_BAR}}| "
            f"{(span.start - origin) * 1000:6.1f}-{(span.end - origin) * 1000:6.1f}  "
            f"{span.worker}"
        )


def peak_concurrency(spans: Iterable[tuple[float, float]]) -> int:
    """The most spans ``(start, end)`` open at one instant (a sweep over their end points).

    A span holds ``[start, end)``: one that ends when another starts never overlaps it.
    """
    points = sorted(
        point for start, end in spans for point in ((start, 1), (end, -1))
    )  # at the same instant, -1 sorts first: ends before starts
    peak = running = 0
    for _, step in points:
        running += step
        peak = max(peak, running)
    return peak


def _verdict(spans: list[_Span], echo: Callable[[str], None]) -> None:
    peak = peak_concurrency((s.start, s.end) for s in spans if s.mode == "shared")
    echo(f"   shared calls running at once, at most: {peak}")
    for span in spans:
        if span.mode != "exclusive":
            continue
        others = [
            o.call_id for o in spans if o is not span and o.start < span.end and span.start < o.end
        ]
        verdict = "ran alone" if not others else f"OVERLAPPED {', '.join(others)}"
        echo(f"   {span.call_id} ({span.tool}, exclusive): {verdict}")


@click.command("demo")
@click.option("--workers", type=int, default=3, show_default=True, help="Worker processes.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=".",
    show_default=True,
    help="Folder the tools look at.",
)
def demo_command(workers: int, workspace: Path) -> None:
    """Show a pool at work on an embedded Redis: parallel reads, a capped read, a write
    alone, truncation; then clean up."""
    try:
        run_demo(workspace, workers)
    except (ToolpoolError, TimeoutError) as exc:
        # No redis-server to start, one that would not start, workers not ready in time.
        raise click.ClickException(str(exc)) from None
