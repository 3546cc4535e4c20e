"""A turn's timeline, from the pool's events: which worker ran which call when, drawn as SVG.

One lane per worker; one bar per call, split into its wait for the lock (grey) and its run
under the lock (shared calls blue, exclusive ones orange); dashed lines where each batch of the
turn begins. Read from the workers' ``lock_acquired`` (its ``waited_ms`` gives the wait) and
``lock_released`` (``released_at``) events, and the turn's plan for the batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from executor.wire import Event, TurnPlan

_WIDTH = 960
_LEFT = 170  # lane labels
_RIGHT = 30
_TOP = 56  # title and axis
_LANE = 36
_BAR = 22
_LABEL_ROW = 12  # a row of batch labels, at their 10 px font
_LABEL_CHAR = 6.5  # an upper bound of a 10 px sans-serif character's width
_COLOURS = {"shared": "#3b7dd8", "exclusive": "#e8883a", "wait": "#c4c4c4"}


@dataclass(frozen=True)
class Bar:
    """One call's time on the pool (epoch seconds): lock wait from ``asked`` to ``granted``,
    run from ``granted`` to ``released``."""

    call_id: str
    tool: str
    worker: str
    mode: str
    batch: int | None
    asked: float
    granted: float
    released: float

    @property
    def wait(self) -> float:
        return self.granted - self.asked


def turn_bars(events: Iterable[Event], turn_id: str, plan: TurnPlan | None = None) -> list[Bar]:
    """The bars of ``turn_id``'s calls that took the lock, in the order they were granted it.

    A call whose release was never recorded (its worker died) ends at its last event.
    """
    granted: dict[str, Event] = {}
    released: dict[str, float] = {}
    last_seen: dict[str, float] = {}
    for event in events:
        if event.turn_id != turn_id or not event.call_id:
            continue
        last_seen[event.call_id] = max(last_seen.get(event.call_id, event.ts), event.ts)
        if event.event == "lock_acquired":
            granted[event.call_id] = event
        elif event.event == "lock_released":
            released[event.call_id] = float(event.data.get("released_at", event.ts))
    batch_of = _batches(plan)
    bars = []
    for call_id, event in granted.items():
        waited = float(event.data.get("waited_ms", 0.0)) / 1000
        end = released.get(call_id, last_seen[call_id])
        bars.append(
            Bar(
                call_id=call_id,
                tool=event.tool,
                worker=event.worker or "?",
                mode=str(event.data.get("mode", "")),
                batch=batch_of.get(call_id),
                asked=event.ts - waited,
                granted=event.ts,
                released=max(end, event.ts),
            )
        )
    return sorted(bars, key=lambda bar: (bar.granted, bar.call_id))


def _batches(plan: TurnPlan | None) -> dict[str, int]:
    if plan is None:
        return {}
    return {
        plan.call_ids[index]: number for number, batch in enumerate(plan.batches) for index in batch
    }


def render_svg(bars: list[Bar], title: str) -> str:
    """The timeline of ``bars`` as a standalone SVG document."""
    workers = sorted({bar.worker for bar in bars})
    height = _TOP + _LANE * max(1, len(workers)) + 46
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    if not bars:
        parts.append('<text x="10" y="48">No call of this turn took the lock.</text></svg>')
        return "\n".join(parts)
    origin = min(bar.asked for bar in bars)
    span = max(bar.released for bar in bars) - origin or 1e-3
    scale = (_WIDTH - _LEFT - _RIGHT) / span

    def x(t: float) -> float:
        return round(_LEFT + (t - origin) * scale, 2)

    parts += _axis(span, height, x(origin), scale)
    parts += [_lane(number, worker) for number, worker in enumerate(workers)]
    parts += [_bar(bar, workers.index(bar.worker), x) for bar in bars]
    parts += _batch_marks(bars, height, x)
    parts += _legend(height)
    parts.append("</svg>")
    return "\n".join(parts)


def _lane(number: int, worker: str) -> str:
    y = _TOP + number * _LANE
    shade = "#f6f6f6" if number % 2 else "#ffffff"
    return (
        f'<g class="lane" data-worker={quoteattr(worker)}>'
        f'<rect x="0" y="{y}" width="{_WIDTH}" height="{_LANE}" fill="{shade}"/>'
        f'<text x="8" y="{y + _LANE / 2 + 4}">{escape(_short(worker))}</text></g>'
    )


def _bar(bar: Bar, lane: int, x: Callable[[float], float]) -> str:
    y = _TOP + lane * _LANE + (_LANE - _BAR) / 2
    ran_ms, waited_ms = (bar.released - bar.granted) * 1000, bar.wait * 1000
    tip = f"{bar.call_id} {bar.tool} ({bar.mode}) on {bar.worker}: waited {waited_ms:.1f} ms, "
    tip += f"ran {ran_ms:.1f} ms"
    run_width = round(max(1.0, x(bar.released) - x(bar.granted)), 2)
    label = bar.tool if run_width > 7 * len(bar.tool) else ""
    attributes = " ".join(
        [
            f"data-call-id={quoteattr(bar.call_id)}",
            f"data-tool={quoteattr(bar.tool)}",
            f"data-worker={quoteattr(bar.worker)}",
            f"data-mode={quoteattr(bar.mode)}",
            f'data-batch="{"" if bar.batch is None else bar.batch}"',
            f'data-asked="{bar.asked:.6f}"',
            f'data-granted="{bar.granted:.6f}"',
            f'data-released="{bar.released:.6f}"',
        ]
    )
    wait_width = round(x(bar.granted) - x(bar.asked), 2)
    return (
        f'<g class="call" {attributes}><title>{escape(tip)}</title>'
        f'<rect class="wait" x="{x(bar.asked)}" y="{y}" width="{wait_width}" height="{_BAR}" '
        f'fill="{_COLOURS["wait"]}"/>'
        f'<rect class="run {escape(bar.mode)}" x="{x(bar.granted)}" y="{y}" '
        f'width="{run_width}" height="{_BAR}" fill="{_COLOURS.get(bar.mode, "#888888")}"/>'
        f'<text x="{x(bar.granted) + 3}" y="{y + _BAR / 2 + 4}" fill="white" font-size="11">'
        f"{escape(label)}</text></g>"
    )


def _axis(span: float, height: int, left: float, scale: float) -> list[str]:
    step = _tick(span)
    ticks = []
    t = 0.0
    while t <= span + 1e-9:
        at = round(left + t * scale, 2)
        ticks.append(
            f'<line x1="{at}" y1="{_TOP - 6}" x2="{at}" y2="{height - 40}" '
            f'stroke="#e2e2e2"/><text x="{at}" y="{_TOP - 10}" text-anchor="middle" '
            f'fill="#555">{t * 1000:.0f} ms</text>'
        )
        t += step
    return ticks


def _tick(span: float) -> float:
    """A round step that cuts ``span`` seconds into 4 to 10 parts."""
    step = 0.001
    while span / step > 10:
        for factor in (2, 2.5, 2):
            step *= factor
            if span / step <= 10:
                break
    return step


def _batch_marks(bars: list[Bar], height: int, x: Callable[[float], float]) -> list[str]:
    """A dashed line where each batch after the first begins, labelled; labels of batches
    that begin close together go on rows of their own instead of over each other."""
    starts: dict[int, float] = {}
    for bar in bars:
        if bar.batch is not None:
            starts[bar.batch] = min(starts.get(bar.batch, bar.asked), bar.asked)
    marks = []
    rows: list[float] = []  # the right end of the last label on each row
    for number in sorted(starts):
        if number == 0:
            continue
        at = x(starts[number])
        label = f"batch {number + 1}"
        width = label_width(label)
        left = at - 3 - width if at > _WIDTH - 80 else at + 3
        row = next((i for i, end in enumerate(rows) if left > end + 4), len(rows))
        if row == len(rows):
            rows.append(0.0)
        rows[row] = left + width
        y = height - 42 - row * _LABEL_ROW
        marks.append(
            f'<line class="batch-boundary" data-batch="{number}" x1="{at}" '
            f'y1="{_TOP - 4}" x2="{at}" y2="{height - 40}" stroke="#444" '
            f'stroke-dasharray="4 3"/>'
            f'<text class="batch-label" data-batch="{number}" x="{round(left, 2)}" y="{y}" '
            f'fill="#444" font-size="10">{label}</text>'
        )
    return marks


def label_width(text: str) -> float:
    """The width a batch label takes at its font size, a little more than sans-serif needs."""
    return _LABEL_CHAR * len(text)


def _legend(height: int) -> list[str]:
    y = height - 22
    items = [
        ("wait", "waiting for the lock"),
        ("shared", "shared (runs with other reads)"),
        ("exclusive", "exclusive (runs alone)"),
    ]
    parts, at = [], 10
    for key, label in items:
        parts.append(
            f'<rect x="{at}" y="{y}" width="14" height="12" fill="{_COLOURS[key]}"/>'
            f'<text x="{at + 19}" y="{y + 10}">{escape(label)}</text>'
        )
        at += 40 + 7 * len(label)
    return parts


def _short(worker: str) -> str:
    return worker if len(worker) <= 24 else worker[:10] + "…" + worker[-12:]
