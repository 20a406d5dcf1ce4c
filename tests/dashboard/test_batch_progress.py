"""Batch jobs on the dashboard: requests done of all, and the projected finish against the
deadline ("on track, 2h to spare", "will miss by 3h"), in the JSON API, the pages and the
browser.

The record (``gleaner.testing.dashboard.batch_record``) holds three ``spec.batch`` jobs
whose status the operator's tracking would write: one projected to finish two hours before
its deadline, one three hours after it, one finished.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gleaner.dashboard.app import create_app
from gleaner.dashboard.build import build_dashboard
from gleaner.dashboard.sources import StaticSource
from gleaner.dashboard.views import outlook
from gleaner.testing.dashboard import CHROMIUM, CHROMIUM_ARGS, NOW, batch_record, serving


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(StaticSource.from_record(batch_record()))) as c:
        yield c


def test_snapshot_holds_progress_and_outlook() -> None:
    snap = build_dashboard(batch_record()).snapshot
    on_track = snap.job("batch", "nightly-summaries")
    late = snap.job("batch", "backfill-labels")
    done = snap.job("batch", "weekly-report")
    assert on_track is not None and on_track.batch is not None
    assert (on_track.batch.requests_done, on_track.batch.requests_total) == (2500, 9000)
    assert on_track.batch.outlook == "on_track"
    assert on_track.batch.margin_seconds == pytest.approx(2 * 3600)
    assert outlook(on_track.batch) == "on track, 2h to spare"
    assert late is not None and late.batch is not None
    assert late.batch.outlook == "late"
    assert outlook(late.batch) == "will miss by 3h"
    assert done is not None and done.batch is not None
    assert done.batch.outlook == "finished" and done.batch.requests_done == 500
    # a job without spec.batch has no batch view
    translate = snap.job("batch", "translate")
    assert translate is not None and translate.batch is None


def test_outlook_is_judged_at_the_record_time() -> None:
    # The same status read six hours later: the deadline (five hours after the progress
    # read) has passed with requests left.
    record = batch_record()
    passed = build_dashboard(
        record.model_copy(update={"generated_at": NOW + timedelta(hours=6)})
    ).snapshot.job("batch", "nightly-summaries")
    assert passed is not None and passed.batch is not None
    assert passed.batch.outlook == "passed"
    assert outlook(passed.batch) == "deadline passed 1h ago"


def test_api_and_pages(client: TestClient) -> None:
    job = client.get("/api/jobs/batch/backfill-labels").json()
    assert job["batch"]["requestsDone"] == 1200
    assert job["batch"]["requestsTotal"] == 10000
    assert job["batch"]["outlook"] == "late"
    assert job["batch"]["marginSeconds"] == pytest.approx(-3 * 3600)
    listed = client.get("/api/jobs", params={"sort": "requests", "order": "desc"}).json()
    with_progress = [j["name"] for j in listed if j.get("batch")]
    # sorted by share done: 500/500, 2500/9000, 1200/10000
    assert with_progress == ["weekly-report", "nightly-summaries", "backfill-labels"]
    page = client.get("/jobs").text
    assert "Requests done" in page and "2,500 / 9,000" in page
    assert "will miss by 3h" in page and "on track, 2h to spare" in page
    detail = client.get("/jobs/batch/nightly-summaries").text
    assert "Batch progress" in detail and 'id="batch-progress"' in detail
    assert "on track, 2h to spare" in detail


def test_jobs_without_batches_show_no_batch_columns() -> None:
    from gleaner.testing.dashboard import example_record

    with TestClient(create_app(StaticSource.from_record(example_record()))) as c:
        page = c.get("/jobs").text
    assert "Requests done" not in page and "Deadline" not in page


playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not installed")
def test_in_the_browser(tmp_path: Path) -> None:
    """The pages as a person sees them: the progress bar has a size, the outlook reads in
    words, and the wider jobs table still fits the window (no horizontal scroll)."""
    app = create_app(StaticSource.from_record(batch_record()))
    problems: list[str] = []
    with serving(app) as url, playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page: Any = context.new_page()
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on(
                "console",
                lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
            )
            page.goto(url + "/jobs")
            page.screenshot(path=str(tmp_path / "jobs.png"), full_page=True)
            late = page.locator("#jobs-table span.outlook.late")
            assert late.inner_text() == "will miss by 3h"
            assert page.locator("#jobs-table span.outlook.on_track").inner_text() == (
                "on track, 2h to spare"
            )
            wide = page.evaluate(
                "document.documentElement.scrollWidth > document.documentElement.clientWidth"
            )
            assert not wide
            page.goto(url + "/jobs/batch/backfill-labels")
            page.screenshot(path=str(tmp_path / "job.png"), full_page=True)
            bar = page.locator("#batch-progress progress").bounding_box()
            assert bar is not None and bar["width"] > 100 and bar["height"] > 5
            text = page.locator("#batch-progress").inner_text()
            assert "1,200 of 10,000 requests answered (12%)" in text
            assert page.locator("span.outlook.late").inner_text() == "will miss by 3h"
        finally:
            browser.close()
    assert problems == []
