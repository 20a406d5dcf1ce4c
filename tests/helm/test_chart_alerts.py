"""The chart's PrometheusRule: off by default; valid rules that name only exported metrics;
each alert fires on the situation it names and stays quiet otherwise.

Contract, checked on the chart rendered by Helm's own engine:
- ``prometheus.rules.enabled`` (default false) renders one PrometheusRule with the alerts
  GleanerAgentDown, GleanerGateStuckClosed, GleanerUninstrumentedGPU, GleanerNodeTraceStale,
  GleanerJobBelowSLA and GleanerSLAEvictions, in ``prometheus.rules.namespace`` (default the
  release's), with ``labels`` on the object and ``alertLabels`` on every alert;
- Prometheus' ``promtool check rules`` accepts the groups (PromQL and annotation templates);
- every metric an expression names is one the agent or the operator registers;
- ``promtool test rules`` on synthetic series: each alert fires for the broken case and not
  for the healthy one next to it (annotations are left to ``check rules``, so the unit tests
  compare labels only).
"""

from __future__ import annotations

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
ROOT = Path(__file__).resolve().parents[2]
ALERTS = {
    "GleanerAgentDown",
    "GleanerGateStuckClosed",
    "GleanerUninstrumentedGPU",
    "GleanerNodeTraceStale",
    "GleanerJobBelowSLA",
    "GleanerSLAAttainmentLow",
    "GleanerSLAEvictions",
}
promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def rule_objects(render: Render, values: dict[str, Any]) -> list[Manifest]:
    return [m for m in render(values) if m["kind"] == "PrometheusRule"]


