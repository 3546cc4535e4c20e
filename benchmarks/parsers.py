"""hiredis against redis-py's own Python parser, side by side in one run of ``benchmarks.calls``.

Two benches share the Redis, each with its own queues and one worker a side: one whose
processes make every connection with redis-py's pure-Python RESP parser (the connection's
``parser_class``, forced through ``counting.use_parser``), one with redis-py's default, which
is hiredis when it is installed. This process switches the parser before each run of either,
so every connection a bench makes is made under its own choice; the parsers that the counted
round trips actually used are printed. Runs alternate, medians of ``repeat``.
"""

from __future__ import annotations

import argparse
import statistics
from contextlib import ExitStack

from benchmarks import counting
from benchmarks.sides import Bench, BenchError
from executor import Settings
from workers._embedded_redis import RedisServer

_LABELS = {counting.PYTHON_PARSER: "Python parser", counting.DEFAULT_PARSER: "hiredis"}


def _pct50(values: list[float]) -> float:
    return statistics.median(values)


def measure_parsers(
    report: Bench, server: RedisServer, settings: Settings, args: argparse.Namespace
) -> None:
    """Print round trip p50 and burst calls/s of both sides with each parser."""
    if not counting.hiredis_available():
        report.out("  hiredis is not installed (pip install hiredis): nothing to compare")
        return
    counting.install()
    calls, samples = min(args.calls, 1000), min(args.samples, 100)
    figures: dict[str, dict[str, list[float]]] = {
        mode: {"tool rt": [], "raw rt": [], "tool burst": [], "raw burst": []} for mode in _LABELS
    }
    seen: dict[str, tuple[set[str], set[str]]] = {}
    with ExitStack() as stack:
        benches: dict[str, Bench] = {}
        for mode in _LABELS:
            counting.use_parser(mode)
            own = settings.with_changes(queue=f"parser-{mode}")
            bench = Bench(
                server=server,
                settings=own,
                args=args,
                label=f"-{mode}",
                raw_queue_name=f"bench-raw-{mode}",
            )
            stack.callback(bench.close)
            stack.enter_context(bench.workers(1, raw=True, parser=mode))
            benches[mode] = bench
        for index in range(args.repeat + 1):  # the first round warms up, not counted
            order = list(_LABELS) if index % 2 == 0 else list(_LABELS)[::-1]
            for mode in order:
                counting.use_parser(mode)
                counting.parsers_seen(reset=True)
                bench, into = benches[mode], figures[mode]
                tool_trips = [bench.toolpool_round_trip(True) for _ in range(samples)]
                raw_trips = [bench.raw_round_trip(True) for _ in range(samples)]
                bursts = (bench.toolpool_burst(calls), bench.raw_burst(calls))
                failed = sum(not ok for *_, ok in tool_trips + raw_trips)
                failed += sum(burst.failed for burst in bursts)
                if failed:
                    raise BenchError(f"{failed} calls failed with the {_LABELS[mode]}")
                tool_rt = [total for _, total, _ in tool_trips]
                raw_rt = [total for _, total, _ in raw_trips]
                tool_burst, raw_burst = (burst.rate for burst in bursts)
                if index == 0:
                    continue
                into["tool rt"].append(_pct50(tool_rt))
                into["raw rt"].append(_pct50(raw_rt))
                into["tool burst"].append(tool_burst)
                into["raw burst"].append(raw_burst)
                names = sorted(bench.names["tool"] | bench.names["raw"])
                counting.snapshot(bench.client, names)  # refreshes the parsers they report
                seen[mode] = (counting.parsers_seen(), counting.worker_parsers(bench.client, names))
        counting.use_parser(counting.DEFAULT_PARSER)
    medians = {mode: {k: statistics.median(v) for k, v in f.items()} for mode, f in figures.items()}
    report.out(
        f"  {'':<15}{'round trip p50, toolpool / raw RQ':>36}"
        f"{'burst calls/s, toolpool / raw RQ':>36}"
    )
    for mode, label in _LABELS.items():
        m = medians[mode]
        report.out(
            f"  {label:<15}{m['tool rt'] * 1e3:>26.2f} / {m['raw rt'] * 1e3:.2f} ms"
            f"{m['tool burst']:>26.0f} / {m['raw burst']:.0f}"
        )
    py, hi = medians[counting.PYTHON_PARSER], medians[counting.DEFAULT_PARSER]

    def gain(key: str, lower_is_better: bool) -> str:
        ratio = py[key] / hi[key] if lower_is_better else hi[key] / py[key]
        return f"{(ratio - 1) * 100:+.0f}%"

    report.out(
        f"  {'hiredis gain':<15}{gain('tool rt', True):>26} / {gain('raw rt', True)}"
        f"{gain('tool burst', False):>29} / {gain('raw burst', False)}"
    )
    for mode, (client, workers) in seen.items():
        report.out(
            f"  {_LABELS[mode]}: parsers used: client {', '.join(sorted(client))}; "
            f"workers {', '.join(sorted(workers))}"
        )
    report.out(
        f"  ({samples} round trips and a burst of {calls} calls a side per run, "
        f"medians of {args.repeat} run(s), alternating; + is hiredis faster)"
    )
    report.summary.append(
        f"hiredis vs Python parser: toolpool round trip p50 {hi['tool rt'] * 1e3:.2f} vs "
        f"{py['tool rt'] * 1e3:.2f} ms, burst {hi['tool burst']:.0f} vs "
        f"{py['tool burst']:.0f} calls/s; raw RQ burst {hi['raw burst']:.0f} vs "
        f"{py['raw burst']:.0f} calls/s"
    )
