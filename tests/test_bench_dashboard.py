"""The dashboard benchmark's measuring: the viewers' counting, the CPU reading, the ratios and
the goal on made-up windows (no timings), and tiny real runs that must prove the viewers live
and stop every process they started."""

from __future__ import annotations

import argparse
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import dashboard as bench
from benchmarks.sides import BenchError
from benchmarks.viewers import Tally
from tests.support.waiting import PATIENCE_S, gone

_TINY = ["--runs", "1", "--seconds", "2", "--rate", "20", "--viewers", "2", "--workers", "1"]


def test_the_viewers_tally_counts_each_message_once_even_cut_between_reads() -> None:
    stream = (
        b'event: state\ndata: {"workers": []}\n\n'
        b'event: event\ndata: {"event": "call_started"}\n\n'
        b": keep-alive\n\n"
        b'event: event\ndata: {"event": "call_finished"}\n\n'
        b'event: trouble\ndata: {"error": "Redis: gone"}\n\n'
    )
    for size in (1, 5, 12, 13, 14, len(stream)):
        tally = Tally()
        for first in range(0, len(stream), size):
            tally.feed(stream[first : first + size])
        assert (tally.states, tally.events) == (1, 2), size


def test_cpu_ticks_grow_with_the_cpu_a_process_uses() -> None:
    before = bench.cpu_ticks(os.getpid())
    deadline = time.monotonic() + PATIENCE_S
    while bench.cpu_ticks(os.getpid()) == before:  # busy: the ticks are ours
        assert time.monotonic() < deadline, "no CPU tick counted"
    busy, total = bench.machine_ticks()
    assert 0 < busy <= total


def _sample(
    at: float, ticks: dict[str, int], tallies: list[tuple[int, int]], events: int
) -> bench.Sample:
    return bench.Sample(at=at, ticks=ticks, machine=(0, 100), tallies=tallies, events=events)


def _window(side: str, latencies: list[float], completed: int = 100) -> bench.Window:
    first = _sample(0.0, {}, [], 0)
    return bench.Window(side, 1.0, completed, latencies, first, replace(first, at=1.0))


def test_ratios_are_of_each_runs_windows_and_the_goal_needs_both_within_five_percent() -> None:
    args = argparse.Namespace(viewers=10, rate=100)
    figures = bench.Figures()
    figures.add(_window(bench.WITHOUT, [1.0, 2.0, 3.0]), _window(bench.WITH, [1.0, 2.08, 9.0]))

    assert figures.ratios(lambda w: w.p50) == [pytest.approx(1.04)]
    assert figures.ratios(lambda w: w.p90) == [pytest.approx(3.0)]
    assert bench.verdict(figures, args) == (
        f"{bench.goal(args)}: met (calls/s 1.000, p50 latency 1.040)"
    )
    rows = bench.table(figures)
    assert re.match(r"with / without +1\.000 / 1\.000 / 1\.000 +1\.040 / ", rows[-1]), rows

    figures.add(_window(bench.WITHOUT, [2.0]), _window(bench.WITH, [2.0], completed=92))
    # Medians over runs: p50 of 1.04 and 1.00, calls/s of 1.00 and 0.92.
    assert bench.verdict(figures, args).endswith(": met (calls/s 0.960, p50 latency 1.020)")
    figures.add(_window(bench.WITHOUT, [2.0]), _window(bench.WITH, [2.2]))
    assert bench.verdict(figures, args).endswith(": met (calls/s 1.000, p50 latency 1.040)")
    figures.add(_window(bench.WITHOUT, [2.0]), _window(bench.WITH, [2.2]))
    assert bench.verdict(figures, args).endswith(": NOT met (calls/s 1.000, p50 latency 1.070)")
    slower = bench.Figures()
    slower.add(_window(bench.WITHOUT, [2.0]), _window(bench.WITH, [2.0], completed=94))
    assert bench.verdict(slower, args).endswith(": NOT met (calls/s 0.940, p50 latency 1.000)")
    assert bench.order(0) == [bench.WITHOUT, bench.WITH]
    assert bench.order(1) == [bench.WITH, bench.WITHOUT]


def test_a_viewer_that_got_nothing_in_the_window_is_not_live() -> None:
    ticks = {"dashboard": 0, "viewers": 0}
    first = _sample(0.0, ticks, [(3, 50), (3, 50)], 1000)
    live = bench.Window(
        bench.WITH, 1.0, 10, [1.0], first, _sample(1.0, ticks, [(4, 90), (4, 88)], 1040)
    )
    bench.check_live(live)
    assert live.received() == [(1, 40), (1, 38)]

    stalled = replace(live, last=_sample(1.0, ticks, [(4, 90), (4, 50)], 1040))
    with pytest.raises(BenchError, match=r"viewer 1 got 1 state and 0 event messages .* 40 events"):
        bench.check_live(stalled)