def rules_of(obj: Manifest) -> list[dict[str, Any]]:
    return [rule for group in obj["spec"]["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def rule(render: Render) -> Manifest:
    values = {"prometheus": {"rules": {"enabled": True, "alertLabels": {"team": "ml-platform"}}}}
    (obj,) = rule_objects(render, values)
    return obj


def test_off_by_default(render: Render) -> None:
    assert rule_objects(render, {}) == []


def test_the_alerts_their_labels_and_namespace(render: Render, rule: Manifest) -> None:
    assert rule["metadata"]["namespace"] == "gleaner-system"
    rules = rules_of(rule)
    assert {r["alert"] for r in rules} == ALERTS
    for r in rules:
        assert r["labels"]["team"] == "ml-platform"
        assert r["labels"]["severity"] in {"warning", "info", "critical"}
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    values = {
        "prometheus": {
            "rules": {
                "enabled": True,
                "namespace": "monitoring",
                "labels": {"release": "kube-prometheus"},
            }
        }
    }
    (other,) = rule_objects(render, values)
    assert other["metadata"]["namespace"] == "monitoring"
    assert other["metadata"]["labels"]["release"] == "kube-prometheus"


def test_agent_targets_default_to_the_podmonitors_and_can_be_set(render: Render) -> None:
    values: dict[str, Any] = {"prometheus": {"rules": {"enabled": True}}}
    (obj,) = rule_objects(render, values)
    down = next(r for r in rules_of(obj) if r["alert"] == "GleanerAgentDown")
    assert down["expr"] == 'up{namespace="gleaner-system", pod=~"gleaner-agent-.*"} == 0'
    values["prometheus"]["rules"]["agentTargetSelector"] = 'job="kubernetes-pods"'
    (obj,) = rule_objects(render, values)
    down = next(r for r in rules_of(obj) if r["alert"] == "GleanerAgentDown")
    assert down["expr"] == 'up{job="kubernetes-pods"} == 0'


def known_names() -> set[str]:
    registry = CollectorRegistry()
    OperatorMetrics(registry)
    names = exported_names(registry)
    agent = "\n".join(p.read_text() for p in (ROOT / "runtime-agent" / "gleaner").rglob("*.py"))
    for literal in re.findall(r'"(gleaner_[a-z_]+)"', agent):
        names |= {literal, f"{literal}_total"}
    return names | {"up"}


def test_every_metric_named_is_exported(rule: Manifest) -> None:
    known = known_names()
    for r in rules_of(rule):
        named = set(re.findall(r"\bgleaner_[a-z_]+\b", r["expr"]))
        named |= {"up"} if re.match(r"up\{", r["expr"]) else set()
        assert named, r["alert"]
        assert named <= known, (r["alert"], named - known)


@promtool
def test_promtool_accepts_the_rules(rule: Manifest, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr


SERIES = {
    # one agent down, one up; the operator's own target is not an agent
    'up{namespace="gleaner-system", pod="gleaner-agent-aaaaa"}': "1 1 0x40",
    'up{namespace="gleaner-system", pod="gleaner-agent-bbbbb"}': "1x42",
    'up{namespace="gleaner-system", pod="gleaner-operator-cc"}': "0x42",
    # n1/0: gate never opens, online busy 10%  -> stuck
    'gleaner_gpu_offline_enabled_seconds_total{node="n1", gpu="0"}': "0x42",
    'gleaner_gpu_online_busy_seconds_total{node="n1", gpu="0"}': "0+6x42",
    'gleaner_gpu_uninstrumented_processes{node="n1", gpu="0"}': "0x42",
    # n1/1: gate opens -> healthy
    'gleaner_gpu_offline_enabled_seconds_total{node="n1", gpu="1"}': "0+50x42",
    'gleaner_gpu_online_busy_seconds_total{node="n1", gpu="1"}': "0+6x42",
    'gleaner_gpu_uninstrumented_processes{node="n1", gpu="1"}': "0x42",
    # n1/2: gate closed because online is busy 90% -> not stuck
    'gleaner_gpu_offline_enabled_seconds_total{node="n1", gpu="2"}': "0x42",
    'gleaner_gpu_online_busy_seconds_total{node="n1", gpu="2"}': "0+54x42",
    'gleaner_gpu_uninstrumented_processes{node="n1", gpu="2"}': "0x42",
    # n2/0: held for an uninstrumented process -> that alert, not the stuck gate
    'gleaner_gpu_offline_enabled_seconds_total{node="n2", gpu="0"}': "0x42",
    'gleaner_gpu_online_busy_seconds_total{node="n2", gpu="0"}': "0x42",
    'gleaner_gpu_uninstrumented_processes{node="n2", gpu="0"}': "2x42",
    # NodeTrace reports: n1 keeps writing, n2 stops after 5 minutes
    'gleaner_agent_reports_total{node="n1", result="ok"}': "0+4x42",
    'gleaner_agent_reports_total{node="n2", result="ok"}': "0+4x5 20x37",
    # job a below its SLA, job b above
    'gleaner_operator_job_observed_throughput_fraction{namespace="batch", job="a"}': "0.3x42",
    'gleaner_operator_job_throughput_sla{namespace="batch", job="a"}': "0.5x42",
    'gleaner_operator_job_observed_throughput_fraction{namespace="batch", job="b"}': "0.7x42",
    'gleaner_operator_job_throughput_sla{namespace="batch", job="b"}': "0.5x42",
    "gleaner_operator_evictions_total": "0x20 1x22",
    # 4-GPU jobs meet 95% of their windows (20 a minute), 1-GPU jobs 99.5% (200 a minute)
    'gleaner_operator_sla_windows_total{namespace="batch", gpus="4", result="met"}': "0+19x42",
    'gleaner_operator_sla_windows_total{namespace="batch", gpus="4", result="missed"}': "0+1x42",
    'gleaner_operator_sla_windows_total{namespace="batch", gpus="1", result="met"}': "0+199x42",
    'gleaner_operator_sla_windows_total{namespace="batch", gpus="1", result="missed"}': "0+1x42",
}


def alert(name: str, at: str, *labels: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": {"team": "ml-platform", **lab}} for lab in labels],
    }


@promtool
def test_each_alert_fires_for_its_case_only(rule: Manifest, tmp_path: Path) -> None:
    spec = rule["spec"]
    for r in rules_of(rule):
        r.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    warn = {"severity": "warning"}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in SERIES.items()],
                "alert_rule_test": [
                    alert("GleanerAgentDown", "3m"),
                    alert(
                        "GleanerAgentDown",
                        "10m",
                        {**warn, "namespace": "gleaner-system", "pod": "gleaner-agent-aaaaa"},
                    ),
                    alert("GleanerGateStuckClosed", "10m"),
                    alert("GleanerGateStuckClosed", "25m", {**warn, "node": "n1", "gpu": "0"}),
                    alert("GleanerUninstrumentedGPU", "5m"),
                    alert("GleanerUninstrumentedGPU", "15m", {**warn, "node": "n2", "gpu": "0"}),
                    alert("GleanerNodeTraceStale", "10m"),
                    alert(
                        "GleanerNodeTraceStale",
                        "20m",
                        {**warn, "node": "n2", "result": "ok"},
                    ),
                    alert("GleanerJobBelowSLA", "20m"),
                    alert("GleanerJobBelowSLA", "35m", {**warn, "namespace": "batch", "job": "a"}),
                    # Too few windows yet to judge the 4-GPU jobs (below 50), then they
                    # fire; the 1-GPU jobs above the target never do.
                    alert("GleanerSLAAttainmentLow", "1m"),
                    alert("GleanerSLAAttainmentLow", "10m", {**warn, "gpus": "4"}),
                    alert("GleanerSLAEvictions", "15m"),
                    alert("GleanerSLAEvictions", "25m", {"severity": "info"}),
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        ["promtool", "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
