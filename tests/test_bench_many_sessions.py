"""The many-sessions benchmark's measuring: its helpers on known input, and a tiny real run
that prints every figure, draws its plot and leaves no process or folder behind (no timings
checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import agent_turns
from benchmarks import many_sessions as bench
from benchmarks.many_sessions_plot import Bin, create_bins
from benchmarks.many_sessions_report import Timed
from executor import ToolResult, ToolStatus
from tests.support.waiting import gone

_TINY = ["--sessions", "5", "--agents", "3", "--workers", "2", "--runs", "1", "--turns", "1"]
_NUMBER = r"[+-]?\d+(?:\.\d+)?"
_SPREAD = rf"{_NUMBER} / {_NUMBER} / {_NUMBER}"


def test_a_percentile_is_the_nearest_rank() -> None:
    assert agent_turns.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    hundred = [float(value) for value in range(1, 101)]
    assert agent_turns.percentile(hundred, 0.99) == 99.0
    assert agent_turns.percentile(hundred, 1.0) == 100.0
    assert agent_turns.percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        agent_turns.percentile([], 0.5)


def test_a_turn_writes_then_reads_and_greps_then_runs_bash_with_ids_of_its_own() -> None:
    """The order is what makes it three batches (a write, two reads together, a bash); ids
    shared between two turns would be refused by the pool."""
    first, second = agent_turns.turn_calls("a1", 0), agent_turns.turn_calls("a1", 1)
    assert [call["name"] for call in first] == ["write_file", "read_file", "grep", "bash"]
    assert len(first) == agent_turns.CALLS_A_TURN
    ids = [call["id"] for call in first + second]
    assert len(set(ids)) == len(ids)
    assert first[0]["arguments"]["content"] != second[0]["arguments"]["content"]
    assert first[0]["arguments"]["path"] == first[1]["arguments"]["path"]


def _result(name: str, status: ToolStatus, content: str) -> ToolResult:
    return ToolResult(call_id=f"c-{name}", name=name, status=status, content=content)


def test_a_failure_is_an_error_result_or_a_bash_that_did_not_exit_0() -> None:
    ok_read = _result("read_file", ToolStatus.OK, "exit code: 1 is only text in a file")
    ok_bash = _result("bash", ToolStatus.OK, "exit code: 0\n")
    bad_bash = _result("bash", ToolStatus.OK, "exit code: 1\nfalse")
    error = _result("grep", ToolStatus.ERROR, "Invalid pattern")
    assert agent_turns.failures([ok_read, ok_bash]) == []
    assert agent_turns.failures([ok_read, bad_bash, error, ok_bash]) == [bad_bash, error]


def test_create_time_is_binned_by_sessions_made_over_every_run_and_by_how_the_host_came() -> None:
    """Two runs of 4 creates (picked, given, picked, given), memory read after 2 and 4: each
    bin takes both runs' creates in it, apart by how the host came, and the median of the
    runs' memory at its end."""
    picked = (True, False, True, False)
    runs = [
        Timed((0.001, 0.002, 0.010, 0.020), 1.0, ((0, 0), (2, 2**20), (4, 2 * 2**20)), picked),
        Timed((0.003, 0.004, 0.030, 0.040), 1.0, ((0, 0), (2, 3 * 2**20), (4, 4 * 2**20)), picked),
    ]
    assert runs[0].of(True) == [0.001, 0.010]
    assert runs[1].of(False, 2, 4) == [0.040]
    first, second = create_bins(runs)
    # Bin 1: picked 1 and 3 ms, given 2 and 4 ms (nearest rank: p50 the first of two, p99
    # the second); memory 1 and 3 MiB.
    assert first == Bin(2, 1.0, 3.0, 2.0, 4.0, 2.0)
    assert second == Bin(4, 10.0, 30.0, 20.0, 40.0, 3.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sessions", "5", "--agents", "6"], "--agents (6) needs as many --sessions (got 5)"),
        (["--sessions", "5", "--agents", "2", "--workers", "8"], "--workers (8) needs as many"),
        (["--runs", "0"], "must be at least 1"),
        (["--sessions", "1"], "must be at least 2"),
    ],
)
def test_options_that_cannot_be_measured_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench.main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_quick_is_small_and_draws_no_figure_unless_asked() -> None:
    args = bench._options(["--quick"])
    assert (args.sessions, args.agents, args.workers, args.runs) == (100, 20, 4, 1)
    assert args.plot is None
    full = bench._options([])
    assert (full.sessions, full.agents, full.workers, full.runs) == (1000, 200, 8, 3)
    assert full.plot == bench.DEFAULT_PLOT
    assert bench._options(["--quick", "--sessions", "70"]).sessions == 70


