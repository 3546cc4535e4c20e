"""One ``tools/call`` through MCP against ``Executor.run`` of the same call, in the same run.

Usage: ``python -m benchmarks.mcp [--runs 3] [--calls 200] [--warmup 20] [--mode auto|legacy]``.
A private redis-server and two worker processes serving the built-in tools (bash's sandbox
off) on a temporary workspace that holds one small file; three sides call them:

- ``Executor.run``: ``Executor.run([call])`` in this process, one long-lived Executor;
- ``MCP stdio``: ``client.call_tool`` through one long-lived client of the official MCP SDK,
  talking over stdin/stdout to ``toolpool mcp``, a subprocess that client started;
- ``MCP HTTP``: the same over streamable HTTP, to ``toolpool mcp --http`` on a loopback port.

Calls: ``calculator`` ``6*7`` (a trivial call: what is timed is the path, not the tool) and
``read_file`` of the small file; every answer is checked. A round calls each side once per
call, the order of the sides reversed every other round, so load hits them alike. Per run
(``--calls`` rounds after ``--warmup`` untimed ones): each side's median and p90 per call, and
each MCP transport's ratio of medians to ``Executor.run``. Over ``--runs`` runs: min / median
/ max. The goal: MCP over stdio under 1.5x ``Executor.run`` (median over runs, every call).

Redis, the workers and the HTTP server are stopped by their pids at the end, Ctrl-C and
SIGTERM included; the stdio server by its client (stdin closed, then its process tree
killed), and by its pid should it outlive that.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
import redis
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from benchmarks.entry import at_least, run_bench
from benchmarks.sides import BenchError, Pool, start_builtin_workers
from executor import Settings, ToolCall
from executor.client import Executor
from executor.wire import ToolStatus
from tests.support.mcp import http_command
from tests.support.pids import parent_of, processes_where
from tests.support.ports import free_port
from tests.support.procs import python_path_env, stop_process
from tests.support.waiting import gone
from workers._embedded_redis import RedisServer
from workers.tools._shell_settings import BashSettings

ROOT = Path(__file__).resolve().parents[1]
EXECUTOR, STDIO, HTTP = "Executor.run", "MCP stdio", "MCP HTTP"
SIDES = (EXECUTOR, STDIO, HTTP)
MODES = ("auto", "legacy")
GOAL_RATIO = 1.5
GOAL = f"goal: MCP over stdio under {GOAL_RATIO:g}x Executor.run"
WORKERS = 2
SMALL_FILE = "notes.txt"
SMALL_TEXT = "".join(f"line {n}: a small file for read_file to read\n" for n in range(1, 11))
_SERVING = "toolpool mcp: serving on "
_START_PATIENCE_S = 90.0
# Only a broken pool or server makes a call wait this long; the benchmark then fails.
_CALL_PATIENCE_S = 60.0
_STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Call:
    """One tool call every side makes, and the text it must answer."""

    label: str
    tool: str
    arguments: dict[str, Any]
    expected: str


CALLS = (
    Call("calculator", "calculator", {"expression": "6*7"}, "6*7 = 42"),
    Call("read_file", "read_file", {"path": SMALL_FILE}, SMALL_TEXT),
)

#: A side: make the call, return the text it answered (``BenchError`` if it failed).
Side = Callable[[Call], Awaitable[str]]
#: Per (call label, side name), the milliseconds of each timed call, round by round.
Times = dict[tuple[str, str], list[float]]


# -- the sides --------------------------------------------------------------------------------


def executor_side(executor: Executor) -> Side:
    """``Executor.run`` of a one-call turn, blocking (nothing else runs meanwhile)."""

    async def call(which: Call) -> str:
        turn = [ToolCall(name=which.tool, arguments=which.arguments)]
        (result,) = executor.run(turn, timeout=_CALL_PATIENCE_S)
        if result.status is not ToolStatus.OK:
            raise BenchError(f"{EXECUTOR}: {which.label} failed: {result.content[:300]!r}")
        return result.content

    return call


def mcp_side(name: str, client: Client) -> Side:
    """``client.call_tool`` of the same call; the text of its result."""

    async def call(which: Call) -> str:
        try:
            result = await client.call_tool(which.tool, which.arguments)
        except Exception as exc:  # the SDK's errors, a timeout, a closed connection
            raise BenchError(f"{name}: {which.label} failed: {exc!r}") from exc
        text = "".join(i.text for i in result.content if isinstance(i, types.TextContent))
        if result.is_error:
            raise BenchError(f"{name}: {which.label} answered an error: {text[:300]!r}")
        return text

    return call


# -- the measuring ----------------------------------------------------------------------------


def order(names: Sequence[str], round_index: int) -> list[str]:
    """This round's order of the sides: as given, reversed every other round."""
    return list(names) if round_index % 2 == 0 else list(names)[::-1]


