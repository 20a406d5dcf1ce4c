"""Dashboard: the cluster pages and the JSON API (FastAPI), over a snapshot or a live cluster.

The public API:

- ``routers()`` — what the operator mounts on its HTTP server (pages at ``/``, JSON at
  ``/api``) over a :class:`~gleaner.dashboard.sources.KubeSource` (the operator's client,
  or else its own: in-cluster credentials, else ``KUBECONFIG``, read lazily on the first
  request);
- :func:`gleaner.dashboard.app.create_router` / :func:`~gleaner.dashboard.app.create_app`
  over any :class:`~gleaner.dashboard.sources.DashboardSource`;
- :class:`~gleaner.dashboard.sources.SnapshotSource` (a JSON file such as
  ``gleaner simulate``'s ``dashboard.json``), :class:`~gleaner.dashboard.sources.KubeSource`,
  :class:`~gleaner.dashboard.sources.StaticSource`;
- the data model in :mod:`gleaner.dashboard.model` (``ClusterRecord`` in,
  ``ClusterSnapshot`` out) and the pure builder :func:`gleaner.dashboard.build.build_dashboard`.

Modules: ``model`` (pydantic schema), ``build`` (record -> snapshot, runner-ups; pure),
``charts`` (SVG; pure), ``views`` (which chart each page shows; pure), ``query`` (filter,
sort, CSV; pure), ``sources`` (file and cluster shells), ``app`` (FastAPI router and app),
``templates/`` (Jinja2) and ``static/`` (our own CSS and JS; no third-party files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler.cluster import DEFAULT_TRACE_STALE_AFTER_S

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import APIRouter

    from gleaner.clients.kube import SyncKubeClient
    from gleaner.dashboard.sources import JudgedNodes
    from gleaner.scheduler.monitor import SLAMonitorConfig


def routers(
    namespace: str | None = None,
    client: SyncKubeClient | None = None,
    sla_monitor: SLAMonitorConfig | None = None,
    state_namespace: str | None = None,
    risk_target: float | None = DEFAULT_RISK_TARGET,
    judged: Callable[[], JudgedNodes | None] | None = None,
    trace_stale_after: float = DEFAULT_TRACE_STALE_AFTER_S,
) -> list[APIRouter]:
    """The dashboard's router over the live cluster, for the operator's HTTP server (through
    ``client``, the operator's own; without one, a client of its own on first use), judging
    SLA windows with ``sla_monitor`` (the operator's SLA monitor; None: its defaults) and
    runner-up nodes with the operator's bias table (in ``state_namespace``; None: none)
    at its ``risk_target``, on the node summaries of its last scheduling pass (``judged``;
    see :class:`~gleaner.dashboard.sources.KubeSource`), a node whose last report is older
    than ``trace_stale_after`` seconds unavailable."""
    from gleaner.dashboard.app import create_router
    from gleaner.dashboard.model import AdmissionSettings, SlaMonitorSettings
    from gleaner.dashboard.sources import KubeSource

    settings = None if sla_monitor is None else SlaMonitorSettings.of(sla_monitor)
    source = KubeSource(
        client,
        namespace=namespace,
        sla_monitor=settings,
        state_namespace=state_namespace,
        admission=AdmissionSettings(
            risk_target=risk_target, trace_stale_after_seconds=trace_stale_after
        ),
        judged=judged,
    )
    return [create_router(source)]
