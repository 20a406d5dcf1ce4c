"""A job placed with a planned exit on the dashboard: the JSON API's ``plannedExit``, the
badge beside its node in the jobs table and on its page, with what it means.

The record (``gleaner.testing.dashboard.planned_exit_record``) is the example cluster plus
a 4-GPU job running on gpu-node-c whose ``status.placement.plannedExit`` is true. Once the
job has left by its planned exit, it counts a move, not an SLA eviction.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gleaner.dashboard.app import create_app
from gleaner.dashboard.build import build_dashboard
from gleaner.dashboard.model import Point
from gleaner.dashboard.sources import StaticSource
from gleaner.dashboard.views import PLANNED_EXIT_HINT, job_charts
from gleaner.scheduler.lifecycle import PlannedExitRule
from gleaner.testing.dashboard import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PLANNED_EXIT_JOB,
    planned_exit_record,
    serving,
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(StaticSource.from_record(planned_exit_record()))) as c:
        yield c


def test_the_snapshot_marks_only_the_planned_exit_placement() -> None:
    snap = build_dashboard(planned_exit_record()).snapshot
    marked = [j.key for j in snap.jobs if j.planned_exit]
    assert marked == [f"batch/{PLANNED_EXIT_JOB}"]
    job = snap.job("batch", PLANNED_EXIT_JOB)
    assert job is not None and job.node == "gpu-node-c" and job.gpus == [0, 1, 2, 3]


def test_a_finished_job_shows_no_planned_exit() -> None:
    record = planned_exit_record()
    jobs = [dict(j) for j in record.offline_jobs]
    for j in jobs:
        if j["metadata"]["name"] == PLANNED_EXIT_JOB:
            j["status"] = {**j["status"], "phase": "Succeeded"}
    snap = build_dashboard(record.model_copy(update={"offline_jobs": jobs})).snapshot
    job = snap.job("batch", PLANNED_EXIT_JOB)
    assert job is not None and job.ran_on == "gpu-node-c" and not job.planned_exit


def test_a_job_that_left_by_its_planned_exit_counts_a_move_not_an_eviction() -> None:
    record = planned_exit_record()
    before = build_dashboard(record).snapshot
    jobs = [dict(j) for j in record.offline_jobs]
    for j in jobs:
        if j["metadata"]["name"] == PLANNED_EXIT_JOB:
            placement = j["status"]["placement"]
            exit_record = {
                "time": placement["decidedAt"],
                "node": placement["node"],
                "gpuIndices": placement["gpuIndices"],
                "reason": PlannedExitRule().exit_reason,
                "sla": 0.5,
                "predictedThroughputFraction": placement["throughputFraction"],
                "observedThroughputFraction": 0.7,
            }
            j["status"] = {"phase": "Evicted", "moveCount": 1, "evictions": [exit_record]}
    data = build_dashboard(record.model_copy(update={"offline_jobs": jobs}))
    job = data.snapshot.job("batch", PLANNED_EXIT_JOB)
    assert job is not None and job.node is None and not job.planned_exit
    assert (job.eviction_count, job.move_count) == (0, 1)
    assert [e.reason for e in job.evictions] == [PlannedExitRule().exit_reason]
    assert data.snapshot.summary.evictions == before.summary.evictions
    with TestClient(create_app(StaticSource(data))) as c:
        page = c.get(f"/jobs/batch/{PLANNED_EXIT_JOB}").text
    assert "<dt>Moves</dt><dd>1 " in page and "planned exit: its node" in page
    # A record written before status.evictions[].type existed: told apart by its reason.
    assert [e.type for e in job.evictions] == ["PlannedExit"]
    assert '<td class="nowrap">planned exit</td>' in page and "Evictions and moves" in page


def test_each_record_is_shown_as_what_it_was() -> None:
    record = planned_exit_record()
    jobs = [dict(j) for j in record.offline_jobs]
    for j in jobs:
        if j["metadata"]["name"] == PLANNED_EXIT_JOB:
            placement = j["status"]["placement"]
            base = {
                "time": placement["decidedAt"], "gpuIndices": placement["gpuIndices"],
                "sla": 0.5, "predictedThroughputFraction": 0.6, "observedThroughputFraction": 0.4,
            }  # fmt: skip
            j["status"] = {
                "phase": "Evicted",
                "evictionCount": 1,
                "moveCount": 1,
                "evictions": [
                    {**base, "node": "gpu-node-a", "reason": "missed SLA", "type": "SLAEviction"},
                    {**base, "node": "gpu-node-b", "reason": "a peak is coming", "type": "Move"},
                ],
            }
    data = build_dashboard(record.model_copy(update={"offline_jobs": jobs}))
    job = data.snapshot.job("batch", PLANNED_EXIT_JOB)
    assert job is not None
    assert [(e.node, e.type) for e in job.evictions] == [
        ("gpu-node-a", "SLAEviction"), ("gpu-node-b", "Move")
    ]  # fmt: skip
    with TestClient(create_app(StaticSource(data))) as c:
        page = c.get(f"/jobs/batch/{PLANNED_EXIT_JOB}").text
        api = c.get(f"/api/jobs/batch/{PLANNED_EXIT_JOB}").json()
    assert [e["type"] for e in api["evictions"]] == ["SLAEviction", "Move"]
    rows = page.split('id="job-evictions"')[1].split("</table>")[0]
    assert rows.index("SLA eviction") < rows.index("moved before a peak")
    assert "evicted from gpu-node-b" not in page
    # The timeline marks each record as what it was.
    t0 = job.evictions[0].time.timestamp()
    observed = [Point(t=t0 - 600, v=0.5), Point(t=t0 + 600, v=0.5)]
    svg = str(job_charts(job.model_copy(update={"observed_series": observed}))["timeline"])
    assert "evicted from gpu-node-a" in svg and "moved from gpu-node-b" in svg
    assert "evicted from gpu-node-b" not in svg


def test_api_and_pages(client: TestClient) -> None:
    job = client.get(f"/api/jobs/batch/{PLANNED_EXIT_JOB}").json()
    assert job["plannedExit"] is True
    assert client.get("/api/jobs/batch/translate").json()["plannedExit"] is False
    listed = {j["name"]: j["plannedExit"] for j in client.get("/api/jobs").json()}
    assert [name for name, planned in listed.items() if planned] == [PLANNED_EXIT_JOB]
    page = client.get("/jobs").text
    assert page.count('class="tag planned-exit"') == 1
    assert f'title="{PLANNED_EXIT_HINT}"' in page
    detail = client.get(f"/jobs/batch/{PLANNED_EXIT_JOB}").text
    assert 'class="tag planned-exit"' in detail and 'id="planned-exit"' in detail
    other = client.get("/jobs/batch/translate").text
    assert "planned-exit" not in other


playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not installed")
def test_in_the_browser() -> None:
    """The badge sits in the job's Node cell, with its meaning as the tooltip."""
    app = create_app(StaticSource.from_record(planned_exit_record()))
    problems: list[str] = []
    with serving(app) as url, playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page: Any = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on(
                "console",
                lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
            )
            page.goto(url + "/jobs")
            badges = page.locator("#jobs-table td span.planned-exit")
            assert badges.count() == 1
            row = page.locator("#jobs-table tbody tr", has=page.locator("span.planned-exit"))
            assert row.locator("td").first.inner_text() == PLANNED_EXIT_JOB
            assert row.locator("td").nth(3).inner_text().startswith("gpu-node-c")
            assert badges.get_attribute("title") == PLANNED_EXIT_HINT
            box = badges.bounding_box()
            assert box is not None and box["width"] > 20
        finally:
            browser.close()
    assert problems == []
