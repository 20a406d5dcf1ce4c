"""What each page plots, and the template filters (pure).

Contract. ``overview_charts``, ``node_charts``, ``job_charts`` and ``eviction_charts`` map a
piece of the snapshot to named SVG charts (:mod:`gleaner.dashboard.charts`); the templates
only place them. A series the source says it does not produce (``series.notes``) shows its
note instead of an empty chart. The job timeline draws each placement's prediction over its
stay and marks the evictions and moves (``LEFT`` words them). ``pct``, ``num``, ``when``,
``duration`` and ``outlook`` format values for the templates ("–" for missing values);
``PLANNED_EXIT_HINT`` says in one sentence what a planned exit means.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from markupsafe import Markup

from gleaner.dashboard.charts import (
    PALETTE,
    Line,
    bar_chart,
    data_gaps,
    hbar_chart,
    heatmap,
    histogram_chart,
    line_chart,
)
from gleaner.dashboard.model import (
    BatchView,
    ClusterSeries,
    ClusterSnapshot,
    EvictionView,
    Factors,
    JobView,
    NodeView,
    Point,
)

MISSING = "–"
LEFT = {"SLAEviction": "evicted from", "Move": "moved from", "PlannedExit": "planned exit from"}
"""How the timeline words each way a job left a node (its markers)."""
LEFT_KIND = {
    "SLAEviction": "SLA eviction",
    "Move": "moved before a peak",
    "PlannedExit": "planned exit",
}
"""The job page's table: what each record is."""
PLANNED_EXIT_HINT = (
    "Placed for the quiet hours before a forecast peak: the job goes back to the queue, "
    "progress kept, when this node no longer admits it over the next hour and no other "
    "node does."
)
"""What a planned exit means (the jobs table's badge tooltip, the job page's line)."""
FACTOR_COLORS = ("#2563eb", "#16a34a", "#0891b2", "#7c3aed")
OBSERVED_COLOR = "#ea580c"


def pct(value: float | None, digits: int = 0) -> str:
    return MISSING if value is None else f"{value * 100:.{digits}f}%"


def num(value: float | None, digits: int = 2) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def when(value: datetime | None) -> str:
    if value is None:
        return MISSING
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(seconds: float | None) -> str:
    """A length of time, e.g. ``7h 50m`` (``45m``, ``3d 2h``), to the minute."""
    if seconds is None:
        return MISSING
    minutes = max(0, round(seconds / 60))
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours else []
    parts += [f"{mins}m"] if mins and not days else []
    return " ".join(parts) or "0m"


def span(start: datetime | None, end: datetime | None) -> str:
    """The length of a period, e.g. ``7h 50m`` (``45m``, ``3d 2h``)."""
    if start is None or end is None:
        return MISSING
    return duration((end - start).total_seconds())


def outlook(batch: BatchView | None) -> str:
    """A batch's outlook in words: "on track, 2h 5m to spare", "will miss by 40m"."""
    if batch is None:
        return MISSING
    margin = batch.margin_seconds
    if batch.outlook == "finished":
        return "finished"
    if batch.outlook == "on_track" and margin is not None:
        return f"on track, {duration(margin)} to spare"
    if batch.outlook == "late" and margin is not None:
        return f"will miss by {duration(-margin)}"
    if batch.outlook == "passed" and margin is not None:
        return f"deadline passed {duration(-margin)} ago"
    if batch.deadline is None:
        return "no deadline"
    return "no projection yet"


def series_note(series: ClusterSeries, names: Sequence[str]) -> Markup | None:
    """The notes of ``names`` as a panel, when none of those series has a point (a source
    that does not produce them says why instead of an empty "no data" chart)."""
    if any(getattr(series, _SERIES_FIELDS[n]) for n in names):
        return None
    notes = list(dict.fromkeys(series.notes[n] for n in names if series.notes.get(n)))
    if not notes:
        return None
    return Markup('<p class="series-note">{}</p>').format(" ".join(notes))


_SERIES_FIELDS = {
    "harvestedUtilization": "harvested_utilization",
    "offlineThroughput": "offline_throughput",
    "slaAttainment": "sla_attainment",
    "preemptions": "preemptions",
    "reclamations": "reclamations",
}


