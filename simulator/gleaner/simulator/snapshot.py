"""The dashboard record a simulation writes (`gleaner simulate --out DIR`: DIR/dashboard.json).

Contract. :func:`dashboard_record` returns a JSON-ready dict in the dashboard's
``ClusterRecord`` format (``gleaner.dashboard.model``; docs/dashboard.md describes it) from
what a simulation has: NodeTraces (the simulated agents' reports, API models or dicts),
OfflineJobs with their status, the scheduler's ``EvictionReport`` records, the observed
throughput fraction of each job over time, the cluster's time series and, per series, an
optional note shown instead of an empty chart (why the simulation has no such data) and an
optional figure over the whole run (``period_means``: the summary's own numbers, which the
overview cards then show). Series
times are epoch seconds of the simulated clock (``gleaner.simulator.online.EPOCH`` is its start),
as on a live cluster. :func:`write_dashboard_record` writes it.

The simulator sits beside the dashboard in the layers (neither imports the other), so this
module builds plain dicts; ``tests/dashboard`` validates them against the dashboard's model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gleaner.api import NodeTrace, OfflineJob
from gleaner.api.contract import BIAS_KEY, eviction_report_name
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler import BiasTable, EvictionReport
from gleaner.scheduler.monitor import SLAMonitorConfig

SERIES_NAMES = (
    "harvestedUtilization",
    "offlineThroughput",
    "slaAttainment",
    "preemptions",
    "reclamations",
)
"""Cluster series keys: harvested utilization (0..1), offline throughput (standalone-GPU
equivalents), SLA attainment (0..1), preemptions and reclamations per interval."""

Series = Sequence[tuple[float, float]]


def _points(series: Series) -> list[dict[str, float]]:
    return [{"t": float(t), "v": float(v)} for t, v in series]


def _object(obj: NodeTrace | OfflineJob | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(obj, NodeTrace | OfflineJob):
        return obj.to_k8s()
    return dict(obj)


def dashboard_record(
    *,
    node_traces: Iterable[NodeTrace | Mapping[str, Any]],
    offline_jobs: Iterable[OfflineJob | Mapping[str, Any]],
    eviction_reports: Iterable[EvictionReport] = (),
    job_series: Mapping[str, Series] | None = None,
    series: Mapping[str, Series] | None = None,
    series_notes: Mapping[str, str] | None = None,
    period_means: Mapping[str, float] | None = None,
    title: str = "",
    generated_at: datetime | None = None,
    sla_monitor: SLAMonitorConfig | None = None,
    bias: BiasTable | None = None,
    risk_target: float | None = DEFAULT_RISK_TARGET,
) -> dict[str, Any]:
    """The ``ClusterRecord`` dict (see the module docstring); unknown series keys raise.
    ``sla_monitor``: the rule the jobs' SLA windows were judged by (the dashboard's too);
    ``bias`` and ``risk_target``: the bias table and risk target the run admitted by (the
    dashboard scores a job's other nodes with them; None: no table)."""
    unknown = (set(series or {}) | set(series_notes or {}) | set(period_means or {})) - set(
        SERIES_NAMES
    )
    if unknown:
        raise ValueError(f"unknown series {sorted(unknown)}; known: {list(SERIES_NAMES)}")
    when = generated_at or datetime.now(UTC)
    reports = []
    for report in eviction_reports:
        namespace, _, name = report.job.rpartition("/")
        reports.append(
            {
                "namespace": namespace or "default",
                "configMap": eviction_report_name(name, report.eviction_count),
                "report": report.to_json(),
            }
        )
    return {
        "schemaVersion": 1,
        "kind": "ClusterRecord",
        "generatedAt": when.isoformat().replace("+00:00", "Z"),
        "source": "simulation",
        "title": title,
        "nodeTraces": [_object(t) for t in node_traces],
        "offlineJobs": [_object(j) for j in offline_jobs],
        "evictionReports": reports,
        "jobSeries": {key: _points(s) for key, s in (job_series or {}).items()},
        "series": {
            **{key: _points(s) for key, s in (series or {}).items()},
            **({"notes": dict(series_notes)} if series_notes else {}),
            **({"periodMeans": dict(period_means)} if period_means else {}),
        },
        **({"slaMonitor": _monitor(sla_monitor)} if sla_monitor is not None else {}),
        **({"bias": {"data": {BIAS_KEY: json.dumps(bias.to_json())}}} if bias else {}),
        "admission": {"riskTarget": risk_target},
    }


def _monitor(config: SLAMonitorConfig) -> dict[str, float | None]:
    return {
        "windowSeconds": config.window_seconds,
        "graceSeconds": config.grace_seconds,
        "tolerance": config.tolerance,
        "maxSlaWindowSeconds": config.max_sla_window_seconds,
    }


def write_dashboard_record(path: str | Path, record: Mapping[str, Any]) -> Path:
    """Write ``record`` as JSON to ``path`` (the dashboard's ``SnapshotSource`` reads it)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, separators=(",", ":")), encoding="utf-8")
    return out
