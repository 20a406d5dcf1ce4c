"""SVG charts and the list helpers (pure)."""

from __future__ import annotations

import csv
import io
import re
from xml.etree import ElementTree

import pytest

from gleaner.dashboard.build import DashboardData
from gleaner.dashboard.charts import (
    Line,
    bar_chart,
    data_gaps,
    hbar_chart,
    heatmap,
    line_chart,
    nice_ticks,
    split_at_gaps,
    time_ticks,
)
from gleaner.dashboard.model import Point
from gleaner.dashboard.query import CSV_COLUMNS, JobSort, SortOrder, evictions_csv, select_jobs

SVG = "{http://www.w3.org/2000/svg}"


def parse(markup: str) -> ElementTree.Element:
    return ElementTree.fromstring(str(markup))


def test_nice_ticks_cover_the_range_in_round_steps() -> None:
    assert nice_ticks(0, 1, 4) == [0, 0.25, 0.5, 0.75, 1.0]
    ticks = nice_ticks(3, 487, 5)
    assert ticks[0] <= 3 and ticks[-1] >= 487 and ticks[1] - ticks[0] == 100
    assert nice_ticks(5, 5)[0] == 5 and nice_ticks(5, 5)[-1] == 6


def test_time_ticks_are_on_clock_boundaries() -> None:
    t0 = 1_700_000_123.0
    ticks = time_ticks(t0, t0 + 24 * 3600, 6)
    assert all(t % 14400 == 0 for t in ticks) and len(ticks) == 6
    assert time_ticks(0, 90, 6) == [0, 15, 30, 45, 60, 75, 90]


def test_line_chart_draws_each_point_and_the_reference() -> None:
    pts = [Point(t=i * 60, v=v) for i, v in enumerate([0.2, 0.4, 0.9])]
    svg = parse(line_chart([Line("x", pts)], label="L", reference=(0.5, "SLA 0.50")))
    assert svg.get("role") == "img" and svg.get("aria-label") == "L"
    poly = svg.find(f"{SVG}polyline")
    assert poly is not None and len(poly.get("points", "").split()) == 3
    ys = [float(p.split(",")[1]) for p in poly.get("points", "").split()]
    assert ys[0] > ys[1] > ys[2]  # higher values draw higher (smaller y)
    ref = [e for e in svg.iter(f"{SVG}line") if e.get("class") == "reference"]
    assert len(ref) == 1
    assert ys[1] > float(ref[0].get("y1", "0")) > ys[2]  # 0.4 < 0.5 < 0.9


def test_charts_escape_labels_and_say_no_data() -> None:
    svg = str(bar_chart([Point(t=0, v=1)], label="<b>", x_labels=["<script>"]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    empty = parse(line_chart([Line("x", [])], label="E"))
    assert "no data" in "".join(empty.itertext())


def test_heatmap_and_hbar() -> None:
    svg = parse(heatmap([[1.0, 0.5], [0.5, None]], ["a", "b"], label="H"))
    cells = [e for e in svg.iter(f"{SVG}rect") if "cell" in (e.get("class") or "")]
    assert len(cells) == 4 and sum("missing" in (c.get("class") or "") for c in cells) == 1
    with pytest.raises(ValueError, match="square"):
        heatmap([[1.0]], ["a", "b"], label="bad")
    bars = parse(hbar_chart([("a", 0.5), ("b", 2.0)], label="B", marker=(0.25, "SLA")))
    widths = [
        float(e.get("width", "0")) for e in bars.iter(f"{SVG}rect") if e.get("class") == "bar"
    ]
    assert widths[1] == pytest.approx(2 * widths[0])  # 2.0 is clipped to 1


def test_select_jobs_filters_sorts_missing_last(data: DashboardData) -> None:
    jobs = data.snapshot.jobs
    running = select_jobs(jobs, phase="Running", sort=JobSort.OBSERVED, order=SortOrder.DESC)
    assert [j.name for j in running] == ["summarize-news", "embed-docs", "translate"]
    by_obs = select_jobs(jobs, sort=JobSort.OBSERVED)
    assert [j.observed for j in by_obs][:3] == [0.19, 0.44, 0.64]
    assert all(j.observed is None for j in by_obs[3:])
    on_a = select_jobs(jobs, node="gpu-node-a")
    assert {j.name for j in on_a} == {"summarize-news", "embed-docs"}


def test_evictions_csv_round_trip(data: DashboardData) -> None:
    text = evictions_csv(data.snapshot.evictions)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 2
    assert rows[0]["job"] == "translate-old" and rows[0]["outcome"] == "requeued"
    assert float(rows[0]["observed_mean"]) == pytest.approx(0.41)
    assert re.match(r"\d{4}-\d\d-\d\dT", rows[0]["time"])


def test_line_chart_marks_events_inside_its_time_range() -> None:
    pts = [Point(t=i * 60, v=0.5) for i in range(5)]
    svg = parse(
        line_chart(
            [Line("x", pts)],
            label="L",
            markers=[(90.0, "evicted <a>"), (1e9, "outside"), (200.0, "late")],
        )
    )
    marks = [e for e in svg.iter(f"{SVG}line") if e.get("class") == "marker"]
    assert len(marks) == 2
    xs = [float(m.get("x1", "0")) for m in marks]
    assert xs[0] < xs[1]
    labels = [e for e in svg.iter(f"{SVG}text") if e.get("class") == "marker-label"]
    assert [e.text for e in labels] == ["evicted <a>", "late"]
    assert labels[1].get("text-anchor") == "end"  # near the right edge: drawn to the left


def test_data_gaps_are_spans_far_wider_than_the_sampling() -> None:
    ts = [0, 600, 1200, 1800, 60_000, 60_600, 61_200]
    pts = [Point(t=t, v=0.5) for t in ts]
    assert data_gaps(pts) == [(1800, 60_000)]
    assert data_gaps([Point(t=i * 60, v=0.1) for i in range(10)]) == []
    assert data_gaps(pts[:2]) == []


def test_split_at_gaps_keeps_steps_that_only_touch_a_gap() -> None:
    gap = [(1800.0, 60_000.0)]
    # A step line: one stay 0..1800, the next 60000..61200 (no diagonal between them).
    steps = [Point(t=t, v=v) for t, v in [(0, 0.3), (1800, 0.3), (60_000, 0.2), (61_200, 0.2)]]
    runs = split_at_gaps(steps, gap)
    assert [[p.t for p in run] for run in runs] == [[0, 1800], [60_000, 61_200]]
    assert len(split_at_gaps(steps, [])) == 1


def test_line_chart_draws_no_line_across_a_gap() -> None:
    ts = [0, 600, 1200, 1800, 60_000, 60_600, 61_200]
    observed = [Point(t=t, v=0.5) for t in ts]
    lonely = [Point(t=t, v=0.4) for t in (0, 1200, 1800, 61_200)]
    chart = line_chart(
        [Line("observed", observed), Line("other", lonely)],
        label="L",
        gaps=data_gaps(observed),
    )
    polys = list(parse(chart).iter(f"{SVG}polyline"))
    assert [len(p.get("points", "").split()) for p in polys] == [4, 3, 3]
    # Without gaps, each series is one polyline.
    plain = line_chart([Line("observed", observed)], label="L")
    assert len(list(parse(plain).iter(f"{SVG}polyline"))) == 1
