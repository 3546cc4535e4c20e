"""A turn's timeline SVG, checked by its structure: lanes, bars, modes, batches, overlap.

A known turn runs on real workers: two slow reads that run together, then a lone write. Its
SVG (``toolpool timeline``) must have a lane per worker, a bar per call in its worker's lane,
the reads shared and overlapping, the write exclusive and after both, and the second batch
marked where it begins. Geometry and event times must agree.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from executor import Executor, Settings
from executor._timeline import Bar, label_width, render_svg, turn_bars
from executor.cli import main
from executor.wire import Event
from tests.support.procs import MakeWorkers
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.proof  # real worker processes

SVG = "{http://www.w3.org/2000/svg}"
# Long enough that the two reads, taken at once by two idle workers, surely overlap.
READ_MS = 1500


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    return Settings(redis_url=redis_url, workspace=workspace)


def _turn(settings: Settings, make_workers: MakeWorkers) -> str:
    make_workers(settings).start(2)
    with Executor(settings=settings, wait_for_workers=PATIENCE_S) as executor:
        turn = executor.submit(
            [
                {
                    "id": "r1",
                    "name": "slow_read",
                    "arguments": {"path": "a.txt", "delay_ms": READ_MS},
                },
                {
                    "id": "r2",
                    "name": "slow_read",
                    "arguments": {"path": "a.txt", "delay_ms": READ_MS},
                },
                {"id": "w", "name": "write_file", "arguments": {"path": "b.txt", "content": "x"}},
            ]
        )
        results = executor.collect(turn, timeout=PATIENCE_S)
    assert all(result.is_error is False for result in results), results
    return turn.turn_id


def _calls(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {
        g.attrib["data-call-id"]: g for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "call"
    }


def _span(element: ET.Element, kind: str) -> tuple[float, float]:
    rect = next(r for r in element.iter(f"{SVG}rect") if r.attrib["class"].startswith(kind))
    left = float(rect.attrib["x"])
    return left, left + float(rect.attrib["width"])


def test_the_timeline_of_parallel_reads_then_a_write(
    settings: Settings, make_workers: MakeWorkers, tmp_path: Path
) -> None:
    turn_id = _turn(settings, make_workers)
    out = tmp_path / "turn.svg"

    result = CliRunner().invoke(
        main, ["timeline", turn_id, "-o", str(out), "--redis", str(settings.redis.url)]
    )

    assert result.exit_code == 0, result.output
    svg = out.read_text()
    root = ET.fromstring(svg)
    lanes = [
        g.attrib["data-worker"] for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "lane"
    ]
    calls = _calls(svg)
    assert sorted(calls) == ["r1", "r2", "w"]
    r1, r2, write = calls["r1"], calls["r2"], calls["w"]
    # A lane per worker that ran a call; each bar in its worker's lane.
    assert sorted(lanes) == sorted({g.attrib["data-worker"] for g in calls.values()})
    # The reads ran together, on the two workers; the write alone, after both.
    assert r1.attrib["data-worker"] != r2.attrib["data-worker"]
    assert (r1.attrib["data-mode"], r2.attrib["data-mode"]) == ("shared", "shared")
    assert write.attrib["data-mode"] == "exclusive"
    (a1, b1), (a2, b2) = _span(r1, "run"), _span(r2, "run")
    assert max(a1, a2) < min(b1, b2), "the two reads' bars do not overlap"
    assert _span(write, "run")[0] >= max(b1, b2)
    # Batches: the reads the first, the write the second, marked where it begins.
    assert [g.attrib["data-batch"] for g in (r1, r2, write)] == ["0", "0", "1"]
    boundaries = [
        line for line in root.iter(f"{SVG}line") if line.attrib.get("class") == "batch-boundary"
    ]
    assert [line.attrib["data-batch"] for line in boundaries] == ["1"]
    assert float(boundaries[0].attrib["x1"]) == _span(write, "wait")[0]

    # The same drawn as PNG (cairosvg, on the system's libcairo), at twice the SVG's size.
    png = tmp_path / "turn.png"
    drawn = CliRunner().invoke(
        main, ["timeline", turn_id, "-o", str(png), "--redis", str(settings.redis.url)]
    )
    assert drawn.exit_code == 0, drawn.output
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(header[16:20], "big") == 2 * int(root.attrib["width"])


def test_geometry_and_event_times_agree() -> None:
    # Hand-made events: bars are placed by their times, waits drawn before the run.
    def event(name: str, call: str, ts: float, turn: str = "t", **data: object) -> Event:
        return Event(
            event=name,
            ts=ts,
            call_id=call,
            turn_id=turn,
            tool="read_file",
            worker=f"w-{call}",
            data=dict(data),
        )

    events = [
        event("lock_acquired", "a", 100.0, mode="shared", waited_ms=0),
        event("lock_acquired", "b", 100.5, mode="exclusive", waited_ms=250),
        event("lock_released", "a", 100.2, released_at=100.2),
        event("lock_released", "b", 101.0, released_at=101.0),
        event("lock_acquired", "elsewhere", 100.1, turn="another", mode="shared"),
    ]
    bars = turn_bars(events, "t")
    calls = _calls(render_svg(bars, "t"))

    assert sorted(calls) == ["a", "b"]
    (wait_left, wait_right), (run_left, run_right) = (
        _span(calls["b"], "wait"),
        _span(calls["b"], "run"),
    )
    assert wait_right == run_left
    a_left, a_right = _span(calls["a"], "run")
    # b waited from 100.25, after a's run ended at 100.2: no overlap drawn, nor any in time.
    assert a_right < wait_left < run_left < run_right
    ratio = (run_right - run_left) / (a_right - a_left)
    assert ratio == pytest.approx(0.5 / 0.2, rel=0.02)


def test_a_turn_without_events_is_a_clear_error(redis_url: str) -> None:
    result = CliRunner().invoke(main, ["timeline", "no-such-turn", "--redis", redis_url])

    assert result.exit_code == 1
    assert "No events of turn 'no-such-turn'" in result.output


def test_a_picture_is_svg_or_png(redis_url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["timeline", "t", "-o", str(tmp_path / "t.jpg"), "--redis", redis_url]
    )

    assert result.exit_code == 2
    assert "t.jpg: name it *.svg or *.png" in result.output


def test_labels_of_batches_that_begin_together_do_not_overlap() -> None:
    # Five batches, the third and fourth beginning a fraction of a millisecond apart.
    starts = [0.0, 0.4, 0.9, 0.9002, 1.5]
    bars = [
        Bar(f"c{n}", "grep", f"w{n % 2}", "shared", n, 100 + at, 100 + at, 100 + at + 0.1)
        for n, at in enumerate(starts)
    ]
    root = ET.fromstring(render_svg(bars, "t"))
    labels = [t for t in root.iter(f"{SVG}text") if t.get("class") == "batch-label"]
    assert sorted(t.text or "" for t in labels) == ["batch 2", "batch 3", "batch 4", "batch 5"]
    boxes = [
        (float(t.get("y", 0)), float(t.get("x", 0)), label_width(t.text or "")) for t in labels
    ]
    for i, (y, left, width) in enumerate(boxes):
        for other_y, other_left, other_width in boxes[i + 1 :]:
            apart = left + width <= other_left or other_left + other_width <= left
            assert other_y != y or apart, (boxes, i)
