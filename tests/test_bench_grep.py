"""The grep benchmark, run with tiny counts on a small tree so it keeps working (no timings)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from benchmarks import grep as bench
from tests.support.files import write_tree
from workers.tools._ripgrep_bin import find_rg

pytestmark = pytest.mark.skipif(
    find_rg() is None or shutil.which("grep") is None, reason="no rg binary or GNU grep"
)


def test_each_pattern_gets_its_ratios_to_rg_and_grep_per_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, {f"m{i}.py": "import os\nclass FooError(Exception):\n" for i in range(30)})

    assert bench.main([str(tmp_path), "--runs", "1", "--repeat", "2"]) == 0

    out = capsys.readouterr().out
    spread = r"\d+\.\d\d/\d+\.\d\d/\d+\.\d\d"
    for case in bench.CASES:
        row = re.search(rf"^{re.escape(case.label)} .*$", out, re.MULTILINE)
        assert row is not None, out
        # min/median/max of the tool over rg, then over GNU grep, each taken per round.
        assert re.search(rf" {spread} +{spread}$", row[0]), row[0]
    classes = next(case for case in bench.CASES if case.pattern == r"class \w+Error\(")
    assert re.search(rf"^{re.escape(classes.label)} +{re.escape(classes.pattern)} +30 ", out, re.M)
