"""The sandbox benchmarks through a pool and by parts, run with tiny counts (no timings)."""

from __future__ import annotations

import os
import re

import pytest

from benchmarks import sandbox_parts, sandbox_pool
from tests.support.sandbox import require_sandbox
from workers.tools._cgroup import find_cgroups


def test_the_latency_figure_is_the_median_of_each_rounds_bash_less_both_baselines() -> None:
    found = sandbox_pool.Latency(
        bash=[130.0, 200.0, 120.0], plain=[100.0, 101.0, 100.0], trivial=[4.0, 5.0, 30.0]
    )

    # Per round 26, 94 and -10: their median, not the medians' difference (130 - 100 - 5).
    assert found.over == 26.0


def test_unknown_parts_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        sandbox_pool.main(["--only", "latency,throughput"])

    assert stopped.value.code == 2
    assert "--only takes names from latency, sessions, creates" in capsys.readouterr().err


@pytest.mark.parametrize("pause", ["-1", "121"])
def test_a_pause_out_of_range_is_refused(pause: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        sandbox_pool.main(["--only", "sessions", "--pause", pause])

    assert stopped.value.code == 2
    assert f"--pause takes 0 to 120 seconds, got {pause}" in capsys.readouterr().err


@pytest.mark.proof  # Redis, `toolpool worker` of 4 processes, three orchestrator processes
def test_a_tiny_latency_run_prints_both_figures(capsys: pytest.CaptureFixture[str]) -> None:
    require_sandbox()

    code = sandbox_pool.main(["--only", "latency", "--runs", "1", "--rounds", "1", "--warmup", "0"])

    output = capsys.readouterr().out
    assert code == 0, output
    # The figure is padded to its width: "over both  +8.22" under +10 ms.
    assert re.search(r"run 1/1 alone +bash .* over both +[+-]", output), output
    assert re.search(r"run 1/1 busy +bash .* over both +[+-]", output), output
    assert "less a trivial call's round trip, alone: " in output
    assert "less a trivial call's round trip, with 3 orchestrators: " in output


def test_a_tiny_run_by_parts_times_every_stage(capsys: pytest.CaptureFixture[str]) -> None:
    require_sandbox()
    found = find_cgroups()
    if None in (found.pids, found.memory, found.cpu):
        pytest.skip(f"the chains join all three cgroups: {found.missing}")

    # Two at once: each chain's calls start together, in threads, and all are timed.
    assert sandbox_parts.main(["--runs", "1", "--calls", "1", "--together", "2"]) == 0

    output = capsys.readouterr().out
    assert "chain, 2 at once" in output, output
    stages = ["bash", "launcher", "+ cgroup join", "bwrap", "cold chain", "made ahead"]
    if os.geteuid() == 0:
        stages.append("nsenter")
    for stage in stages:
        assert re.search(rf"^{re.escape(stage)} +[\d.]+ / ", output, re.MULTILINE), output
    assert "sandbox init going after bwrap reported the end: " in output
