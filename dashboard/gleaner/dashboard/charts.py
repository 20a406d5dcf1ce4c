"""Small SVG charts drawn on the server (pure functions: data in, SVG markup out).

Contract. Every function returns a :class:`markupsafe.Markup` holding one ``<svg>`` element
with a ``viewBox`` (it scales to its container), a ``role="img"`` and an ``aria-label``,
and ``<title>`` tooltips on the marks. Text from the data is escaped. Empty data gives a
chart that says "no data" instead of failing. No JavaScript and no third-party front-end
files are needed to see them.

- :func:`line_chart`: one or more time series, optional horizontal reference line (an SLA);
  lines are not drawn across ``gaps`` (times without data, e.g. from :func:`data_gaps`:
  a job that waited between two placements), so a gap never looks like a trend;
- :func:`bar_chart`: values at times or at categories (preemptions, memory histograms);
- :func:`hbar_chart`: labelled horizontal bars within [0, 1] with an optional marker
  (the factor breakdown against the SLA);
- :func:`heatmap`: a square matrix in [0, 1] (the GPU busy-overlap matrix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from itertools import pairwise

from markupsafe import Markup

from gleaner.dashboard.model import Point

PALETTE = ("#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2")
EPOCH_THRESHOLD = 1e9
"""Times above this are epoch seconds (a cluster); below, seconds since start (a simulation)."""


@dataclass(frozen=True)
class Line:
    """One series of a line chart."""

    label: str
    points: Sequence[Point]
    color: str = PALETTE[0]


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("tick range must be finite")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(v, 10))
    return ticks


TIME_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    14400,
    21600,
    43200,
)
DAY = 86400


def time_ticks(t0: float, t1: float, count: int = 6) -> list[float]:
    """Tick times within [t0, t1] on round clock steps (1 s ... 12 h, then whole days)."""
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0:
        return [t0] if math.isfinite(t0) else []
    raw = (t1 - t0) / max(1, count)
    step = next((float(s) for s in TIME_STEPS if s >= raw), DAY * math.ceil(raw / DAY))
    first = math.ceil(t0 / step) * step
    return [first + i * step for i in range(int((t1 - first) // step) + 1)]


def format_time(t: float, span: float) -> str:
    """An axis label: UTC clock time for epoch seconds, else elapsed time."""
    if t >= EPOCH_THRESHOLD:
        dt = datetime.fromtimestamp(t, tz=UTC)
        return dt.strftime("%H:%M") if span < 2 * 86400 else dt.strftime("%m-%d %H:%M")
    if span >= 2 * 3600:
        return f"{t / 3600:.4g}h"
    if span >= 120:
        return f"{t / 60:.4g}m"
    return f"{t:g}s"


def format_value(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _svg(width: int, height: int, label: str, body: list[str], css_class: str) -> Markup:
    return Markup(
        f'<svg class="chart {css_class}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def _no_data(width: int, height: int, label: str, css_class: str) -> Markup:
    return _svg(
        width,
        height,
        label,
        [
            f'<rect x="0" y="0" width="{width}" height="{height}" class="frame"/>',
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" class="empty">'
            "no data</text>",
        ],
        css_class + " empty",
    )


def data_gaps(points: Sequence[Point], factor: float = 3.0) -> list[tuple[float, float]]:
    """Intervals a regularly sampled series has no data for: between consecutive points
    more than ``factor`` times the median spacing apart (three points or more needed)."""
    ts = sorted(p.t for p in points if math.isfinite(p.v))
    steps = sorted(b - a for a, b in pairwise(ts) if b > a)
    if len(steps) < 2:
        return []
    median = steps[len(steps) // 2]
    return [(a, b) for a, b in pairwise(ts) if b - a > factor * median]


def split_at_gaps(
    points: Sequence[Point], gaps: Sequence[tuple[float, float]]
) -> list[list[Point]]:
    """Time-sorted ``points`` cut into runs: two neighbours are not joined when the span
    between them covers more than half of some gap."""
    runs: list[list[Point]] = []
    for p in points:
        if runs:
            q = runs[-1][-1]
            cut = any(min(p.t, b) - max(q.t, a) > (b - a) / 2 for a, b in gaps if b > a)
            if not cut:
                runs[-1].append(p)
                continue
        runs.append([p])
    return runs


LABEL_CHAR_PX = 6.2
"""Width of one character of an 11 px label (an estimate: SVG text is not measured here)."""
LABEL_ROW_PX = 13


def label_row(extent: tuple[float, float], placed: Sequence[tuple[float, float, int]]) -> int:
    """The lowest row where a label spanning ``extent`` (x from, x to) overlaps none of the
    ``placed`` labels (x from, x to, row): labels of nearby markers stack instead of
    overlapping."""
    row = 0
    while any(a < extent[1] + 4 and extent[0] < b + 4 and r == row for a, b, r in placed):
        row += 1
    return row


def line_chart(
    lines: Sequence[Line],
    *,
    label: str,
    width: int = 560,
    height: int = 220,
    y_min: float | None = 0.0,
    y_max: float | None = None,
    reference: tuple[float, str] | None = None,
    percent: bool = False,
    markers: Sequence[tuple[float, str]] = (),
    gaps: Sequence[tuple[float, float]] = (),
) -> Markup:
    """Time series as polylines (a single point draws as a dot); ``markers`` are (time,
    label) events drawn as vertical lines where they fall inside the plotted time range;
    no line is drawn across a ``gaps`` interval (see :func:`split_at_gaps`)."""
    pts = [p for line in lines for p in line.points if math.isfinite(p.v)]
    if not pts:
        return _no_data(width, height, label, "line")
    left, right, top, bottom = 48, 12, 12, 28
    pw, ph = width - left - right, height - top - bottom
    t0, t1 = min(p.t for p in pts), max(p.t for p in pts)
    values = [p.v for p in pts] + ([reference[0]] if reference else [])
    lo = min(values) if y_min is None else min(y_min, min(values))
    hi = max(values) if y_max is None else max(y_max, max(values))
    yticks = nice_ticks(lo, hi, 4)
    lo, hi = yticks[0], yticks[-1]
    span = t1 - t0

    def x(t: float) -> float:
        return left + (pw * (t - t0) / span if span > 0 else pw / 2)

    def y(v: float) -> float:
        return top + ph - ph * (v - lo) / (hi - lo)

    def fmt(v: float) -> str:
        return f"{v * 100:.0f}%" if percent else format_value(v)

    body = [f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>']
    for tick in yticks:
        body.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            'class="grid"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" class="tick">'
            f"{fmt(tick)}</text>"
        )
    if span > 0:
        for tick in time_ticks(t0, t1, 6):
            if t0 <= tick <= t1:
                tx = x(tick)
                # A label at the plot's right edge would be cut off by the SVG's border.
                anchor = "end" if tx > left + pw - 20 else "middle"
                body.append(
                    f'<text x="{tx:.1f}" y="{top + ph + 18}" text-anchor="{anchor}" '
                    f'class="tick">{escape(format_time(tick, span))}</text>'
                )
    overlay: list[str] = []  # labels, drawn over the series so that no line hides them
    if reference is not None:
        ry = y(reference[0])
        body.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{ry:.1f}" y2="{ry:.1f}" class="reference">'
            f"<title>{escape(reference[1])}</title></line>"
        )
        # Above the line, or below it when the line runs along the plot's top.
        label_y = ry - 5 if ry - top > 14 else ry + 13
        label_w = LABEL_CHAR_PX * len(reference[1]) + 6
        # An opaque backing: a series passing through the label cannot cross its text.
        overlay.append(
            f'<rect x="{left + pw - 1 - label_w:.1f}" y="{label_y - 10:.1f}" '
            f'width="{label_w:.1f}" height="13" class="label-backing"/>'
            f'<text x="{left + pw - 4}" y="{label_y:.1f}" text-anchor="end" '
            f'class="reference-label">{escape(reference[1])}</text>'
        )
    placed_labels: list[tuple[float, float, int]] = []  # (x from, x to, row) of each label
    for mt, mlabel in sorted(markers):
        if math.isfinite(mt) and t0 <= mt <= t1:
            mx = x(mt)
            right_half = mx > left + pw / 2
            lx = mx - 3 if right_half else mx + 3
            extent = (
                (lx - LABEL_CHAR_PX * len(mlabel), lx)
                if right_half
                else (lx, lx + LABEL_CHAR_PX * len(mlabel))
            )
            row = label_row(extent, placed_labels)
            placed_labels.append((*extent, row))
            body.append(
                f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{top + ph}" class="marker">'
                f"<title>{escape(mlabel)}</title></line>"
            )
            overlay.append(
                f'<text x="{lx:.1f}" y="{top + ph - 4 - LABEL_ROW_PX * row}" '
                f'text-anchor="{"end" if right_half else "start"}" class="marker-label">'
                f"{escape(mlabel)}</text>"
            )
    for i, line in enumerate(lines):
        good = sorted((p for p in line.points if math.isfinite(p.v)), key=lambda p: p.t)
        if not good:
            continue
        color = escape(line.color or PALETTE[i % len(PALETTE)])
        title = escape(f"{line.label}: last {fmt(good[-1].v)}")
        lonely: list[Point] = []
        for run in split_at_gaps(good, gaps):
            if len(run) == 1:
                lonely += run
                continue
            coords = " ".join(f"{x(p.t):.1f},{y(p.v):.1f}" for p in run)
            body.append(
                f'<polyline points="{coords}" fill="none" stroke="{color}" '
                f'stroke-width="2" class="series"><title>{title}</title></polyline>'
            )
        for p in good if len(good) <= 60 else lonely:
            body.append(
                f'<circle cx="{x(p.t):.1f}" cy="{y(p.v):.1f}" r="2.5" fill="{color}">'
                f"<title>{escape(format_time(p.t, span))}: {fmt(p.v)}</title></circle>"
            )
    body += overlay
    if len(lines) > 1:
        lx = left + 8
        for i, line in enumerate(lines):
            color = escape(line.color or PALETTE[i % len(PALETTE)])
            body.append(
                f'<rect x="{lx}" y="{top + 6}" width="10" height="10" fill="{color}"/>'
                f'<text x="{lx + 14}" y="{top + 15}" class="legend">{escape(line.label)}</text>'
            )
            lx += 24 + 7 * len(line.label)
    return _svg(width, height, label, body, "line")


def bar_chart(
    points: Sequence[Point],
    *,
    label: str,
    width: int = 560,
    height: int = 200,
    color: str = PALETTE[0],
    x_labels: Sequence[str] | None = None,
    percent: bool = False,
    value_unit: str = "",
) -> Markup:
    """Bars at the points' t (evenly spaced, in order), labelled by ``x_labels`` or time."""
    pts = [p for p in points if math.isfinite(p.v)]
    if not pts:
        return _no_data(width, height, label, "bar")
    left, right, top, bottom = 48, 12, 12, 28
    pw, ph = width - left - right, height - top - bottom
    yticks = nice_ticks(0.0, max(max(p.v for p in pts), 1e-9), 4)
    hi = yticks[-1]
    n = len(pts)
    slot = pw / n
    bar = max(1.0, slot * 0.8)
    span = pts[-1].t - pts[0].t

    def fmt(v: float) -> str:
        return f"{v * 100:.0f}%" if percent else format_value(v)

    body = [f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>']
    for tick in yticks:
        ty = top + ph - ph * tick / hi
        body.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{ty:.1f}" y2="{ty:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end" class="tick">'
            f"{fmt(tick)}</text>"
        )
    every = max(1, math.ceil(n / 8))
    for i, p in enumerate(pts):
        h = ph * max(0.0, p.v) / hi
        bx = left + i * slot + (slot - bar) / 2
        name = x_labels[i] if x_labels is not None and i < len(x_labels) else format_time(p.t, span)
        body.append(
            f'<rect x="{bx:.1f}" y="{top + ph - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
            f'fill="{escape(color)}" class="bar"><title>{escape(name)}: {fmt(p.v)}'
            f"{escape(value_unit)}</title></rect>"
        )
        if i % every == 0:
            body.append(
                f'<text x="{left + i * slot + slot / 2:.1f}" y="{top + ph + 18}" '
                f'text-anchor="middle" class="tick">{escape(name)}</text>'
            )
    return _svg(width, height, label, body, "bar")


def histogram_chart(
    points: Sequence[Point],
    *,
    label: str,
    x_unit: str,
    width: int = 360,
    height: int = 170,
    color: str = PALETTE[0],
    value_unit: str = "",
) -> Markup:
    """A histogram on a numeric x axis: each point's ``t`` is a bin's lower edge (in
    ``x_unit``), ``v`` its share (0..1); bins are as wide as the smallest gap between edges,
    so uneven or missing bins keep their place on the axis."""
    pts = sorted(
        (p for p in points if math.isfinite(p.v) and math.isfinite(p.t)), key=lambda p: p.t
    )
    if not pts:
        return _no_data(width, height, label, "bar")
    left, right, top, bottom = 48, 12, 12, 40
    pw, ph = width - left - right, height - top - bottom
    gaps = [b.t - a.t for a, b in pairwise(pts) if b.t > a.t]
    step = min(gaps) if gaps else 1.0
    xticks = nice_ticks(pts[0].t, pts[-1].t + step, 5)
    x0, x1 = xticks[0], xticks[-1]
    yticks = nice_ticks(0.0, max(max(p.v for p in pts), 1e-9), 3)
    hi = yticks[-1]

    def x(v: float) -> float:
        return left + pw * (v - x0) / (x1 - x0)

    body = [f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>']
    for tick in yticks:
        ty = top + ph - ph * tick / hi
        body.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{ty:.1f}" y2="{ty:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end" class="tick">'
            f"{round(tick * 100, 1):g}%</text>"
        )
    for tick in xticks:
        body.append(
            f'<text x="{x(tick):.1f}" y="{top + ph + 14}" text-anchor="middle" class="tick">'
            f"{round(tick, 2):g}</text>"
        )
    body.append(
        f'<text x="{left + pw / 2:.1f}" y="{top + ph + 32}" text-anchor="middle" '
        f'class="tick axis-title">{escape(x_unit)}</text>'
    )
    for p in pts:
        h = ph * max(0.0, p.v) / hi
        bx, bw = x(p.t), max(1.0, x(p.t + step) - x(p.t) - 1)
        body.append(
            f'<rect x="{bx:.1f}" y="{top + ph - h:.1f}" width="{bw:.1f}" height="{h:.1f}" '
            f'fill="{escape(color)}" class="bar"><title>{format_value(p.t)}-'
            f"{format_value(p.t + step)} {escape(x_unit)}: {p.v * 100:.0f}%"
            f"{escape(value_unit)}</title></rect>"
        )
    return _svg(width, height, label, body, "bar")


def hbar_chart(
    items: Sequence[tuple[str, float]],
    *,
    label: str,
    width: int = 560,
    marker: tuple[float, str] | None = None,
    colors: Sequence[str] = PALETTE,
) -> Markup:
    """Horizontal bars of values in [0, 1], one row per item, optional vertical marker."""
    if not items:
        return _no_data(width, 80, label, "hbar")
    row, left, right, top = 28, 110, 50, 8
    height = top * 2 + row * len(items) + (16 if marker else 0)
    pw = width - left - right
    body = [f'<rect x="{left}" y="{top}" width="{pw}" height="{row * len(items)}" class="plot"/>']
    for i, (name, value) in enumerate(items):
        v = min(1.0, max(0.0, value if math.isfinite(value) else 0.0))
        yy = top + i * row + 5
        color = escape(colors[i % len(colors)])
        body.append(
            f'<text x="{left - 8}" y="{yy + 13}" text-anchor="end" class="tick">'
            f"{escape(name)}</text>"
            f'<rect x="{left}" y="{yy}" width="{pw * v:.1f}" height="{row - 10}" fill="{color}" '
            f'class="bar"><title>{escape(name)}: {v:.3f}</title></rect>'
            f'<text x="{left + pw * v + 6:.1f}" y="{yy + 13}" class="value">{v:.2f}</text>'
        )
    if marker is not None:
        mx = left + pw * min(1.0, max(0.0, marker[0]))
        body.append(
            f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{top + row * len(items)}" '
            f'class="reference"><title>{escape(marker[1])}</title></line>'
            f'<text x="{mx:.1f}" y="{top + row * len(items) + 14}" text-anchor="middle" '
            f'class="reference-label">{escape(marker[1])}</text>'
        )
    return _svg(width, height, label, body, "hbar")


def heat_color(v: float) -> str:
    """White (0) to deep blue (1)."""
    v = min(1.0, max(0.0, v))
    r = round(255 - v * (255 - 30))
    g = round(255 - v * (255 - 64))
    b = round(255 - v * (255 - 175))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(
    matrix: Sequence[Sequence[float | None]],
    labels: Sequence[str],
    *,
    label: str,
    cell: int = 44,
) -> Markup:
    """A matrix of values in [0, 1] with row/column labels; None cells are hatched grey."""
    n = len(matrix)
    if n == 0:
        return _no_data(240, 80, label, "heatmap")
    if any(len(r) != n for r in matrix) or len(labels) != n:
        raise ValueError("heatmap needs a square matrix and one label per row")
    left, top = 56, 24
    width, height = left + n * cell + 8, top + n * cell + 8
    body: list[str] = []
    for j, name in enumerate(labels):
        body.append(
            f'<text x="{left + j * cell + cell / 2}" y="{top - 8}" text-anchor="middle" '
            f'class="tick">{escape(name)}</text>'
        )
    for i, row in enumerate(matrix):
        body.append(
            f'<text x="{left - 8}" y="{top + i * cell + cell / 2 + 4}" text-anchor="end" '
            f'class="tick">{escape(labels[i])}</text>'
        )
        for j, value in enumerate(row):
            x, y = left + j * cell, top + i * cell
            if value is None or not math.isfinite(value):
                body.append(
                    f'<rect x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                    f'class="cell missing"><title>{escape(labels[i])}–{escape(labels[j])}: '
                    "not measured</title></rect>"
                )
                continue
            dark = value > 0.55
            body.append(
                f'<rect x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                f'fill="{heat_color(value)}" class="cell"><title>{escape(labels[i])}–'
                f"{escape(labels[j])}: {value:.2f}</title></rect>"
                f'<text x="{x + cell / 2 - 1}" y="{y + cell / 2 + 3}" text-anchor="middle" '
                f'class="cell-label{" dark" if dark else ""}">{value:.2f}</text>'
            )
    return _svg(width, height, label, body, "heatmap")
