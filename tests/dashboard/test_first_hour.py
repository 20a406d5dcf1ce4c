"""What a first-time reader of the dashboard needs: periods, finished jobs, plain reasons,
one SLA format, readable charts."""

from __future__ import annotations

import copy
import re

import pytest
from fastapi.testclient import TestClient

from gleaner.dashboard.app import create_app
from gleaner.dashboard.build import (
    build_dashboard,
    failed_why,
    group_pair_clauses,
    period_figures,
)
from gleaner.dashboard.charts import Line, histogram_chart, label_row, line_chart
from gleaner.dashboard.model import ClusterSeries, Point
from gleaner.dashboard.sources import StaticSource
from gleaner.dashboard.views import span
from gleaner.testing.dashboard import example_record


def _finished_record() -> object:
    """The example record with 'translate' (observed 0.19, SLA 0.45) Succeeded."""
    record = example_record()
    jobs = []
    for job in record.offline_jobs:
        job = copy.deepcopy(job)
        if job["metadata"]["name"] == "translate":
            job["status"]["phase"] = "Succeeded"
        jobs.append(job)
    record.offline_jobs = jobs
    return record


def test_finished_jobs_show_their_node_and_a_miss() -> None:
    snap = build_dashboard(_finished_record()).snapshot  # type: ignore[arg-type]
    job = snap.job("batch", "translate")
    assert job is not None and job.phase == "Succeeded"
    assert job.node is None and job.ran_on == "gpu-node-b" and job.ran_on_gpus == [0]
    assert job.meets_sla is False  # 0.19 observed against 0.45: flagged although it succeeded
    # A job that failed on an SLA eviction ran where its last eviction says.
    failed = snap.job("research", "long-context")
    assert failed is not None and failed.ran_on == "gpu-node-a" and failed.evictions


def test_jobs_page_marks_the_finished_miss_and_names_its_node() -> None:
    app = create_app(StaticSource.from_record(_finished_record()))  # type: ignore[arg-type]
    html = TestClient(app).get("/jobs").text
    row = re.search(r'<tr data-phase="Succeeded"[^>]*class="([^"]*)"[^>]*>(.*?)</tr>', html, re.S)
    assert row is not None and row.group(1) == "miss"
    assert "ran on</span>" in row.group(2) and "gpu-node-b" in row.group(2)
    assert "a finished job over its last placement" in html


def test_failed_jobs_runner_ups_are_explained() -> None:
    data = build_dashboard(example_record())
    job = data.job_detail("research", "long-context")
    assert job is not None and job.runner_ups
    for r in job.runner_ups:
        assert "waits for the next scheduling pass" not in r.why
        assert r.why.endswith("unused: a Failed job is not placed again")
    # A node that out-scores the one it ran on says why that can be.
    better = [r for r in job.runner_ups if r.feasible]
    assert better and "the trace changed since the placement" in better[0].why
    html = (
        TestClient(create_app(StaticSource.from_record(example_record())))
        .get("/jobs/research/long-context")
        .text
    )
    assert "The job failed, so no node will run it again" in html
    assert failed_why("feasible (x); the job waits for the next scheduling pass") == (
        "feasible (x); unused: a Failed job is not placed again"
    )


def test_pair_clauses_are_grouped() -> None:
    why = "; ".join(
        [f"GPU pair {a}-{b}: busy overlap 0.{40 + a} < 0.95 (admission)" for a, b in
         [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]]
        + ["predicted 0.20 < SLA 0.50 (multi_gpu 0.38)"]
    )  # fmt: skip
    assert group_pair_clauses(why) == (
        "6 GPU pairs overlap < 0.95 (busy overlap 0.41-0.43; pairs 1-2, 1-3, 1-4, 2-3, ...); "
        "predicted 0.20 < SLA 0.50 (multi_gpu 0.38)"
    )
    one = "GPU pair 4-5: busy overlap 0.59 < 0.95 (admission)"
    assert group_pair_clauses(one) == one
    data = build_dashboard(example_record())
    giant = data.job_detail("batch", "giant-batch")
    assert giant is not None
    assert all(r.why.count("GPU pair ") <= 1 for r in giant.runner_ups)
    assert any(re.search(r"\d+ GPU pairs overlap < 0\.95", r.why) for r in giant.runner_ups)


