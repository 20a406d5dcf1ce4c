"""The JSON API and the pages over snapshot data (FastAPI's TestClient), and the file source."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gleaner.dashboard.app import create_app
from gleaner.dashboard.build import build_dashboard
from gleaner.dashboard.model import ClusterRecord, ClusterSnapshot, EvictionView, JobView
from gleaner.dashboard.sources import SnapshotSource, SourceError, StaticSource
from gleaner.scheduler import EvictionReport


def test_cluster_and_snapshot(client: TestClient) -> None:
    r = client.get("/api/cluster")
    assert r.status_code == 200
    body = r.json()
    assert body["source"] == "simulation" and body["summary"]["gpus"] == 14
    assert len(body["series"]["harvestedUtilization"]) == 48
    snap = ClusterSnapshot.model_validate(client.get("/api/snapshot").json())
    assert len(snap.jobs) == 7


def test_nodes(client: TestClient) -> None:
    nodes = client.get("/api/nodes").json()
    assert [n["name"] for n in nodes] == ["gpu-node-a", "gpu-node-b", "gpu-node-c"]
    a = client.get("/api/nodes/gpu-node-a").json()
    assert len(a["overlap"]) == 4 and a["gpus"][0]["offlineJob"] == "batch/summarize-news"
    assert a["gpus"][0]["memory"]["p10"] <= a["gpus"][0]["memory"]["p90"]
    assert client.get("/api/nodes/nope").status_code == 404


def test_jobs_filter_sort_and_detail(client: TestClient) -> None:
    r = client.get("/api/jobs", params={"phase": "Running", "sort": "sla", "order": "desc"})
    assert [j["name"] for j in r.json()] == ["summarize-news", "translate", "embed-docs"]
    r = client.get("/api/jobs", params={"node": "gpu-node-b"})
    assert [j["name"] for j in r.json()] == ["translate"]
    job = JobView.model_validate(client.get("/api/jobs/batch/translate").json())
    assert job.runner_ups and job.runner_ups[0].node in {"gpu-node-a", "gpu-node-c"}
    assert job.predicted is not None and job.predicted.throughput_fraction == pytest.approx(0.21)
    assert len(job.observed_series) == 24
    assert client.get("/api/jobs/batch/nope").status_code == 404


def test_evictions_json_csv_and_detail(client: TestClient) -> None:
    reports = [EvictionView.model_validate(e) for e in client.get("/api/evictions").json()]
    assert [r.outcome for r in reports] == ["requeued", "failed"]
    r = client.get("/api/evictions", params={"format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["id"] for row in rows] == [e.id for e in reports]
    one = client.get(f"/api/evictions/{reports[0].id}").json()
    # the report survives the round trip through the scheduler's own parser
    parsed = EvictionReport.from_json({**one, "job": one["job"]})
    assert parsed.sla == 0.6 and parsed.excluded_nodes == ("gpu-node-b",)
    assert client.get("/api/evictions/batch.nope").status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "/api/jobs?phase=Sleeping",
        "/api/jobs?sort=color",
        "/api/jobs?order=sideways",
        "/api/jobs?node=" + "x" * 300,
        "/api/evictions?format=xml",
        "/jobs?phase=Sleeping",
        "/jobs?sort=%00",
    ],
)
def test_malformed_queries_are_422(client: TestClient, url: str) -> None:
    r = client.get(url)
    assert r.status_code == 422, r.text


@pytest.mark.parametrize(
    "url",
    [
        "/api/nodes/%00",
        "/api/jobs/a/b/c",
        "/api/evictions/..%2F..%2Fetc",
        "/nodes/%2e%2e",
        "/jobs/x/y",
        "/evictions/nope",
        "/static/../app.py",
        "/static/dashboard.py",
        "/static/%2e%2e%2fapp.py",
        "/nope",
    ],
)
def test_unknown_things_are_404_never_500(client: TestClient, url: str) -> None:
    r = client.get(url)
    assert r.status_code == 404, (url, r.status_code, r.text[:200])


def test_pages_render(client: TestClient) -> None:
    for url in [
        "/",
        "/nodes",
        "/nodes/gpu-node-c",
        "/jobs",
        "/jobs?phase=Running&sort=observed&order=desc",
        "/jobs/batch/embed-docs",
        "/jobs/research/from-configmap",
        "/evictions",
        "/evictions/research.long-context-sla-eviction-1",
    ]:
        r = client.get(url)
        assert r.status_code == 200, url
        assert r.headers["content-type"].startswith("text/html")
        assert "<svg" in r.text or "<table" in r.text
    page = client.get("/jobs?phase=Running").text
    assert page.count('data-phase="Running"') == 3 and 'data-phase="Failed"' not in page


def test_openapi_documents_the_api(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    for path in [
        "/api/cluster",
        "/api/nodes",
        "/api/nodes/{name}",
        "/api/jobs",
        "/api/jobs/{namespace}/{name}",
        "/api/evictions",
        "/api/evictions/{report_id}",
    ]:
        assert path in paths, path
    assert "/jobs" not in paths  # pages are not API
    params = {p["name"] for p in paths["/api/jobs"]["get"]["parameters"]}
    assert params == {"phase", "node", "sort", "order"}
    assert "JobView" in schema["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_snapshot_source_reads_records_and_snapshots(tmp_path: Path, record: ClusterRecord) -> None:
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(record.to_json()))
    source = SnapshotSource(path)
    snap = source.data().snapshot
    assert len(snap.nodes) == 3
    # a ready snapshot file is served as is
    other = tmp_path / "snapshot.json"
    other.write_text(json.dumps(snap.to_json()))
    again = SnapshotSource(other).data().snapshot
    assert again == snap
    # the file is re-read when it changes
    record.title = "changed"
    path.write_text(json.dumps(record.to_json()))
    stamp = time.time() + 5
    os.utime(path, (stamp, stamp))
    assert source.data().snapshot.title == "changed"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("{", "not JSON"),
        ("[]", "expected a JSON object"),
        ('{"kind": "Pod"}', "kind must be ClusterRecord or ClusterSnapshot"),
        ('{"kind": "ClusterRecord", "source": "moon"}', "generatedAt"),
    ],
)
def test_snapshot_source_errors_are_one_line(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SourceError, match=message) as info:
        SnapshotSource(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_unavailable_source_is_503() -> None:
    class Broken:
        def data(self) -> object:
            raise SourceError("cannot read the cluster: connection refused")

    with TestClient(create_app(Broken())) as c:  # type: ignore[arg-type]
        r = c.get("/api/cluster")
        assert r.status_code == 503 and "connection refused" in r.json()["detail"]
        assert c.get("/").status_code == 503


def test_a_nodes_uninstrumented_gpus_show_in_its_json_and_page(record: ClusterRecord) -> None:
    traces = [dict(t) for t in record.node_traces]
    status = dict(traces[0]["status"])
    per_gpu = [dict(g) for g in status["perGPU"]]
    per_gpu[-1]["uninstrumentedProcesses"] = [{"pid": 0, "pod": "prod/web", "reason": "unshimmed"}]
    status.update(perGPU=per_gpu, uninstrumentedGuard="Enforced")
    traces[0] = {**traces[0], "status": status}
    name = traces[0]["metadata"]["name"]
    data = build_dashboard(record.model_copy(update={"node_traces": traces}))
    with TestClient(create_app(StaticSource(data))) as c:
        node = c.get(f"/api/nodes/{name}").json()
        page = c.get(f"/nodes/{name}").text
    assert node["uninstrumentedGuard"] == "Enforced"
    assert node["gpus"][-1]["uninstrumented"] == ["pod prod/web (unshimmed)"]
    assert all(g["uninstrumented"] == [] for g in node["gpus"][:-1])
    assert f"GPU {per_gpu[-1]['index']}: pod prod/web (unshimmed)" in page
    # A node whose agent says nothing about the guard shows nothing.
    other = next(n for n in data.snapshot.nodes if n.name != name)
    assert other.uninstrumented_guard is None
    assert all(g.uninstrumented == [] for g in other.gpus)
