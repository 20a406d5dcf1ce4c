"""The operator's HTTP app (health, readiness, metrics) and its own metrics registry."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from gleaner.api import Observed, OfflineJobStatus, Phase
from gleaner.api.contract import ANNOTATION_SLA_WINDOWS
from gleaner.operator.http import Health, build_app
from gleaner.operator.metrics import OperatorMetrics, cluster_measures, job_gauges
from gleaner.operator.slahistory import dump_history, history_for
from gleaner.scheduler.monitor import SLAMonitorConfig
from gleaner.testing.fixtures import make_placement


def test_metrics_live_in_their_own_registry() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    metrics.set_phases([Phase.RUNNING, Phase.RUNNING, Phase.INVALID])
    metrics.placements.inc(3)
    metrics.evictions.inc()
    metrics.scheduling_latency.observe(0.2)
    get = registry.get_sample_value
    assert get("gleaner_operator_jobs", {"phase": "Running"}) == 2
    assert get("gleaner_operator_jobs", {"phase": "Invalid"}) == 1
    assert get("gleaner_operator_jobs", {"phase": "Pending"}) == 0
    assert get("gleaner_operator_placements_total") == 3
    assert get("gleaner_operator_evictions_total") == 1
    assert get("gleaner_operator_scheduling_latency_seconds_count") == 1
    assert get("gleaner_operator_scheduling_latency_seconds_bucket", {"le": "0.25"}) == 1
    # SLA windows by result and job size; attainment is met / all of them.
    metrics.count_windows("batch", 4, [True, False, True])
    metrics.count_windows("batch", 1, [True])
    metrics.count_windows("batch", 1, [])
    windows = {"namespace": "batch", "gpus": "4"}
    assert get("gleaner_operator_sla_windows_total", {**windows, "result": "met"}) == 2
    assert get("gleaner_operator_sla_windows_total", {**windows, "result": "missed"}) == 1
    assert get("gleaner_operator_sla_windows_total", {**windows, "gpus": "1", "result": "met"}) == 1
    # Two instances never collide (no global registry).
    OperatorMetrics(CollectorRegistry())


def test_health_readiness_and_metrics_endpoints() -> None:
    health = Health(stale_after=60)
    metrics = OperatorMetrics(CollectorRegistry())
    router = APIRouter()

    @router.get("/api/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    client = TestClient(build_app(health, metrics.registry, [router]))
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 503
    health.started = True
    health.first_pass_done = True
    assert client.get("/readyz").status_code == 200
    text = client.get("/metrics").text
    assert "gleaner_operator_placements_total 0.0" in text
    assert client.get("/api/ping").json() == {"pong": "yes"}
    health.stale_after = 0
    assert client.get("/healthz").status_code == 503


def _job(
    sla: object, phase: Phase, observed: float | None, deleting: bool = False
) -> tuple[dict[str, Any], OfflineJobStatus]:
    meta: dict[str, Any] = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}
    status = OfflineJobStatus(
        phase=phase,
        observed=None
        if observed is None
        else Observed(throughput_fraction=observed, window_seconds=60.0),
    )
    return {"metadata": meta, "spec": {"throughputSLA": sla}}, status


def test_job_gauges_from_spec_and_status() -> None:
    sla, observed = job_gauges(
        {
            ("a", "running"): _job(0.6, Phase.RUNNING, 0.7),
            ("a", "waiting"): _job(0.5, Phase.UNSCHEDULABLE, None),
            # A stale observation of an evicted job is not its current throughput.
            ("a", "evicted"): _job(0.5, Phase.EVICTED, 0.1),
            ("a", "bad"): _job(1.5, Phase.INVALID, None),
            ("a", "text"): _job("0.5", Phase.INVALID, None),
            ("a", "gone"): _job(0.5, Phase.RUNNING, 0.9, deleting=True),
        }
    )
    assert sla == {("a", "running"): 0.6, ("a", "waiting"): 0.5, ("a", "evicted"): 0.5}
    assert observed == {("a", "running"): 0.7}


def test_per_job_sla_series_come_and_go_with_the_jobs() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    get = registry.get_sample_value
    observed = "gleaner_operator_job_observed_throughput_fraction"
    sla = "gleaner_operator_job_throughput_sla"
    a, b = {"namespace": "ns", "job": "a"}, {"namespace": "ns", "job": "b"}

    metrics.sync_jobs({("ns", "a"): 0.6, ("ns", "b"): 0.5}, {("ns", "a"): 0.7})
    assert (get(sla, a), get(observed, a), get(sla, b), get(observed, b)) == (0.6, 0.7, 0.5, None)
    # The SLA monitor observes b; a is evicted (bound no more: no observed series).
    metrics.set_job("ns", "b", 0.5, 0.4)
    metrics.set_job("ns", "a", 0.6, None)
    assert (get(observed, a), get(observed, b)) == (None, 0.4)
    # b is deleted; a pass that no longer lists a drops it too.
    metrics.forget_job("ns", "b")
    metrics.forget_job("ns", "b")  # idempotent
    assert (get(sla, b), get(observed, b)) == (None, None)
    metrics.sync_jobs({}, {})
    assert get(sla, a) is None
    text = generate_latest(registry).decode()
    assert 'job="a"' not in text and 'job="b"' not in text


def _placed(
    sla: float, phase: Phase, observed: float | None, predicted: float, gpus: int
) -> tuple[dict[str, Any], OfflineJobStatus]:
    body, status = _job(sla, phase, observed)
    status.placement = make_placement(
        "n1",
        range(gpus),
        compute=predicted,
        fraction=predicted,
        decided_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return body, status


def test_cluster_measures_use_the_shared_definitions() -> None:
    config = SLAMonitorConfig(tolerance=0.1)
    jobs = {
        # observed 0.46 >= 0.5 * 0.9: met, credited 0.46 x 2 GPUs
        ("a", "ok"): _placed(0.5, Phase.RUNNING, 0.46, 0.9, 2),
        # no observation yet: its prediction 0.3 misses 0.6 and is credited
        ("a", "new"): _placed(0.6, Phase.SCHEDULED, None, 0.3, 1),
        # not bound: not judged, not credited
        ("a", "evicted"): _job(0.5, Phase.EVICTED, 0.1),
    }
    attainment, throughput = cluster_measures(jobs, config)
    assert attainment == pytest.approx(0.5)
    assert throughput == pytest.approx(0.46 * 2 + 0.3)
    assert cluster_measures({}, config) == (None, 0.0)


def test_cluster_gauges() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    get = registry.get_sample_value
    assert math.isnan(get("gleaner_operator_sla_attainment") or 0.0)
    metrics.set_cluster(0.75, 3.5)
    assert get("gleaner_operator_sla_attainment") == 0.75
    assert get("gleaner_operator_offline_throughput") == 3.5
    metrics.set_cluster(None, 0.0)
    assert math.isnan(get("gleaner_operator_sla_attainment") or 0.0)


def test_cluster_measures_judge_the_newest_sla_window_as_the_monitor_did() -> None:
    """A short dip in the newest sample of a job whose 30-minute SLA window met is no miss
    (the SLA monitor's SLAMet), and a job whose closed window missed is one although its
    newest sample looks fine."""
    config = SLAMonitorConfig(window_seconds=60.0, grace_seconds=0.0)

    def windowed(samples: list[float]) -> tuple[dict[str, Any], OfflineJobStatus]:
        body, status = _placed(0.5, Phase.RUNNING, samples[-1], 0.8, 1)
        assert status.placement is not None
        placed_at = status.placement.decided_at.timestamp()
        history = history_for("a/j", 0.5, status.placement, None, 1800.0, config)
        for i, fraction in enumerate(samples):
            history = history.observe(placed_at + 60.0 * (i + 1), fraction)
        body["spec"]["slaWindow"] = "30m"
        body["metadata"]["annotations"] = {ANNOTATION_SLA_WINDOWS: dump_history(history)}
        return body, status

    dip = windowed([0.7] * 30 + [0.1])
    slow = windowed([0.3] * 30 + [0.9])
    assert cluster_measures({("a", "dip"): dip}, config)[0] == 1.0
    assert cluster_measures({("a", "slow"): slow}, config)[0] == 0.0
    # Without the stored windows, the newest sample decides (the rule before a window closes).
    dip[0]["metadata"]["annotations"] = {}
    assert cluster_measures({("a", "dip"): dip}, config)[0] == 0.0
