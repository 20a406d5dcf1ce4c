"""The pages in headless Chromium (Debian's /usr/bin/chromium driven by Playwright).

A person's checks, automated: every page loads without console errors or failed requests,
the plots render with a real size, the jobs table sorts and filters, an eviction report
opens and exports as CSV and JSON.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gleaner.dashboard.app import create_app
from gleaner.dashboard.sources import StaticSource
from gleaner.testing.dashboard import CHROMIUM, CHROMIUM_ARGS, example_record, serving

playwright_api = pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not installed")

PAGES = [
    "/",
    "/nodes",
    "/nodes/gpu-node-a",
    "/nodes/gpu-node-c",
    "/jobs",
    "/jobs/batch/translate",
    "/jobs/batch/embed-docs",
    "/jobs/research/from-configmap",
    "/jobs/batch/giant-batch",
    "/evictions",
    "/evictions/batch.translate-old-sla-eviction-1",
]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_app(StaticSource.from_record(example_record()))
    with serving(app) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            yield b
        finally:
            b.close()


class Watched:
    """A page that records console errors, page errors and failed requests."""

    def __init__(self, browser: Any, **context: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, **context)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on(
            "console",
            lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None,
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"pageerror: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.url}"))
        self.page.on(
            "response",
            lambda r: (
                self.problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None
            ),
        )


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    w = Watched(browser, accept_downloads=True)
    try:
        yield w
    finally:
        w.context.close()


@pytest.mark.slow
def test_every_page_loads_without_errors_and_plots_render(url: str, watched: Watched) -> None:
    page = watched.page
    for path in PAGES:
        response = page.goto(url + path)
        assert response is not None and response.status == 200, path
        page.wait_for_load_state("load")
        assert page.locator("header.top nav a").count() == 4
        charts = page.locator("svg.chart")
        for i in range(charts.count()):
            box = charts.nth(i).bounding_box()
            assert box is not None and box["width"] > 50 and box["height"] > 30, (path, i)
        # stylesheet applied (our own CSS was served and used)
        bg = page.evaluate("getComputedStyle(document.querySelector('header.top')).backgroundColor")
        assert bg == "rgb(15, 23, 42)", path
    assert watched.problems == []


def test_overview_plots(url: str, watched: Watched) -> None:
    page = watched.page
    page.goto(url + "/")
    assert page.locator("svg.chart.line").count() == 4
    assert page.locator("svg.chart.line polyline.series").count() == 5  # 3 + 2 event series
    first = page.locator("svg.chart.line polyline.series").first
    box = first.bounding_box()
    assert box is not None and box["width"] > 200
    assert page.locator("svg.chart.bar rect.bar").count() == 3  # one per node


def test_node_page_heatmap_and_memory(url: str, watched: Watched) -> None:
    page = watched.page
    page.goto(url + "/nodes/gpu-node-a")
    assert page.locator("svg.heatmap rect.cell").count() == 16
    assert page.locator("svg.chart.bar").count() == 1 + 4  # idle + one histogram per GPU
    assert page.locator("#gpus-table tbody tr").count() == 4


def column(page: Any, table: str, index: int) -> list[str]:
    return [
        str(v)
        for v in page.eval_on_selector_all(
            f"#{table} tbody tr:not([hidden])",
            f"rows => rows.map(r => r.cells[{index}].getAttribute('data-value'))",
        )
    ]


def test_jobs_table_sorts_and_filters(url: str, watched: Watched) -> None:
    page = watched.page
    page.goto(url + "/jobs")
    names = column(page, "jobs-table", 0)
    assert names == sorted(names) and len(names) == 7
    observed_header = page.locator("#jobs-table th[data-key=observed]")
    observed_header.click()
    assert observed_header.get_attribute("aria-sort") == "ascending"
    values = column(page, "jobs-table", 7)
    numbers = [float(v) for v in values if v]
    assert numbers == sorted(numbers) == [0.19, 0.44, 0.64]
    assert values[3:] == ["", "", "", ""]  # missing values last
    observed_header.click()
    assert observed_header.get_attribute("aria-sort") == "descending"
    assert [float(v) for v in column(page, "jobs-table", 7) if v] == [0.64, 0.44, 0.19]
    assert "sort=observed" in page.url and "order=desc" in page.url
    # the phase filter reloads with the server-side filter, keeping the sort
    page.select_option("select[name=phase]", "Running")
    page.wait_for_url("**/jobs?phase=Running*")
    assert sorted(column(page, "jobs-table", 2)) == ["Running"] * 3
    # the text filter hides rows at once
    page.fill("input[data-filter-text]", "embed")
    assert column(page, "jobs-table", 0) == ["embed-docs"]
    assert page.locator("#jobs-count").inner_text() == "1 jobs"
    assert watched.problems == []


def test_job_page_why_here(url: str, watched: Watched) -> None:
    page = watched.page
    page.goto(url + "/jobs/batch/translate")
    assert page.locator("figure.factors svg rect.bar").count() == 4
    assert page.locator("#runner-ups tbody tr").count() >= 2
    assert page.locator("svg.chart.line line.reference").count() == 1  # the SLA line
    assert "below SLA" in page.locator("dl.facts").inner_text()


def test_eviction_report_opens_and_exports(url: str, watched: Watched, tmp_path: Path) -> None:
    page = watched.page
    page.goto(url + "/evictions")
    assert page.locator("#evictions-table tbody tr").count() == 2
    page.locator("#evictions-table a.report-link").first.click()
    page.wait_for_url("**/evictions/batch.translate-old-sla-eviction-1")
    assert "batch/translate-old" in page.locator("h1").inner_text()
    assert "4 of the last 5 windows" in page.locator("#eviction-reason").inner_text()
    with page.expect_download() as info:
        page.click("#export-report-json")
    report = json.loads(Path(info.value.path()).read_text())
    assert report["id"] == "batch.translate-old-sla-eviction-1" and report["sla"] == 0.6

    page.goto(url + "/evictions")
    with page.expect_download() as info:
        page.click("#export-csv")
    download = info.value
    assert download.suggested_filename == "sla-evictions.csv"
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text())))
    assert [r["job"] for r in rows] == ["translate-old", "long-context"]
    assert [r["outcome"] for r in rows] == ["requeued", "failed"]
    with page.expect_download() as info:
        page.click("#export-json")
    exported = json.loads(Path(info.value.path()).read_text())
    assert [e["id"] for e in exported] == [r["id"] for r in rows]
    assert watched.problems == []


def test_unknown_page_is_a_404_page(url: str, browser: Any) -> None:
    w = Watched(browser)
    try:
        response = w.page.goto(url + "/jobs/batch/nope")
        assert response is not None and response.status == 404
        assert "There is no job batch/nope" in w.page.inner_text("main")
    finally:
        w.context.close()
