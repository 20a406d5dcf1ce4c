"""The Grafana dashboard: shipped by the chart, valid PromQL, contract metric names only.

Every query parses with Prometheus' own ``promtool check rules`` (Grafana's ``$`` variables
replaced by concrete values), names only metrics of the agent contract (DESIGN.md "Agent
metrics") or families the operator really registers (``OperatorMetrics``), and the panels
cover what the issue asks for: utilization harvested, preemptions, reclamations, SLA
attainment and evictions.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gleaner.operator.metrics import OperatorMetrics, exported_names

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]
DASHBOARD = Path(__file__).resolve().parents[2] / "helm/gleaner/files/grafana/gleaner.json"

# DESIGN.md "Agent metrics": the contract between the agents and everything that reads them.
AGENT_COUNTERS = {
    "gleaner_gpu_offline_enabled_seconds_total",
    "gleaner_gpu_online_busy_seconds_total",
    "gleaner_gpu_pair_busy_overlap_seconds_total",
    "gleaner_gpu_pair_busy_union_seconds_total",
    "gleaner_online_requests_total",
    "gleaner_preemptions_total",
    "gleaner_memory_reclaim_events_total",
    "gleaner_memory_reclaimed_bytes_total",
    "gleaner_kv_blocks_invalidated_total",
    "gleaner_offline_job_timeslice_seconds_total",
}
AGENT_GAUGES = {
    "gleaner_gpu_harvestable_memory_bytes",
    "gleaner_memory_reservation_headroom_bytes",
    "gleaner_memory_release_interval_seconds",
}
AGENT_HISTOGRAMS = {"gleaner_gpu_harvestable_memory_bytes", "gleaner_online_request_preemptions"}


def operator_series_names() -> set[str]:
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    return exported_names(registry)


def known_series() -> set[str]:
    histogram_series = {
        f"{name}{suffix}" for name in AGENT_HISTOGRAMS for suffix in ("_bucket", "_count", "_sum")
    }
    return AGENT_COUNTERS | AGENT_GAUGES | histogram_series | operator_series_names()


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def concrete(expr: str) -> str:
    return expr.replace("$__rate_interval", "5m").replace("$node", ".*")


def test_every_query_names_only_contract_metrics() -> None:
    known = known_series()
    assert "gleaner_operator_evictions_total" in known
    used: set[str] = set()
    for title, expr in queries():
        names = set(re.findall(r"\bgleaner_[a-z0-9_]+", expr))
        assert names, f"{title}: no Gleaner metric in {expr}"
        assert names <= known, f"{title}: unknown metrics {names - known}"
        used |= names
    # Each family the scheduler and the SLA story rely on is on the dashboard.
    for needed in (
        "gleaner_gpu_offline_enabled_seconds_total",
        "gleaner_preemptions_total",
        "gleaner_memory_reclaim_events_total",
        "gleaner_operator_evictions_total",
        "gleaner_operator_jobs",
        "gleaner_operator_job_observed_throughput_fraction",
        "gleaner_operator_job_throughput_sla",
    ):
        assert needed in used


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) missing")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"gleaner:dashboard_query_{i}", "expr": concrete(expr)}
                    for i, (_, expr) in enumerate(queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries())} rules found" in result.stdout + result.stderr


def test_promtool_refuses_a_broken_query(tmp_path: Path) -> None:
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian prometheus) missing")
    path = tmp_path / "rules.yaml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "a:b", "expr": "sum(("}]}]})
    )
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True)
    assert result.returncode != 0


def test_dashboard_covers_the_issue_topics_and_has_unique_ids() -> None:
    board = dashboard()
    titles = " | ".join(panel["title"] for panel in board["panels"]).lower()
    for topic in ("harvested", "preemptions", "reclamation", "sla attainment", "evictions"):
        assert topic in titles
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    assert board["uid"] == "gleaner-overview"
    variables = {v["name"] for v in board["templating"]["list"]}
    assert variables == {"datasource", "node"}
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_chart_ships_the_dashboard_for_the_grafana_sidecar(render: Render) -> None:
    assert not [m for m in render() if m["kind"] == "ConfigMap"]
    manifests = render({"grafana": {"dashboard": {"enabled": True, "namespace": "monitoring"}}})
    configmap = next(m for m in manifests if m["kind"] == "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert json.loads(configmap["data"]["gleaner.json"]) == dashboard()
