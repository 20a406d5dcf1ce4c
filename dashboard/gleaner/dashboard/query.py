"""Filtering, sorting and exporting the dashboard's lists (pure).

Contract. :func:`select_jobs` filters jobs by phase and node and sorts them by one of
:class:`JobSort`'s keys (missing values sort last in either order, ties by namespace/name);
:func:`evictions_csv` writes the reports as CSV with one header row (:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from gleaner.dashboard.model import EvictionView, JobView


class JobSort(StrEnum):
    NAME = "name"
    NAMESPACE = "namespace"
    PHASE = "phase"
    NODE = "node"
    GPUS = "gpus"
    SLA = "sla"
    PREDICTED = "predicted"
    OBSERVED = "observed"
    EVICTIONS = "evictions"
    REQUESTS = "requests"
    CREATED = "created"


class SortOrder(StrEnum):
    ASC = "asc"
    DESC = "desc"


_KEYS: dict[JobSort, Callable[[JobView], Any]] = {
    JobSort.NAME: lambda j: j.name,
    JobSort.NAMESPACE: lambda j: j.namespace,
    JobSort.PHASE: lambda j: j.phase,
    JobSort.NODE: lambda j: j.node,
    JobSort.GPUS: lambda j: j.gpu_count,
    JobSort.SLA: lambda j: j.sla,
    JobSort.PREDICTED: lambda j: j.predicted.throughput_fraction if j.predicted else None,
    JobSort.OBSERVED: lambda j: j.observed,
    JobSort.EVICTIONS: lambda j: j.eviction_count,
    JobSort.REQUESTS: lambda j: (
        j.batch.requests_done / j.batch.requests_total
        if j.batch is not None and j.batch.requests_total
        else None
    ),
    JobSort.CREATED: lambda j: j.created_at,
}


def select_jobs(
    jobs: Sequence[JobView],
    *,
    phase: str | None = None,
    node: str | None = None,
    sort: JobSort = JobSort.NAME,
    order: SortOrder = SortOrder.ASC,
) -> list[JobView]:
    """Jobs in ``phase`` on ``node`` (None: any), sorted (missing values last)."""
    kept = [
        j for j in jobs if (phase is None or j.phase == phase) and (node is None or j.node == node)
    ]
    key = _KEYS[sort]
    present = [j for j in kept if key(j) is not None]
    missing = [j for j in kept if key(j) is None]
    present.sort(key=lambda j: (j.namespace, j.name))
    present.sort(key=key, reverse=order is SortOrder.DESC)
    missing.sort(key=lambda j: (j.namespace, j.name))
    return present + missing


CSV_COLUMNS = (
    "id",
    "time",
    "namespace",
    "job",
    "node",
    "gpus",
    "sla",
    "predicted_compute",
    "predicted_memory",
    "predicted_multi_gpu",
    "predicted_throughput_fraction",
    "observed_mean",
    "observed_min",
    "observed_last",
    "windows_missed",
    "windows",
    "eviction_count",
    "outcome",
    "next_attempt_after",
    "excluded_nodes",
    "reason",
)


def _iso(t: datetime | None) -> str:
    return "" if t is None else t.isoformat().replace("+00:00", "Z")


def evictions_csv(reports: Sequence[EvictionView]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in reports:
        writer.writerow(
            [
                r.id,
                _iso(r.time),
                r.namespace,
                r.job.split("/", 1)[-1],
                r.node,
                " ".join(str(g) for g in r.gpus),
                f"{r.sla:.4f}",
                f"{r.predicted.compute:.4f}",
                f"{r.predicted.memory:.4f}",
                f"{r.predicted.multi_gpu:.4f}",
                f"{r.predicted.throughput_fraction:.4f}",
                f"{r.observed.mean:.4f}",
                f"{r.observed.min:.4f}",
                f"{r.observed.last:.4f}",
                r.observed.windows_missed,
                r.observed.windows,
                r.eviction_count,
                r.outcome,
                _iso(r.next_attempt_after),
                " ".join(r.excluded_nodes),
                r.reason,
            ]
        )
    return buf.getvalue()
