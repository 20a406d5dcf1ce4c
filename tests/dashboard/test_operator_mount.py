"""The dashboard mounted on the operator's own HTTP server (gleaner.operator.http)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

import gleaner.dashboard
from gleaner.dashboard.app import create_router
from gleaner.dashboard.build import DashboardData
from gleaner.dashboard.sources import StaticSource
from gleaner.operator.http import Health, build_app, extra_routers


def test_operator_app_serves_pages_api_and_its_own_routes(data: DashboardData) -> None:
    health = Health()
    app = build_app(health, CollectorRegistry(), [create_router(StaticSource(data))])
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/metrics").status_code == 200
        assert client.get("/api/cluster").json()["summary"]["nodes"] == 3
        assert client.get("/").status_code == 200
        assert "/api/jobs" in client.get("/openapi.json").json()["paths"]
        assert client.get("/api/jobs/x/y").status_code == 404


def test_operator_discovers_the_dashboard_router() -> None:
    # routers() builds a KubeSource lazily: no cluster is contacted here
    routers = gleaner.dashboard.routers()
    assert len(routers) == 1
    paths = {getattr(r, "path", "") for r in routers[0].routes}
    assert {"/", "/api/cluster", "/api/jobs/{namespace}/{name}"} <= paths
    assert any(
        "/api/evictions" in {getattr(r, "path", "") for r in router.routes}
        for router in extra_routers()
    )