# -- real runs --------------------------------------------------------------------------------


def _started(output: str) -> list[int]:
    """Every pid the benchmark said it started: Redis, the workers, dashboard and viewers."""
    pids = [int(found) for found in re.findall(r"\bpid (\d+)", output)]
    workers = re.search(r"worker processes \(pids ([\d, ]+)\)", output)
    assert workers is not None, output
    pids += [int(found) for found in workers[1].split(", ")]
    return pids


def _workspace(output: str) -> Path:
    found = re.search(r"workspace (\S+), removed", output)
    assert found is not None, output
    return Path(found[1])


@pytest.mark.proof  # redis-server, a worker, the dashboard and the viewers' process
def test_a_tiny_run_reports_both_sides_with_live_viewers_and_stops_what_it_started(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(_TINY) == 0

    output = capsys.readouterr().out
    assert output.startswith("command: ")
    assert "load average at start" in output
    assert re.search(r"^warm-up +[\d.]+ calls/s .*\nCPU, .*\(not counted\)$", output, re.MULTILINE)
    for side in (bench.WITHOUT, bench.WITH):
        found = re.search(
            rf"^run 1/1  {side} +[\d.]+ calls/s +p50 +[\d.]+ ms +p90 +[\d.]+ ms\n"
            r" +CPU, % of one core: (.*); the machine [\d.]+ % busy",
            output,
            re.MULTILINE,
        )
        assert found is not None, output
        groups = ["load (this process)", "redis", "workers"]
        groups += ["dashboard", "viewers"] if side == bench.WITH else []
        assert re.fullmatch(", ".join(rf"{re.escape(g)} [\d.]+" for g in groups), found[1])
    watched = re.search(
        r"^ +viewers: each of 2 got (\d+)-\d+ state and (\d+)-\d+ event messages, "
        r"the pool wrote (\d+) events$",
        output,
        re.MULTILINE,
    )
    assert watched is not None, output
    # check_live held every viewer to an event in the window, the pool having written some.
    assert int(watched[2]) > 0
    assert int(watched[3]) > 0
    assert re.search(r"^run 1/1  with / without +[\d.]+x calls/s", output, re.MULTILINE)
    for side in (bench.WITHOUT, bench.WITH, "with / without"):
        assert re.search(rf"^{side} +[\d.]+ / [\d.]+ / [\d.]+ ", output, re.MULTILINE), output
    assert "load average at end: " in output
    assert re.search(
        r"^goal: the dashboard and its 2 viewers slow a pool running 20 calls/s .*: "
        r"(met|NOT met) \(",
        output,
        re.MULTILINE,
    )
    pids = _started(output)
    assert len(pids) == 4, output  # Redis, a worker, the dashboard, the viewers' process
    assert [pid for pid in pids if not gone(pid)] == []
    assert not _workspace(output).exists()


@pytest.mark.proof  # as above, failing while the dashboard and its viewers run
def test_a_failure_beside_the_dashboard_is_one_line_and_stops_everything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = bench.Probe.sample

    def failing(self: bench.Probe) -> bench.Sample:
        if self.viewers is not None:
            raise BenchError("the probe broke")
        return sample(self)

    monkeypatch.setattr(bench.Probe, "sample", failing)

    assert bench.main(_TINY) == 1

    captured = capsys.readouterr()
    assert "benchmark failed: the probe broke" in captured.err
    assert "Traceback" not in captured.err
    assert "(dashboard pid " in captured.out
    assert [pid for pid in _started(captured.out) if not gone(pid)] == []
    assert not _workspace(captured.out).exists()


@pytest.mark.proof  # redis-server and a worker
def test_a_wrong_answer_ends_the_benchmark_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calculator, *others = bench.CALLS
    monkeypatch.setattr(bench, "CALLS", (replace(calculator, expected="6*7 = 43"), *others))

    assert bench.main(_TINY) == 1

    captured = capsys.readouterr()
    assert "benchmark failed: warm-up: calculator answered '6*7 = 42', expected '6*7 = 43'" in (
        captured.err
    )
    assert "Traceback" not in captured.err
    assert [pid for pid in _started(captured.out) if not gone(pid)] == []
    assert not _workspace(captured.out).exists()
