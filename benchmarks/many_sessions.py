"""A thousand sessions on one host: create time, Redis memory per idle session, 200 agents at work.

Usage: ``python -m benchmarks.many_sessions [--sessions 1000] [--agents 200] [--workers 8]
[--turns 3] [--runs 3] [--quick] [--plot PATH]``. The figure (default
``docs/figures-many-sessions.png``; none with ``--quick`` unless ``--plot`` is given) needs
matplotlib; without it the figures are printed only.

On a private redis-server, each run starts ``toolpool worker --workers W --sessions-root DIR
--host HOST`` as users do (a fresh host each run, so its sessions and catalog are its own;
stopped by its PID), then:

1. ``create``: ``--sessions`` sessions, one after another, through ``Sessions.create``, by
   turns leaving the host to it to pick (the default: it reads every session's record to
   find the least loaded host) and giving it; the time of each, and Redis's memory every
   tenth of the way.
2. ``memory``: once the workers are idle and Redis's memory has settled, ``used_memory``
   after the creates less before, over the sessions (less the connections' buffers, which
   come and go); beside it ``MEMORY USAGE`` of each session's keys by family
   (``benchmarks.session_memory``), and RQ's records of the create jobs.
3. ``load``: ``--agents`` agents, a thread each with an Executor bound to its own session,
   run turns of write_file, read_file + grep, bash ``true`` (``benchmarks.agent_turns``):
   first one turn each, all at once (a session's first bash call starts its network holder),
   then ``--turns`` turns each: calls/s, and each turn's latency. Beside them, in the same
   run, W agents (one a worker) make as many calls in their own sessions: what the same
   workers do with far fewer sessions. Which of the two goes first alternates run by run.
4. ``after use``: a used session's keys by family again, and the processes it keeps on the
   host (its network holder).
5. ``delete``: every session, one after another, through ``Sessions.delete``.

Over ``--runs`` runs: min / median / max of each run's figure.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from benchmarks import session_memory as memory
from benchmarks.agent_turns import percentile, run_agents
from benchmarks.entry import at_least, run_bench
from benchmarks.many_sessions_report import (
    Memory,
    Runs,
    Timed,
    create_line,
    families_line,
    load_line,
    memory_line,
    report,
)
from benchmarks.session_host import PATIENCE_S, HostBench
from benchmarks.sides import BenchError
from executor import SessionError
from workers._embedded_redis import RedisServer
from workers.tools._sandbox import probe

DEFAULT_PLOT = Path(__file__).resolve().parents[1] / "docs" / "figures-many-sessions.png"
# Where Redis's memory is read while sessions are made: every tenth of the way.
_MEMORY_STEPS = 10


# -- one run ---------------------------------------------------------------------------------


def create(bench: HostBench, names: Sequence[str]) -> Timed:
    """Make ``names`` one after another, by turns leaving the host to ``Sessions.create``
    to pick (as ``toolpool session create NAME`` does; the only live host is this run's)
    and giving it; each one's time and Redis's memory on the way (``used_memory`` less the
    connections' buffers)."""
    before = memory.held_memory(bench.client)
    step = max(1, math.ceil(len(names) / _MEMORY_STEPS))
    times: list[float] = []
    picked = [made % 2 == 0 for made in range(len(names))]
    grown = [(0, 0)]
    started = time.perf_counter()
    for made, (name, pick) in enumerate(zip(names, picked, strict=True), start=1):
        began = time.perf_counter()
        bench.sessions.create(name, host=None if pick else bench.host, timeout=PATIENCE_S)
        times.append(time.perf_counter() - began)
        if made % step == 0 or made == len(names):
            grown.append((made, memory.held_memory(bench.client) - before))
    return Timed(tuple(times), time.perf_counter() - started, tuple(grown), tuple(picked))


def delete(bench: HostBench, names: Sequence[str]) -> Timed:
    """Delete ``names`` one after another (refused if a call of one still runs)."""
    times: list[float] = []
    started = time.perf_counter()
    for name in names:
        began = time.perf_counter()
        if not bench.sessions.delete(name, timeout=PATIENCE_S):
            raise BenchError(f"no live worker removed session {name}'s folder")
        times.append(time.perf_counter() - began)
    return Timed(tuple(times), time.perf_counter() - started)


def measure_idle(bench: HostBench, names: Sequence[str], before: memory.Snapshot) -> Memory:
    """Redis memory of the idle sessions ``names``, just made (``before``: as it was)."""
    bench.wait_idle()
    memory.settle(bench.client)
    after = memory.snapshot(bench.client, bench.keys, bench.host_queue)
    families = memory.session_families(bench.client, bench.keys, names)
    families[memory.NAME] = after.index - before.index
    families[memory.RQ_RECORDS] = after.rq_records - before.rq_records
    held = (after.used - after.clients) - (before.used - before.clients)
    return Memory(len(names), held, after.clients - before.clients, families)


def one_run(bench: HostBench, index: int, runs: Runs) -> None:
    """One run on a fresh host: create, memory, load, memory after use, delete."""
    args = bench.args
    label = f"run {index + 1}/{args.runs}"
    with bench.serving(index + 1):
        # Untimed: Redis's first-use costs of the host (its queue, RQ's registries) stay out.
        warm = f"r{index + 1}-warm"
        bench.sessions.create(warm, host=bench.host, timeout=PATIENCE_S)
        bench.wait_idle()
        memory.settle(bench.client)
        names = [f"r{index + 1}-s{number}" for number in range(args.sessions)]
        before = memory.snapshot(bench.client, bench.keys, bench.host_queue)
        made = create(bench, names)
        runs.creates.append(made)
        print(f"{label} create: {create_line(made)}", flush=True)
        idle = measure_idle(bench, names, before)
        runs.idle.append(idle)
        print(f"{label} memory: {memory_line(idle)}", flush=True)

        many, few = names[: args.agents], names[-args.workers :]
        # A session's first bash call starts its network holder: the first turn, apart.
        runs.first.append(run_agents(bench.settings, many, 1, f"r{index + 1}-first"))
        print(f"{label} first turn: {load_line(runs.first[-1], args.workers)}", flush=True)
        unused = [name for name in few if name not in many]
        if unused:
            run_agents(bench.settings, unused, 1, f"r{index + 1}-warm")
        few_turns = math.ceil(args.turns * args.agents / args.workers)
        sides = [("many", runs.many, many, args.turns), ("few", runs.few, few, few_turns)]
        for side, done, sessions, turns in sides if index % 2 == 0 else sides[::-1]:
            done.append(run_agents(bench.settings, sessions, turns, f"r{index + 1}-{side}"))
            print(f"{label} load: {load_line(done[-1], args.workers)}", flush=True)

        bench.wait_idle()
        used_names = [name for name in many if name not in few] or many
        families = memory.session_families(bench.client, bench.keys, used_names)
        runs.used.append(Memory(len(used_names), 0, 0, families))
        holders = bench.used_holders(used_names)
        runs.holders.append(holders)
        print(
            f"{label} after use: {families_line(runs.used[-1])}; network holders "
            f"{holders.alive} of {holders.sessions} sessions, PSS "
            f"{holders.pss_kb / max(1, holders.alive) / 1024:.2f} MiB each",
            flush=True,
        )
        gone = delete(bench, names)
        bench.sessions.delete(warm, timeout=PATIENCE_S)
        runs.deletes.append(gone)
        print(
            f"{label} delete: {len(names)} sessions in {gone.total_s:.1f} s; each p50 "
            f"{percentile(gone.times_s, 0.5) * 1000:.1f} ms, p99 "
            f"{percentile(gone.times_s, 0.99) * 1000:.1f} ms",
            flush=True,
        )


# -- the command -----------------------------------------------------------------------------


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=at_least(2), help="sessions a run (default 1000)")
    parser.add_argument("--agents", type=at_least(1), help="agents, a session each (200)")
    parser.add_argument("--workers", type=at_least(1), help="worker processes (8)")
    parser.add_argument("--turns", type=at_least(1), help="turns an agent, after its first (3)")
    parser.add_argument("--runs", type=at_least(1), help="runs (min / median / max; 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="defaults of 100 sessions, 20 agents, 4 workers, 2 turns, 1 run; no figure",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        help=f"where the PNG goes (default {DEFAULT_PLOT.relative_to(DEFAULT_PLOT.parents[1])}; "
        "none with --quick, so a quick run leaves the full run's figure alone)",
    )
    args = parser.parse_args(argv)
    defaults = (100, 20, 4, 2, 1) if args.quick else (1000, 200, 8, 3, 3)
    for name, default in zip(
        ("sessions", "agents", "workers", "turns", "runs"), defaults, strict=True
    ):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.agents > args.sessions:
        parser.error(f"--agents ({args.agents}) needs as many --sessions (got {args.sessions})")
    if args.workers > args.sessions:
        parser.error(f"--workers ({args.workers}) needs as many --sessions (got {args.sessions})")
    if args.plot is None and not args.quick:
        args.plot = DEFAULT_PLOT
    return args


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def run(args: argparse.Namespace) -> None:
    """The whole benchmark, printed as it goes."""
    from benchmarks.many_sessions_plot import plot

    print(f"command: {shlex.join(sys.orig_argv)}", flush=True)
    found = probe(False)
    sandbox = found.version or found.bwrap if found.bwrap else f"none ({found.reason})"
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, redis-py {redis.__version__}; load average at start "
        f"{_load()}\n{args.sessions} sessions, {args.agents} agents, {args.workers} workers "
        f"(`toolpool worker`), {args.turns} turn(s) an agent, {args.runs} run(s); bash's "
        f"sandbox: {sandbox}",
        flush=True,
    )
    folder = Path(tempfile.mkdtemp(prefix="toolpool-bench-many-sessions-"))
    print(f"folder: {folder} (removed at the end)", flush=True)
    runs = Runs()
    try:
        with RedisServer() as server:
            bench = HostBench(server=server, folder=folder, args=args)
            info: dict[str, object] = bench.client.info("server")
            print(
                f"redis-server {info.get('redis_version')} (pid {server.pid}), on its unix "
                f"socket {server.socket_path}",
                flush=True,
            )
            try:
                for index in range(args.runs):
                    one_run(bench, index, runs)
            finally:
                bench.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(args, runs)
    if args.plot is None:
        print("\nno figure (--quick; --plot PATH draws one)")
    else:
        print(f"\n{plot(args.plot, runs.creates, runs.first, runs.many, runs.few, args.workers)}")
    print(f"\nload average at end: {_load()}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit code 0 when done, 1 when the benchmark failed, 130 when interrupted."""
    args = _options(argv)
    return run_bench(
        lambda: run(args),
        (BenchError, SessionError),
        stopped="sessions, workers and Redis stopped",
    )


if __name__ == "__main__":
    sys.exit(main())