async def _timed_ms(name: str, side: Side, which: Call) -> float:
    started = time.perf_counter()
    text = await side(which)
    took = (time.perf_counter() - started) * 1000.0
    if text != which.expected:
        raise BenchError(
            f"{name}: {which.label} answered {text[:200]!r}, expected {which.expected[:200]!r}"
        )
    return took


async def measure(
    sides: Mapping[str, Side], calls: Sequence[Call], rounds: int, warmup: int
) -> Times:
    """``rounds`` timed rounds after ``warmup`` untimed ones; each round makes every call on
    every side, in ``order``."""
    times: Times = {(which.label, name): [] for which in calls for name in sides}
    for index in range(warmup + rounds):
        for which in calls:
            for name in order(list(sides), index):
                took = await _timed_ms(name, sides[name], which)
                if index >= warmup:
                    times[(which.label, name)].append(took)
    return times


def percentile(values: Sequence[float], share: float) -> float:
    """The value ``share`` of the way up the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass
class Figures:
    """Per (call, side), one figure per run: median and p90 ms; per (call, MCP side), the
    run's ratio of its median to Executor.run's."""

    medians: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    p90s: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    ratios: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, times: Times) -> None:
        for key, values in times.items():
            self.medians.setdefault(key, []).append(statistics.median(values))
            self.p90s.setdefault(key, []).append(percentile(values, 0.9))
        for (label, name), values in times.items():
            if name != EXECUTOR:
                base = statistics.median(times[(label, EXECUTOR)])
                self.ratios.setdefault((label, name), []).append(statistics.median(values) / base)


def spread(values: Sequence[float]) -> str:
    """``min / median / max``, two decimals each."""
    return " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))


def run_line(times: Times, label: str, names: Sequence[str]) -> str:
    """One run's figures of one call: each side's median (p90), and each MCP side's ratio."""
    base = statistics.median(times[(label, EXECUTOR)])
    parts = []
    for name in names:
        values = times[(label, name)]
        middle = statistics.median(values)
        ratio = "" if name == EXECUTOR else f" = {middle / base:.2f}x"
        parts.append(f"{name} {middle:.2f} ms (p90 {percentile(values, 0.9):.2f}){ratio}")
    return f"{label:<11} " + " | ".join(parts)


def table(figures: Figures, calls: Sequence[Call], names: Sequence[str]) -> list[str]:
    """Per call and side: min / median / max over runs of the medians, p90s and ratios."""
    header = (
        f"{'call':<11} {'side':<13} {'median ms (min / med / max)':>28} "
        f"{'p90 ms (min / med / max)':>26} {'/ Executor.run (min / med / max)':>33}"
    )
    lines = [header, "-" * len(header)]
    for which in calls:
        for name in names:
            key = (which.label, name)
            ratio = "-" if name == EXECUTOR else spread(figures.ratios[key])
            lines.append(
                f"{which.label:<11} {name:<13} {spread(figures.medians[key]):>28} "
                f"{spread(figures.p90s[key]):>26} {ratio:>33}"
            )
    return lines


def verdict(figures: Figures, calls: Sequence[Call]) -> str:
    """The goal line: met when the median over runs of MCP stdio's ratio is under the goal
    for every call."""
    middles = {
        which.label: statistics.median(figures.ratios[(which.label, STDIO)]) for which in calls
    }
    met = all(middle < GOAL_RATIO for middle in middles.values())
    detail = ", ".join(f"{label} {middle:.2f}x" for label, middle in middles.items())
    return f"{GOAL}: {'met' if met else 'NOT met'} (median over runs: {detail})"


