"""The dashboard's HTTP face: JSON API under ``/api`` and server-rendered pages at ``/``.

Contract. :func:`create_router` returns one FastAPI ``APIRouter`` over a
:class:`~gleaner.dashboard.sources.DashboardSource`; the operator mounts it on its own
server, :func:`create_app` wraps it in a standalone app (``gleaner dashboard``,
``gleaner simulate --serve``) with FastAPI's ``/openapi.json`` and ``/docs``.

API (every answer has a response model, so the OpenAPI schema documents it):
``GET /api/cluster``, ``/api/snapshot``, ``/api/nodes``, ``/api/nodes/{name}``,
``/api/jobs?phase=&node=&sort=&order=``, ``/api/jobs/{namespace}/{name}`` (with runner-up
nodes), ``/api/evictions?format=json|csv``, ``/api/evictions/{id}``.
Pages: ``/`` (overview), ``/jobs``, ``/jobs/{namespace}/{name}``, ``/nodes``,
``/nodes/{name}``, ``/evictions``, ``/evictions/{id}``.

Errors: an unknown node, job or report is a 404 (JSON for the API, a page for pages); a
malformed query parameter is FastAPI's 422; a source that cannot produce data is a 503
with one line. Handlers are plain ``def`` so a slow source never blocks the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from gleaner.api import Phase
from gleaner.dashboard import views
from gleaner.dashboard.build import DashboardData
from gleaner.dashboard.model import (
    ClusterSeries,
    ClusterSnapshot,
    ClusterSummary,
    DashModel,
    EvictionView,
    JobView,
    NodeView,
    SourceKind,
)
from gleaner.dashboard.query import JobSort, SortOrder, evictions_csv, select_jobs
from gleaner.dashboard.sources import DashboardSource, SourceError

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
PHASES = tuple(p.value for p in Phase)
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


T = TypeVar("T")


def _no_such(what: str) -> dict[int | str, dict[str, Any]]:
    """The 404 answer of a route that names one ``what``, for the OpenAPI document."""
    return {404: {"description": f"No such {what}"}}


def _found(value: T | None, what: str) -> T:
    """``value``; a 404 saying ``what`` was not found when it is None."""
    if value is None:
        raise HTTPException(status_code=404, detail=f"{what} not found")
    return value


class ExportFormat(StrEnum):
    JSON = "json"
    CSV = "csv"


class ClusterOverview(DashModel):
    """``GET /api/cluster``: headline numbers and the cluster's time series."""

    generated_at: datetime
    source: SourceKind
    title: str
    summary: ClusterSummary
    series: ClusterSeries
    warnings: list[str]


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pct"] = views.pct
    env.filters["num"] = views.num
    env.filters["when"] = views.when
    env.filters["span"] = views.span
    env.filters["duration"] = views.duration
    env.filters["outlook"] = views.outlook
    env.globals["planned_exit_hint"] = views.PLANNED_EXIT_HINT
    env.globals["left_kind"] = views.LEFT_KIND
    return env