def _mentions(mark: str) -> list[int]:
    """Processes whose command line or environment names ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            except OSError:
                continue
            if mark.encode() in seen:
                found.append(int(entry.name))
    return found


@pytest.mark.proof  # redis-server, `toolpool worker` with two processes, sandboxed bash
def test_a_tiny_run_prints_every_figure_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Oracle: a missing figure row, a figure that is not three numbers, a failed call, the
    worker, Redis or a session's network holder still running, or the folder left on disk
    would each fail here."""
    figure = tmp_path / "many.png"
    assert bench.main([*_TINY, "--plot", str(figure)]) == 0, capsys.readouterr().err

    output = capsys.readouterr().out
    assert output.startswith("command: ")
    for step in ("create", "memory", "first turn", "load", "load", "after use", "delete"):
        assert f"run 1/1 {step}: " in output, (step, output)
    rows = [
        "host picked (the default), p50, ms",
        "host picked (the default), p99, ms",
        "host given, p50, ms",
        "host given, p99, ms",
        "a session, p50, ms",  # deletes
        "a session, p99, ms",
        "all 5, s",
        "used_memory after - before, less connections' buffers",
        "record (HASH session:<name>)",
        "calls list (ZSET session:<name>:calls)",
        "lock scope ({lock:session.<name>}:*)",
        "name in the sessions SET",
        "RQ's records of the create jobs (none kept by default)",
        "elsewhere (the first row less the keys above)",
        "(connections' buffers moved meanwhile, left out)",
        "network holders live, per session",
        "calls/s",
        "a turn, p50, ms",
        "a turn, p99, ms",
        "calls/s, 3 agents / 2 agents (per run)",
    ]
    for row in rows:
        assert re.search(rf"^ +{re.escape(row)} +{_SPREAD}$", output, re.MULTILINE), (row, output)
    assert re.findall(rf"^  failed calls +({_SPREAD})$", output, re.MULTILINE) == ["0 / 0 / 0"] * 3
    # A fresh session's record is there whatever the machine: it cannot weigh nothing.
    record = re.search(r"^    record \(HASH session:<name>\) +(\d+) /", output, re.MULTILINE)
    assert record is not None, output
    assert int(record[1]) > 0, output
    assert "(3 sessions)" in output  # the agents' sessions, measured again after use
    if "matplotlib is not installed" not in output:
        assert f"figure written to {figure}" in output
        assert figure.stat().st_size > 0

    redis = re.search(r"\(pid (\d+)\), on its unix socket (\S+)", output)
    worker = re.search(r"toolpool worker \(pid (\d+)\) for host (\S+)", output)
    folder = re.search(r"^folder: (\S+) \(removed at the end\)$", output, re.MULTILINE)
    assert redis is not None, output
    assert worker is not None, output
    assert folder is not None, output
    assert gone(int(redis[1]))
    assert gone(int(worker[1]))
    # The pool's processes have the Redis URL in their environment; network holders and the
    # worker name the folder.
    assert _mentions(str(Path(redis[2]).parent)) == []
    assert _mentions(folder[1]) == []
    assert not Path(folder[1]).exists()