# -- the processes ----------------------------------------------------------------------------


def server_env() -> dict[str, str]:
    """An MCP server's environment: ours without TOOLPOOL_* (the command line says it all),
    the repository on the path."""
    return python_path_env({k: v for k, v in os.environ.items() if not k.startswith("TOOLPOOL_")})


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


@contextmanager
def http_server(redis_url: str, log: Path) -> Iterator[tuple[str, int]]:
    """``toolpool mcp --http`` on a free loopback port: (its MCP URL, its pid) once it says
    it serves; stopped by its pid after."""
    port = free_port()
    argv = http_command(redis_url, port)
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            argv,
            env=server_env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    found: list[str] = []
    said = threading.Event()

    def read() -> None:
        # Reads to the end, so the pipe never fills; the end (the process gone) also wakes us.
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(_SERVING) and not found:
                found.append(line[len(_SERVING) :].strip())
                said.set()
        said.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not said.wait(_START_PATIENCE_S) or not found:
            raise BenchError(
                f"the MCP HTTP server did not say it serves within {_START_PATIENCE_S:g} s "
                f"(exit {process.poll()}): {_tail(log)}"
            )
        yield found[0], process.pid
    finally:
        stop_process(process, _STOP_GRACE_S)
        reader.join(timeout=_STOP_GRACE_S)
        if process.stdout is not None:
            process.stdout.close()


def _stdio_server_pids(redis_url: str) -> list[int]:
    """Our own child processes running ``toolpool mcp`` on ``redis_url`` without ``--http``."""

    def stdio(cmdline: bytes) -> bool:
        args = cmdline.split(b"\0")
        return b"executor.cli" in args and redis_url.encode() in args and b"--http" not in args

    return [pid for pid in processes_where("cmdline", stdio) if parent_of(pid) == os.getpid()]


def kill_leftovers(pids: Sequence[int]) -> None:
    """SIGKILL those of ``pids`` still running as our children (the stdio server, should it
    outlive its client's clean-up)."""
    for pid in pids:
        if not gone(pid) and parent_of(pid) == os.getpid():
            os.kill(pid, signal.SIGKILL)


@asynccontextmanager
async def stdio_connection(redis_url: str, mode: str, errlog: TextIO) -> AsyncIterator[Client]:
    """A client that started ``toolpool mcp`` as its subprocess, connected over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "executor.cli", "mcp", "--redis", redis_url],
        env=server_env(),
        cwd=ROOT,
    )
    async with Client(
        stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=_CALL_PATIENCE_S
    ) as client:
        yield client


@asynccontextmanager
async def http_connection(url: str, mode: str) -> AsyncIterator[Client]:
    """A client of the HTTP server at ``url``, on one HTTP connection pool."""
    # No read timeout on the HTTP level: a server stream may stay quiet; calls have their own.
    timeout = httpx2.Timeout(_CALL_PATIENCE_S, read=None)
    async with httpx2.AsyncClient(timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=_CALL_PATIENCE_S) as client:
            yield client


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Setup:
    """What the measuring needs from the processes started before it."""

    args: argparse.Namespace
    redis_url: str
    http_url: str
    executor: Executor
    stdio_log: TextIO
    stdio_log_path: Path
    stdio_pids: list[int]


async def _connect(what: str, stack: AsyncExitStack, connection: Any, log: Path | None) -> Client:
    try:
        client: Client = await stack.enter_async_context(connection)
    except Exception as exc:
        tail = f"; its stderr: {_tail(log)}" if log is not None else ""
        raise BenchError(f"the {what} client could not connect: {exc!r}{tail}") from exc
    return client


async def measure_all(setup: Setup) -> Figures:
    """Connect both MCP clients, then the runs, printed as they end."""
    args = setup.args
    async with AsyncExitStack() as stack:
        stdio = await _connect(
            "stdio",
            stack,
            stdio_connection(setup.redis_url, args.mode, setup.stdio_log),
            setup.stdio_log_path,
        )
        setup.stdio_pids.extend(_stdio_server_pids(setup.redis_url))
        http = await _connect("HTTP", stack, http_connection(setup.http_url, args.mode), None)
        pids = ", ".join(map(str, setup.stdio_pids)) or "not found"
        print(
            f"MCP stdio server: pid {pids}, protocol {stdio.protocol_version}; MCP HTTP: "
            f"{setup.http_url}, protocol {http.protocol_version} (client mode {args.mode})"
        )
        sides = {
            EXECUTOR: executor_side(setup.executor),
            STDIO: mcp_side(STDIO, stdio),
            HTTP: mcp_side(HTTP, http),
        }
        figures = Figures()
        for index in range(args.runs):
            times = await measure(sides, CALLS, args.calls, args.warmup)
            figures.add(times)
            for which in CALLS:
                print(
                    f"run {index + 1}/{args.runs}  {run_line(times, which.label, SIDES)}",
                    flush=True,
                )
    return figures


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside ``exc`` if it is an exception group (nested ones too), or ``exc``."""
    inner: object = getattr(exc, "exceptions", None)
    if not isinstance(inner, tuple):
        yield exc
        return
    for item in inner:
        if isinstance(item, BaseException):
            yield from _leaves(item)