def create_router(source: DashboardSource) -> APIRouter:
    """The API and the pages over ``source`` (see the module docstring)."""
    router = APIRouter()
    env = _environment()

    def data() -> DashboardData:
        try:
            return source.data()
        except SourceError as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from exc

    def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        base = str(request.scope.get("root_path", "")).rstrip("/")
        snap = context.pop("snap", None)
        html = env.get_template(template).render(base=base, snap=snap, **context)
        return HTMLResponse(html, status_code=status)

    def not_found(request: Request, snap: ClusterSnapshot, what: str) -> HTMLResponse:
        return page(request, "not_found.html.j2", status=404, snap=snap, what=what)

    # -- JSON API ---------------------------------------------------------------------

    @router.get("/api/cluster", response_model=ClusterOverview, tags=["dashboard"])
    def api_cluster() -> ClusterOverview:
        """Headline numbers and time series of the cluster."""
        s = data().snapshot
        return ClusterOverview(
            generated_at=s.generated_at,
            source=s.source,
            title=s.title,
            summary=s.summary,
            series=s.series,
            warnings=s.warnings,
        )

    @router.get("/api/snapshot", response_model=ClusterSnapshot, tags=["dashboard"])
    def api_snapshot() -> ClusterSnapshot:
        """Everything the dashboard knows, as one document (a ClusterSnapshot)."""
        return data().snapshot

    @router.get("/api/nodes", response_model=list[NodeView], tags=["dashboard"])
    def api_nodes() -> list[NodeView]:
        """Every GPU node with its GPUs, memory distributions and overlap matrix."""
        return data().snapshot.nodes

    @router.get(
        "/api/nodes/{name}",
        response_model=NodeView,
        responses=_no_such("node"),
        tags=["dashboard"],
    )
    def api_node(name: str) -> NodeView:
        return _found(data().snapshot.node(name), f"node {name!r}")

    @router.get("/api/jobs", response_model=list[JobView], tags=["dashboard"])
    def api_jobs(
        phase: Annotated[Phase | None, Query(description="Only jobs in this phase.")] = None,
        node: Annotated[str | None, Query(max_length=253, description="Only jobs here.")] = None,
        sort: Annotated[JobSort, Query(description="Sort key.")] = JobSort.NAME,
        order: Annotated[SortOrder, Query(description="Sort order.")] = SortOrder.ASC,
    ) -> list[JobView]:
        """OfflineJobs, filtered and sorted."""
        return select_jobs(
            data().snapshot.jobs,
            phase=phase.value if phase is not None else None,
            node=node,
            sort=sort,
            order=order,
        )

    @router.get(
        "/api/jobs/{namespace}/{name}",
        response_model=JobView,
        responses=_no_such("job"),
        tags=["dashboard"],
    )
    def api_job(namespace: str, name: str) -> JobView:
        """One job, with its runner-up nodes and why they lost."""
        return _found(data().job_detail(namespace, name), f"job {namespace}/{name}")

    @router.get(
        "/api/evictions",
        response_model=list[EvictionView],
        responses={200: {"content": {"text/csv": {}}, "description": "JSON or CSV"}},
        tags=["dashboard"],
    )
    def api_evictions(
        format: Annotated[ExportFormat, Query(description="json or csv (a download).")] = (
            ExportFormat.JSON
        ),
    ) -> Any:
        """SLA eviction reports, newest first."""
        reports = data().snapshot.evictions
        if format is ExportFormat.CSV:
            return Response(
                evictions_csv(reports),
                media_type="text/csv; charset=utf-8",
                headers={"Content-Disposition": 'attachment; filename="sla-evictions.csv"'},
            )
        return reports

    @router.get(
        "/api/evictions/{report_id}",
        response_model=EvictionView,
        responses=_no_such("report"),
        tags=["dashboard"],
    )
    def api_eviction(report_id: str) -> EvictionView:
        return _found(data().snapshot.eviction(report_id), f"eviction report {report_id!r}")

    # -- pages ------------------------------------------------------------------------

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def overview_page(request: Request) -> HTMLResponse:
        s = data().snapshot
        return page(
            request, "overview.html.j2", snap=s, charts=views.overview_charts(s), nav="overview"
        )

    @router.get("/nodes", response_class=HTMLResponse, include_in_schema=False)
    def nodes_page(request: Request) -> HTMLResponse:
        s = data().snapshot
        return page(request, "nodes.html.j2", snap=s, nav="nodes")

    @router.get("/nodes/{name}", response_class=HTMLResponse, include_in_schema=False)
    def node_page(request: Request, name: str) -> HTMLResponse:
        s = data().snapshot
        node = s.node(name)
        if node is None:
            return not_found(request, s, f"node {name}")
        return page(
            request, "node.html.j2", snap=s, node=node, charts=views.node_charts(node), nav="nodes"
        )

    @router.get("/jobs", response_class=HTMLResponse, include_in_schema=False)
    def jobs_page(
        request: Request,
        phase: Annotated[str, Query(max_length=32)] = "",
        node: Annotated[str, Query(max_length=253)] = "",
        sort: JobSort = JobSort.NAME,
        order: SortOrder = SortOrder.ASC,
    ) -> HTMLResponse:
        if phase and phase not in PHASES:
            raise HTTPException(status_code=422, detail=f"phase must be one of {list(PHASES)}")
        s = data().snapshot
        jobs = select_jobs(s.jobs, phase=phase or None, node=node or None, sort=sort, order=order)
        return page(
            request,
            "jobs.html.j2",
            snap=s,
            jobs=jobs,
            batch_jobs=any(j.batch is not None for j in s.jobs),
            phases=list(PHASES),
            nodes=sorted({j.node for j in s.jobs if j.node}),
            selected={"phase": phase, "node": node},
            sort=sort.value,
            order=order.value,
            nav="jobs",
        )

    @router.get("/jobs/{namespace}/{name}", response_class=HTMLResponse, include_in_schema=False)
    def job_page(request: Request, namespace: str, name: str) -> HTMLResponse:
        d = data()
        job = d.job_detail(namespace, name)
        if job is None:
            return not_found(request, d.snapshot, f"job {namespace}/{name}")
        return page(
            request,
            "job.html.j2",
            snap=d.snapshot,
            job=job,
            charts=views.job_charts(job),
            nav="jobs",
        )

    @router.get("/evictions", response_class=HTMLResponse, include_in_schema=False)
    def evictions_page(request: Request) -> HTMLResponse:
        s = data().snapshot
        return page(request, "evictions.html.j2", snap=s, nav="evictions")

    @router.get("/evictions/{report_id}", response_class=HTMLResponse, include_in_schema=False)
    def eviction_page(request: Request, report_id: str) -> HTMLResponse:
        s = data().snapshot
        report = s.eviction(report_id)
        if report is None:
            return not_found(request, s, f"eviction report {report_id}")
        raw = json.dumps(report.to_json(), indent=2)
        return page(
            request,
            "eviction.html.j2",
            snap=s,
            report=report,
            raw=raw,
            charts=views.eviction_charts(report),
            nav="evictions",
        )

    @router.get("/static/{filename}", include_in_schema=False)
    def static(filename: str) -> Response:
        path = STATIC / filename
        media = STATIC_TYPES.get(path.suffix)
        if media is None or path.name != filename or not path.is_file():
            raise HTTPException(status_code=404, detail="not found")
        return Response(path.read_bytes(), media_type=media, headers=_NO_STORE)

    return router


_NO_STORE: Mapping[str, str] = {"Cache-Control": "no-cache"}


def create_app(source: DashboardSource, title: str = "Gleaner dashboard") -> FastAPI:
    """A standalone app: the router plus FastAPI's /openapi.json and /docs."""
    app = FastAPI(
        title=title,
        description="Gleaner's cluster dashboard and its JSON API (see docs/dashboard.md).",
        version="1",
    )
    app.include_router(create_router(source))
    return app
