"""The sandbox benchmark's measuring, run with tiny counts so it keeps working (no timings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import sandbox as bench
from executor.contract import Workspace
from workers.tools import _cgroup, _confine
from workers.tools._confine import Confinement
from workers.tools._sandbox import Availability, probe

_TINY = ["--runs", "1", "--calls", "2", "--warmup", "1", "--only", "true"]


def _row(output: str, command: str, mode: str) -> re.Match[str] | None:
    return re.search(rf"^{re.escape(command)} +{re.escape(mode)} +\S", output, re.MULTILINE)


def _removed_workspace(output: str) -> Path:
    found = re.search(r"^workspace: (\S+) \(removed at the end\)$", output, re.MULTILINE)
    assert found is not None, output
    return Path(found[1])


def test_unconfined_is_bash_without_launcher_cgroup_or_sandbox(workspace: Workspace) -> None:
    unconfined, *_ = bench.modes(sandbox=True)

    with bench.no_cgroups(), Confinement.prepare(unconfined.settings, workspace.root) as plan:
        assert plan.argv(workspace.root) == []
        assert plan.cgroup is None
    assert vars(_confine)["find_cgroups"] is _cgroup.find_cgroups


def test_each_confined_call_is_paired_with_an_unconfined_one_next_to_it() -> None:
    measured = bench.modes(sandbox=True)

    orders = [[mode.name for mode in bench.order(measured, index)] for index in range(2)]

    assert orders == [
        [bench.LIMITS, bench.UNCONFINED, bench.SANDBOX, bench.SANDBOX_ALONE],
        [bench.SANDBOX_ALONE, bench.SANDBOX, bench.UNCONFINED, bench.LIMITS],
    ]
    two = bench.modes(sandbox=False)
    assert [[m.name for m in bench.order(two, index)] for index in range(2)] == [
        [bench.LIMITS, bench.UNCONFINED],
        [bench.UNCONFINED, bench.LIMITS],
    ]


def test_overhead_is_the_median_of_paired_differences() -> None:
    times = {bench.UNCONFINED: [1.0, 10.0, 2.0], bench.SANDBOX: [3.0, 11.0, 7.0]}

    # Differences 2, 1, 5: their median, not the difference of the medians (7 - 2).
    assert bench.overhead(times, bench.SANDBOX) == 2.0


def test_a_tiny_run_reports_every_mode_and_cleans_up(capsys: pytest.CaptureFixture[str]) -> None:
    sandboxed = probe(False).bwrap is not None

    assert bench.main(_TINY) == 0

    output = capsys.readouterr().out
    assert output.startswith("command: ")
    assert bench.GOAL in output
    assert _row(output, "true", bench.UNCONFINED)
    assert _row(output, "true", bench.LIMITS)
    assert bool(_row(output, "true", bench.SANDBOX)) is sandboxed
    assert "load average at end: " in output
    assert not _removed_workspace(output).exists()
    assert vars(_confine)["find_cgroups"] is _cgroup.find_cgroups


def test_without_bubblewrap_the_sandbox_is_left_out_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = Availability(None, reason="bubblewrap (bwrap) is not installed on this worker")
    monkeypatch.setattr(bench, "probe", lambda network: missing)

    assert bench.main(_TINY) == 0

    output = capsys.readouterr().out
    assert f"sandbox: not measured: {missing.reason}\n" in output
    assert _row(output, "true", bench.LIMITS)
    assert not _row(output, "true", bench.SANDBOX)


def test_a_failing_call_ends_the_benchmark_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(bench.COMMANDS, "true", "exit 3")

    assert bench.main(_TINY) == 1

    captured = capsys.readouterr()
    assert "benchmark failed: 'exit 3' failed in mode" in captured.err
    assert not _removed_workspace(captured.out).exists()
    assert vars(_confine)["find_cgroups"] is _cgroup.find_cgroups


def test_unknown_commands_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--only", "true,ls"])

    assert stopped.value.code == 2
    assert "--only takes names from true, sleep" in capsys.readouterr().err