def cause(exc: BaseException) -> BaseException:
    """What ended the measuring, out of the MCP clients' task groups that wrap it: an interrupt
    first, then a failure; ``exc`` itself when it holds neither."""
    leaves = list(_leaves(exc))
    for kind in (KeyboardInterrupt, BenchError, redis.RedisError):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return exc


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, mcp {version('mcp')}; load average at start "
        f"{_load()}",
        flush=True,
    )
    with ExitStack() as stack:
        folder = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="toolpool-bench-mcp-"))
        )
        workspace = folder / "ws"
        workspace.mkdir()
        (workspace / SMALL_FILE).write_text(SMALL_TEXT)
        server = stack.enter_context(RedisServer())
        settings = Settings(
            redis_url=server.url, workspace=workspace, tools=[BashSettings(sandbox="off")]
        )
        pool = Pool()
        stack.callback(pool.stop)
        start_builtin_workers(pool, server.url, settings, WORKERS, "mcp")
        with server.client() as client:
            info: dict[str, Any] = client.info("server")
        print(
            f"pool: redis-server {info.get('redis_version')} (pid {server.pid}, unix socket), "
            f"{WORKERS} worker processes (pids {', '.join(str(p.pid) for p in pool.processes)}) "
            f"serving the built-in tools, bash sandbox off; workspace {workspace} with "
            f"{SMALL_FILE} ({len(SMALL_TEXT)} bytes), removed at the end"
        )
        # The same settings the MCP servers build from their command line.
        executor = stack.enter_context(Executor(settings=Settings(redis_url=server.url)))
        http_url, http_pid = stack.enter_context(http_server(server.url, folder / "http.log"))
        print(f"MCP HTTP server: pid {http_pid}")
        stdio_pids: list[int] = []
        stack.callback(kill_leftovers, stdio_pids)
        stdio_log = stack.enter_context((folder / "stdio.log").open("a"))
        print(
            f"calls: {', '.join(f'{c.tool} {c.arguments}' for c in CALLS)}; {args.calls} timed "
            f"rounds a run after {args.warmup} warm-up rounds, each round every call on every "
            f"side, order of sides reversed every other round; {args.runs} run(s)"
        )
        print(GOAL + "\n", flush=True)
        setup = Setup(
            args, server.url, http_url, executor, stdio_log, folder / "stdio.log", stdio_pids
        )
        try:
            figures = anyio.run(measure_all, setup)
        except BaseException as exc:
            raise cause(exc) from None
    print()
    print("\n".join(table(figures, CALLS, SIDES)))
    print(f"\nload average at end: {_load()}")
    print(verdict(figures, CALLS))


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=at_least(1), default=3, help="runs (min / median / max)")
    parser.add_argument(
        "--calls", type=at_least(1), default=200, help="timed rounds a run: calls per side and tool"
    )
    parser.add_argument(
        "--warmup", type=at_least(0), default=20, help="untimed rounds before each run"
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="how the MCP clients connect: auto (the newest protocol both speak, the SDK's "
        "default) or legacy (the initialize handshake)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when a call failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(
        lambda: run(args), (BenchError,), stopped="Redis, workers and MCP servers stopped"
    )


if __name__ == "__main__":
    sys.exit(main())