def test_overview_cards_say_which_period_they_cover() -> None:
    series = ClusterSeries(
        harvested_utilization=[Point(t=3600.0 * i, v=v) for i, v in enumerate([0.1, 0.3, 0.2])],
        sla_attainment=[Point(t=3600.0 * i, v=v) for i, v in enumerate([1.0, 0.5, 0.9])],
    )
    period = period_figures(series)
    assert period is not None and period.points == 3
    assert period.harvested_utilization == pytest.approx(0.2)
    assert period.sla_attainment == pytest.approx(0.8) and period.offline_throughput is None
    assert span(period.start, period.end) == "2h"
    assert period_figures(ClusterSeries(sla_attainment=[Point(t=0, v=1)])) is None
    html = TestClient(create_app(StaticSource.from_record(example_record()))).get("/").text
    card = re.search(r'id="card-sla-attainment".*?</div>\s*</div>', html, re.S)
    assert card is not None and "mean of the last 23h" in card.group(0) and "now " in card.group(0)
    # And, with running jobs of more than one size, the attainment of each size now.
    sizes = re.search(r'id="card-sla-attainment".*?now by job size: ([^<]*)</div>', html, re.S)
    assert sizes is not None and sizes.group(1) == "1-GPU jobs 50% · 2-GPU jobs 100%"


def test_sla_is_a_fraction_everywhere_and_times_do_not_wrap() -> None:
    client = TestClient(create_app(StaticSource.from_record(example_record())))
    job = client.get("/jobs/batch/translate").text
    assert "0.45 of standalone throughput" in job and "45% of standalone" not in job
    report = client.get("/evictions/batch.translate-old-sla-eviction-1").text
    assert re.search(r"<dt>SLA</dt><dd>0\.60 of standalone", report)
    assert "T" not in re.search(r"<dt>Next</dt><dd>(.*?)</dd>", report, re.S).group(1)  # type: ignore[union-attr]
    evictions = client.get("/evictions").text
    assert '<td class="nowrap" data-value="gpu-node-' in evictions
    assert ".nowrap { white-space: nowrap; }" in client.get("/static/dashboard.css").text


def test_marker_labels_stack_and_labels_are_drawn_over_the_series() -> None:
    assert label_row((0, 100), []) == 0
    assert label_row((50, 150), [(0, 100, 0)]) == 1
    assert label_row((50, 150), [(0, 100, 0), (40, 120, 1)]) == 2
    assert label_row((200, 300), [(0, 100, 0)]) == 0
    svg = str(
        line_chart(
            [Line(label="observed", points=[Point(t=float(t), v=0.5) for t in range(100)])],
            label="x",
            reference=(0.5, "SLA 0.50"),
            markers=[(50.0, "evicted from gpu-node-0007"), (53.0, "evicted from gpu-node-0004")],
        )
    )
    ys = [
        float(y) for y in re.findall(r'<text x="[^"]+" y="([^"]+)"[^>]*class="marker-label"', svg)
    ]
    assert len(ys) == 2 and ys[0] != ys[1]
    assert svg.index("reference-label") > svg.index("<polyline")


def test_memory_histograms_have_a_numeric_axis_with_a_unit() -> None:
    svg = str(
        histogram_chart(
            [Point(t=10.0, v=0.2), Point(t=10.5, v=0.5), Point(t=12.0, v=0.3)],
            label="memory",
            x_unit="harvestable memory, GiB",
        )
    )
    assert "harvestable memory, GiB" in svg
    ticks = re.findall(r'class="tick">([0-9.]+)</text>', svg)
    assert [float(t) for t in ticks] == sorted(float(t) for t in ticks)
    widths = {
        w for w in re.findall(r'<rect x="[^"]+" y="[^"]+" width="([^"]+)"[^>]*class="bar"', svg)
    }
    assert len(widths) == 1  # bins keep one width: 12.0 is placed on the axis, not next to 10.5
