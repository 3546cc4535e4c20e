"""The MCP benchmark's measuring: fake sides for the order, checks and figures (no timings),
and tiny real runs that must report every side and stop every process they started."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from benchmarks import mcp as bench
from benchmarks.sides import BenchError
from tests.support.waiting import gone

_TINY = ["--runs", "1", "--calls", "2", "--warmup", "1"]
_NAMES = (bench.EXECUTOR, bench.STDIO, bench.HTTP)


def _recording_sides(
    log: list[tuple[str, str]], answer: dict[str, str] | None = None
) -> dict[str, bench.Side]:
    """Sides that record (side, call) and answer the expected text (or ``answer[side]``)."""

    def side(name: str) -> bench.Side:
        async def call(which: bench.Call) -> str:
            log.append((name, which.label))
            return (answer or {}).get(name, which.expected)

        return call

    return {name: side(name) for name in _NAMES}


def test_the_order_of_the_sides_is_reversed_every_other_round() -> None:
    assert [bench.order(_NAMES, index) for index in range(3)] == [
        list(_NAMES),
        list(_NAMES[::-1]),
        list(_NAMES),
    ]


def test_every_call_is_made_on_every_side_and_warm_ups_are_not_kept() -> None:
    log: list[tuple[str, str]] = []

    times = anyio.run(bench.measure, _recording_sides(log), bench.CALLS, 2, 1)

    forward = [(name, which.label) for which in bench.CALLS for name in _NAMES]
    backward = [(name, which.label) for which in bench.CALLS for name in _NAMES[::-1]]
    # The warm-up round, then two timed rounds, the order of the sides alternating throughout.
    assert log == forward + backward + forward
    assert set(times) == {(which.label, name) for which in bench.CALLS for name in _NAMES}
    assert all(len(values) == 2 and min(values) >= 0 for values in times.values())


def test_a_wrong_answer_ends_the_measuring() -> None:
    log: list[tuple[str, str]] = []
    sides = _recording_sides(log, answer={bench.HTTP: "6*7 = 43"})

    with pytest.raises(BenchError, match=r"MCP HTTP: calculator answered '6\*7 = 43'"):
        anyio.run(bench.measure, sides, bench.CALLS, 3, 0)
    assert log == [(name, "calculator") for name in _NAMES]


def test_ratios_are_of_each_runs_medians_and_the_goal_is_judged_on_stdio() -> None:
    times: bench.Times = {}
    for which in bench.CALLS:
        times[(which.label, bench.EXECUTOR)] = [1.0, 2.0, 100.0]
        times[(which.label, bench.STDIO)] = [2.0, 2.8, 3.0]
        times[(which.label, bench.HTTP)] = [5.0, 6.0, 7.0]
    figures = bench.Figures()

    figures.add(times)

    assert figures.ratios[("calculator", bench.STDIO)] == [pytest.approx(1.4)]
    assert figures.ratios[("read_file", bench.HTTP)] == [pytest.approx(3.0)]
    assert figures.p90s[("calculator", bench.EXECUTOR)] == [100.0]
    assert bench.verdict(figures, bench.CALLS).startswith(f"{bench.GOAL}: met ")
    rows = bench.table(figures, bench.CALLS, _NAMES)
    assert any(re.match(r"read_file +MCP stdio .* 1\.40 / 1\.40 / 1\.40$", row) for row in rows)

    times[("read_file", bench.STDIO)] = [4.0, 4.0, 4.0]
    figures.add(times)
    # read_file over stdio: 1.4x, then 2.0x; the median of the two runs misses the goal.
    assert bench.verdict(figures, bench.CALLS) == (
        f"{bench.GOAL}: NOT met (median over runs: calculator 1.40x, read_file 1.70x)"
    )


def test_the_failure_inside_the_clients_task_groups_is_what_is_raised() -> None:
    async def failing() -> None:
        async def fail() -> None:
            raise BenchError("the call failed")

        async with anyio.create_task_group() as group:
            group.start_soon(fail)
            await anyio.sleep_forever()

    caught: list[Exception] = []
    try:
        anyio.run(failing)
    except Exception as exc:
        caught.append(exc)

    assert len(caught) == 1
    assert not isinstance(caught[0], BenchError)  # anyio wrapped it in a group
    found = bench.cause(caught[0])
    assert isinstance(found, BenchError)
    assert str(found) == "the call failed"
    plain = ValueError("plain")
    assert bench.cause(plain) is plain


# -- real runs --------------------------------------------------------------------------------


def _started(output: str) -> list[int]:
    """Every pid the benchmark said it started: Redis, workers, both MCP servers."""
    pids = [int(found) for found in re.findall(r"\bpid (\d+)", output)]
    workers = re.search(r"worker processes \(pids (\d+), (\d+)\)", output)
    assert workers is not None, output
    pids += [int(found) for found in workers.groups()]
    assert len(pids) == 5, output
    return pids


def _workspace(output: str) -> Path:
    found = re.search(r"workspace (\S+) with", output)
    assert found is not None, output
    return Path(found[1])


@pytest.mark.proof  # redis-server, two workers and two MCP server processes
def test_a_tiny_run_reports_every_side_and_stops_what_it_started(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(_TINY) == 0

    output = capsys.readouterr().out
    assert output.startswith("command: ")
    assert "load average at start" in output
    for which in bench.CALLS:
        line = re.search(rf"^run 1/1  {which.label} +(.*)$", output, re.MULTILINE)
        assert line is not None, output
        assert line[1].startswith(f"{bench.EXECUTOR} ")
        assert f"| {bench.STDIO} " in line[1]
        assert f"| {bench.HTTP} " in line[1]
        for name in _NAMES:
            assert re.search(rf"^{which.label} +{name} +\d", output, re.MULTILINE), output
    assert "load average at end: " in output
    assert re.search(rf"^{re.escape(bench.GOAL)}: (met|NOT met) \(", output, re.MULTILINE)
    assert [pid for pid in _started(output) if not gone(pid)] == []
    assert not _workspace(output).exists()


@pytest.mark.proof  # as above, with one wrong answer expected
def test_a_wrong_answer_ends_the_benchmark_with_one_line_and_stops_everything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calculator, *others = bench.CALLS
    monkeypatch.setattr(bench, "CALLS", (replace(calculator, expected="6*7 = 43"), *others))

    assert bench.main(_TINY) == 1

    captured = capsys.readouterr()
    assert "benchmark failed: " in captured.err
    assert "calculator answered '6*7 = 42', expected '6*7 = 43'" in captured.err
    assert "Traceback" not in captured.err
    assert [pid for pid in _started(captured.out) if not gone(pid)] == []
    assert not _workspace(captured.out).exists()
