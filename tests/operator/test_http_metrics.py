"""The operator's HTTP app (health, readiness, metrics) and its own metrics registry."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from gleaner.api import Phase
from gleaner.operator.http import Health, build_app
from gleaner.operator.metrics import OperatorMetrics


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
