"""The background-process benchmark's measuring: its helpers on known input, and a tiny real
run that prints every figure and leaves no process or folder behind (no timings checked)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import processes as bench
from tests.support.waiting import wait_for

_TINY = ["--runs", "1", "--calls", "2", "--warmup", "1", "--sessions", "2"]
_TINY += ["--per-session", "2", "--idle", "1"]
_NUMBER = r"[+-]?\d+(?:\.\d+)?"
_SPREAD = rf"{_NUMBER} / {_NUMBER} / {_NUMBER}"


def test_overheads_are_the_median_of_paired_differences() -> None:
    """Differences 2, 1, 5 have median 2; the difference of the medians (7 - 2 = 5) would
    show that the rounds were not paired."""
    assert bench.paired([3.0, 11.0, 7.0], [1.0, 10.0, 2.0]) == 2.0


def test_every_other_round_runs_in_reverse_order() -> None:
    """A fixed order would let one kind of call always follow the same other one."""
    kinds = ["a", "b", "c"]
    assert [bench.order(kinds, i) for i in range(3)] == [kinds, kinds[::-1], kinds]


def test_a_process_tree_is_read_from_proc() -> None:
    """The benchmark sums a keeper's tree: a child or grandchild missed, or a process of
    another tree counted, would be seen here as a wrong set of pids."""
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 61 & wait"], stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(bench.descendants(shell.pid)) == 2, "the shell's two sleeps")
        found = [bench.read_proc(pid) for pid in bench.descendants(shell.pid)]
        assert sorted(p.name for p in found if p) == ["sleep", "sleep"]
        assert all(p.ppid == shell.pid and p.rss_kb > 0 for p in found if p)
    finally:
        shell.kill()
        shell.wait()
    me = bench.read_proc(os.getpid())
    assert me is not None
    assert me.ppid == os.getppid()
    assert 0 < me.pss_kb <= me.rss_kb
    assert me.cpu_ns > 0
    assert bench.read_proc(2**22 + 7) is None  # above any pid_max: gone


def test_a_page_line_is_read_from_an_answer() -> None:
    answer = "p1 is running (pid 9, for 1.0 s).\noutput bytes 0-2500 of 10002:\nxxx"
    assert bench._page_of(answer) == (0, 2500, 10002)
    assert bench._page_of("no output past byte 0 (of 0).") == (0, 0, 0)


def test_more_than_a_session_may_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--per-session", "9"])
    assert stopped.value.code == 2
    assert "a session runs at most 8" in capsys.readouterr().err


def _mentions(folder: Path) -> list[int]:
    """Processes whose command line or environment names ``folder``."""
    mark = str(folder).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            except OSError:
                continue
            if mark in seen:
                found.append(int(entry.name))
    return found


@pytest.mark.proof  # Redis, two workers, keepers in sandboxes
def test_a_tiny_run_prints_every_figure_and_leaves_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Oracle: a missing figure row, a figure that is not three numbers, a keeper or network
    holder still running (``daemons left``, or a process naming the folder), or the folder
    left on disk would each fail here."""
    assert bench.main(_TINY) == 0, capsys.readouterr().err

    output = capsys.readouterr().out
    assert output.startswith("command: ")
    rows = [
        bench.TRIVIAL,
        bench.LISTING,
        bench.BASH,
        bench.START,
        bench.PY_BARE,
        bench.PY_KEEPER,
        "process_start - calculator",
        "process_start - bash true",
        bench.OUTPUT,
        "process_output - calculator",
        "keeper RSS, MiB",
        "keeper PSS, MiB",
        "sandbox's processes RSS, MiB",
        "session's network holder RSS, MiB",
        "keeper CPU over 1 s idle, ms",
        "keeper CPU idle, % of a core",
        "Redis used_memory delta / process, B",
        "Redis record (MEMORY USAGE) / process, B",
    ]
    for row in rows:
        assert re.search(rf"^  {re.escape(row)} +{_SPREAD}$", output, re.MULTILINE), (row, output)
    assert "4 of them: 2 session(s) x 2" in output, output
    assert "daemons left after the sessions were deleted: none\n" in output, output
    found = re.search(r"^folder: (\S+) \(removed at the end\)$", output, re.MULTILINE)
    assert found is not None, output
    folder = Path(found[1])
    assert not folder.exists()
    assert _mentions(folder) == []
