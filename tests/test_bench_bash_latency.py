"""``benchmarks.bash_latency`` runs, prints a figure for each command, and leaves the
process's cgroup lookup as it found it."""

from __future__ import annotations

import re

import pytest

from benchmarks import bash_latency
from workers.tools import _confine


def test_the_benchmark_prints_a_figure_per_command(capsys: pytest.CaptureFixture[str]) -> None:
    found = vars(_confine)["find_cgroups"]
    assert bash_latency.main(["--runs", "1", "--pairs", "2", "--warmup", "0"]) == 0
    assert vars(_confine)["find_cgroups"] is found
    output = capsys.readouterr().out
    for name in (*bash_latency.COMMANDS, bash_latency.BACKGROUND):
        figures = r"\s+[-+]\d+\.\d+ /\s+[-+]\d+\.\d+ /\s+[-+]\d+\.\d+$"
        row = re.search(rf"^  {re.escape(name)}{figures}", output, re.M)
        assert row is not None, (name, output)


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bash_latency.main(["--pairs", "0"])
    assert "--pairs must be at least 1" in capsys.readouterr().err
