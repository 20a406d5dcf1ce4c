"""The operator's one HTTP server: /healthz, /readyz, /metrics, and a hook for more routers.

Contract: ``build_app(health, metrics_registry, routers)`` returns a FastAPI app that serves

- ``GET /healthz``: 200 ``{"status": "ok"}`` while the operator's event loop is responsive
  (``Health.alive()``: a heartbeat younger than ``stale_after``), else 503;
- ``GET /readyz``: 200 once kopf has started and the first scheduling pass has finished,
  else 503;
- ``GET /metrics``: the operator's own registry in Prometheus text format;
- everything in ``routers`` (the dashboard mounts its router at ``/`` and ``/api``).

Other components add routers through ``extra_routers`` (a list the CLI passes in) or by
calling ``app.include_router`` on the returned app. ``serve_in_thread`` runs uvicorn on a
background thread so it never competes with kopf for signal handling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler.cluster import DEFAULT_TRACE_STALE_AFTER_S

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from gleaner.clients.kube import SyncKubeClient
    from gleaner.perfmodel.summary import NodeSummary
    from gleaner.scheduler.monitor import SLAMonitorConfig


@dataclass
class Health:
    """Liveness and readiness, updated by the operator, read by the HTTP server."""

    stale_after: float = 60.0
    started: bool = False
    first_pass_done: bool = False
    _heartbeat: float = field(default_factory=time.monotonic)

    def beat(self) -> None:
        self._heartbeat = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self._heartbeat < self.stale_after

    def ready(self) -> bool:
        return self.started and self.first_pass_done and self.alive()


def build_app(
    health: Health,
    registry: CollectorRegistry,
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    app = FastAPI(title="Gleaner operator", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    def healthz(response: Response) -> dict[str, str]:
        if not health.alive():
            response.status_code = 503
            return {"status": "stale"}
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(response: Response) -> dict[str, str]:
        if not health.ready():
            response.status_code = 503
            return {"status": "starting"}
        return {"status": "ready"}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    for router in routers:
        app.include_router(router)
    return app


class HttpServer:
    """uvicorn serving ``app`` from a daemon thread (no signal handlers of its own)."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        import uvicorn

        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def serve_in_thread(app: FastAPI, host: str, port: int) -> HttpServer:
    server = HttpServer(app, host, port)
    server.start()
    return server


_ROUTERS: list[APIRouter] = []


def register_router(router: APIRouter) -> None:
    """Mount ``router`` on the operator's HTTP server (call before the server starts)."""
    _ROUTERS.append(router)


def extra_routers(
    kube: SyncKubeClient | None = None,
    sla_monitor: SLAMonitorConfig | None = None,
    state_namespace: str | None = None,
    risk_target: float | None = DEFAULT_RISK_TARGET,
    judged: Callable[[], tuple[datetime, Mapping[str, NodeSummary]] | None] | None = None,
    trace_stale_after: float = DEFAULT_TRACE_STALE_AFTER_S,
) -> list[APIRouter]:
    """Routers registered with ``register_router``, plus the dashboard's when it provides
    ``gleaner.dashboard.routers(client=kube, sla_monitor=..., state_namespace=...,
    risk_target=...) -> list[APIRouter]`` (its pages at ``/`` and ``/api``, reading the
    cluster through ``kube``, the operator's own client, judging SLA windows with the
    operator's SLA monitor settings, and other nodes with its bias table, kept in
    ``state_namespace``, at its ``risk_target``, on what ``judged`` says its last
    scheduling pass judged the nodes by, a node unavailable once its last report is older
    than ``trace_stale_after`` seconds)."""
    import importlib

    routers = list(_ROUTERS)
    try:
        dashboard = importlib.import_module("gleaner.dashboard")
    except ImportError:
        return routers
    factory = getattr(dashboard, "routers", None)
    if callable(factory):
        routers.extend(
            factory(
                client=kube,
                sla_monitor=sla_monitor,
                state_namespace=state_namespace,
                risk_target=risk_target,
                judged=judged,
                trace_stale_after=trace_stale_after,
            )
        )
    return routers