def overview_charts(snap: ClusterSnapshot) -> dict[str, Markup]:
    s = snap.series
    return {
        "harvested": line_chart(
            [Line("harvested utilization", s.harvested_utilization, PALETTE[0])],
            label="Harvested GPU utilization over time",
            y_max=1.0,
            percent=True,
        ),
        "throughput": line_chart(
            [Line("offline throughput", s.offline_throughput, PALETTE[1])],
            label="Offline throughput over time (standalone-GPU equivalents)",
        ),
        "sla": line_chart(
            [Line("SLA attainment", s.sla_attainment, PALETTE[3])],
            label="SLA attainment over time",
            y_max=1.0,
            percent=True,
        ),
        "events": series_note(s, ("preemptions", "reclamations"))
        or line_chart(
            [
                Line("preemptions", s.preemptions, PALETTE[2]),
                Line("reclamations", s.reclamations, PALETTE[4]),
            ],
            label="Preemptions and memory reclamations per interval",
        ),
        "idle": bar_chart(
            [Point(t=i, v=n.idle_fraction or 0.0) for i, n in enumerate(snap.nodes)],
            label="Idle fraction per node",
            x_labels=[n.name for n in snap.nodes],
            width=1200,
            height=180,
            percent=True,
            color=PALETTE[5],
        ),
    }


def node_charts(node: NodeView) -> dict[str, Markup]:
    labels = [f"GPU {g.index}" for g in node.gpus]
    charts = {
        "idle": bar_chart(
            [Point(t=i, v=g.idle_fraction or 0.0) for i, g in enumerate(node.gpus)],
            label=f"Idle fraction per GPU of {node.name}",
            x_labels=labels,
            percent=True,
            color=PALETTE[5],
        ),
        "overlap": heatmap(
            node.overlap, labels, label=f"Online busy overlap / union per GPU pair of {node.name}"
        ),
    }
    for g in node.gpus:
        charts[f"memory-{g.index}"] = histogram_chart(
            g.memory.histogram,
            label=f"Harvestable memory distribution of GPU {g.index} (share of time per GiB)",
            x_unit="harvestable memory, GiB",
            value_unit=" of the window",
            color=PALETTE[0],
        )
    return charts


def factor_items(f: Factors) -> list[tuple[str, float]]:
    return [
        ("compute", f.compute),
        ("memory", f.memory),
        ("multi-GPU", f.multi_gpu),
        ("product", f.throughput_fraction),
    ]


def job_charts(job: JobView) -> dict[str, Markup]:
    charts: dict[str, Markup] = {}
    if job.predicted is not None:
        charts["factors"] = hbar_chart(
            factor_items(job.predicted),
            label=f"Predicted factors of {job.key}",
            marker=(job.sla, f"SLA {job.sla:.2f}"),
            colors=FACTOR_COLORS,
        )
    lines = [Line("observed", job.observed_series, PALETTE[0])]
    if job.predicted_series:
        lines.append(Line("predicted (per placement)", job.predicted_series, PALETTE[1]))
    charts["timeline"] = line_chart(
        lines,
        label=f"Observed throughput fraction of {job.key} against its SLA",
        width=1200,
        height=260,
        y_max=1.0,
        reference=(job.sla, f"SLA {job.sla:.2f}"),
        percent=True,
        markers=[
            (e.time.timestamp(), f"{LEFT[e.type]} {e.node}")
            for e in sorted(job.evictions, key=lambda e: e.time)
        ],
        # While the job waited between placements nothing was observed: no line there.
        gaps=data_gaps(job.observed_series),
    )
    return charts


def eviction_charts(report: EvictionView) -> dict[str, Markup]:
    items = [
        *factor_items(report.predicted),
        ("observed mean", report.observed.mean),
        ("observed last", report.observed.last),
    ]
    return {
        "factors": hbar_chart(
            items,
            label=f"Predicted factors and observed throughput of {report.job}",
            marker=(report.sla, f"SLA {report.sla:.2f}"),
            colors=(*FACTOR_COLORS, OBSERVED_COLOR, OBSERVED_COLOR),
        )
    }
