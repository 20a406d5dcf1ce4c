"""Scenario 2: an online burst makes a job miss its SLA persistently; it is evicted and moved.

The Mistral example lands on some node. An online burst injected through that node's agent
(``POST /simulate/burst``) keeps the job's GPU busy: the agent's compute gate closes, its
NodeTrace shows the offline-enabled time collapsing, the operator's SLA monitor sees two of
three windows missed and evicts. The eviction must leave every trace a user looks for: the
``SLAViolation`` Event, the record in ``status.evictions``, the eviction-report ConfigMap,
``gleaner report evictions --format json``, the dashboard's ``/api/evictions``, and the
operator's eviction counter; and the job must run again on another node, under a new Pod
name, and meet its SLA there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gleaner.testing.system import GleanerSystem, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = "mistral-7b-ticket-triage"
SLA = 0.6


def _status(job: dict[str, Any]) -> dict[str, Any]:
    return job.get("status") or {}


def test_burst_evicts_and_reschedules(
    start_system: Callable[..., GleanerSystem], examples: Path
) -> None:
    system = start_system()
    system.apply_file(examples / "mistral-7b-profile-configmap.yaml")
    first = system.wait_phase(JOB, "Running")["status"]["placement"]

    # The SLA monitor watches it and finds the SLA met before anything happens.
    system.wait_job(
        JOB,
        lambda j: (_status(j).get("observed") or {}).get("throughputFraction", 0) >= SLA,
        "an observed window that meets the SLA",
    )

    answer = system.burst(first["node"], first["gpuIndices"], seconds=300, busy=1.0)
    assert answer["gpus"] == first["gpuIndices"]

    # The agent sees it: the burst GPUs' online side is busy all the time (Prometheus).
    gpu_filter = "|".join(map(str, first["gpuIndices"]))
    busy_query = (
        f'rate(gleaner_gpu_online_busy_seconds_total{{node="{first["node"]}",'
        f'gpu=~"{gpu_filter}"}}[3s])'
    )
    poll(
        lambda: (
            (values := system.prom_values(busy_query)) and all(v > 0.9 for v in values.values())
        ),
        timeout=30,
        what="Prometheus showing the burst GPUs online-busy",
    )

    job = system.wait_job(
        JOB,
        lambda j: _status(j).get("evictionCount") == 1 and _status(j).get("phase") == "Running",
        "evicted once and running again",
        timeout=90,
    )
    status = job["status"]
    now = status["placement"]
    assert now["node"] != first["node"], "rescheduled to another node"
    assert first["node"] in status["excludedNodes"]
    assert now["throughputFraction"] >= SLA
    record = status["evictions"][0]
    assert record["node"] == first["node"]
    assert record["gpuIndices"] == first["gpuIndices"]
    assert record["observedThroughputFraction"] < SLA
    assert record["predictedThroughputFraction"] == pytest.approx(first["throughputFraction"])
    assert record["reason"]
    report_name = record["report"]

    # One Pod, the new attempt's, on the new node; the evicted one is gone.
    pods = system.pods("batch", JOB)
    assert [p["metadata"]["name"] for p in pods] == [f"{JOB}-1"]
    assert pods[0]["spec"]["nodeName"] == now["node"]
    assert pods[0]["metadata"]["labels"]["gleaner.dev/attempt"] == "1"
    assert status["pods"][-1] == f"{JOB}-1"

    # The Event.
    violations = [e for e in system.events("batch", JOB) if e["reason"] == "SLAViolation"]
    assert len(violations) == 1
    assert violations[0]["type"] == "Warning"
    assert first["node"] in violations[0]["message"]

    # The eviction-report ConfigMap.
    cms = system.api.configmaps("batch", "gleaner.dev/report=sla-eviction")
    assert [cm.metadata.name for cm in cms] == [report_name]
    assert cms[0].metadata.labels["gleaner.dev/job"] == JOB
    report = json.loads(cms[0].data["report.json"])
    assert report["job"] == f"batch/{JOB}"
    assert report["node"] == first["node"]
    assert report["gpuUUIDs"] == first["gpuUUIDs"]
    assert report["sla"] == SLA
    assert report["observed"]["windowsMissed"] >= 2
    assert report["outcome"] == "requeued"

    # ... as `gleaner report evictions` shows it.
    done = system.gleaner("report", "evictions", "--namespace", "batch", "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert len(listed) == 1
    assert listed[0]["configMap"] == report_name
    assert listed[0]["job"] == f"batch/{JOB}"
    assert listed[0]["node"] == first["node"]
    assert listed[0]["observed"]["mean"] < SLA
    table = system.gleaner("report", "evictions", "--namespace", "batch")
    assert table.returncode == 0, table.stderr
    assert first["node"] in table.stdout

    # The operator counted it; Prometheus scraped the counter.
    assert system.operator_metric("gleaner_operator_evictions_total") == 1
    poll(
        lambda: (
            1 in system.prom_values('gleaner_operator_evictions_total{role="operator"}').values()
        ),
        timeout=20,
        what="Prometheus scraping the operator's eviction counter",
    )

    # The job now runs on the new node: the agent there accounts its timeslices, and the SLA
    # monitor sees it meet its SLA again (no second eviction).
    new_rate = (
        "rate(gleaner_offline_job_timeslice_seconds_total"
        f'{{namespace="batch",job="{JOB}",node="{now["node"]}"}}[3s])'
    )
    poll(
        lambda: (values := system.prom_values(new_rate)) and all(v > 0 for v in values.values()),
        timeout=30,
        what=f"timeslices of {JOB} on {now['node']}",
    )
    system.wait_job(
        JOB,
        lambda j: (
            (_status(j).get("observed") or {}).get("updatedAt", "") > now["decidedAt"]
            and (_status(j).get("observed") or {}).get("throughputFraction", 0) >= SLA
        ),
        "an observed window on the new node that meets the SLA",
    )
    assert system.job(JOB)["status"]["evictionCount"] == 1

    # Every SLA window the monitor judged is counted by result and job size: the misses on
    # the first node (at least those the report holds), then met windows on the new one.
    gpus = str(len(first["gpuIndices"]))

    def windows(result: str) -> float:
        value = system.operator_metric(
            "gleaner_operator_sla_windows_total", namespace="batch", gpus=gpus, result=result
        )
        return value or 0.0

    assert windows("missed") >= report["observed"]["windowsMissed"]
    poll(lambda: windows("met") >= 1, timeout=30, what="a met SLA window counted")

    # The dashboard API shows the report and the job's history.
    evictions = system.wait_dashboard(
        "/api/evictions", lambda body: len(body) == 1, "one eviction report"
    )
    assert evictions[0]["job"] == f"batch/{JOB}"
    assert evictions[0]["node"] == first["node"]
    assert evictions[0]["configMap"] == report_name
    status_code, single = system.dashboard(f"/api/evictions/{evictions[0]['id']}")
    assert status_code == 200
    assert single["reason"] == report["reason"]
    view = system.wait_dashboard(
        f"/api/jobs/batch/{JOB}",
        lambda body: body["node"] == now["node"] and body["evictionCount"] == 1,
        "the job on its new node with one eviction",
    )
    assert first["node"] in view["excludedNodes"]
