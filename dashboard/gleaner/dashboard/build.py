"""From a :class:`ClusterRecord` to the :class:`ClusterSnapshot` the pages show (pure).

Contract. :func:`build_dashboard` turns a record (API objects, eviction reports, series)
into :class:`DashboardData`: the snapshot plus what it needs to answer the job page's
"why here" question on demand. Nothing here does I/O or reads a clock; times come from
the record. Objects that cannot be read (a malformed NodeTrace, an OfflineJob that does not
validate, a broken report) get one line in ``snapshot.warnings`` and never make the whole
dashboard fail; an OfflineJob that does not validate is still listed, as Invalid with what
is wrong, because that is where users look for it.

Definitions (docs/dashboard.md repeats them; the measures are computed by
``gleaner.scheduler.measures``, shared with the operator's /metrics and the simulator):

- a GPU's *idle fraction* is the model's P_compute for it (offline-enabled seconds over
  the window; without an agent 1 − online busy);
- *harvested utilization* is the mean over all GPUs of the idle fraction of GPUs that hold
  an offline job (0 for the others): the share of all GPU time given to offline work;
- *offline throughput* is Σ over running jobs of throughput fraction × GPUs (observed when
  measured, else predicted): standalone-GPU equivalents, i.e. GPUs saved;
- a GPU holds an offline job when a placed job's placement names it (else when its
  NodeTrace's ``perGPU[].offlineJob`` does);
- a fraction *meets* an SLA when the SLA monitor would not count it as a miss:
  fraction ≥ SLA × (1 − tolerance), the operator's ``SLAMet`` rule;
- *SLA attainment* is the fraction of job-windows met: at one instant, one verdict per
  running job, that of its newest SLA window on its current placement, judged over its
  ``spec.slaWindow`` exactly as the SLA monitor judges it
  (``gleaner.scheduler.measures.placement_met``); until its first SLA window closes, its
  newest observed sample (else its prediction);
- *runner-ups* of a job: for every other node, the scheduler's explanation
  (``gleaner.scheduler.explain_nodes``: its filters in their wording, the set it would
  choose there, else its most promising one, the bias applied: the operator's table in the
  record, configured by its risk target, as its scheduler applies it; with the record's
  ``admission``, a node whose last report is older than its stale-after at ``generatedAt``
  unavailable), ranked feasible first,
  then by bias-corrected product; each says why it lost
  (``NodeExplanation.lost_to``), its per-pair admission clauses grouped
  (``group_pair_clauses``: "6 GPU pairs overlap < 0.95 (...)").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import ValidationError

from gleaner.api import NodeTrace, OfflineJob, Phase, Profile
from gleaner.api.contract import (
    ANNOTATION_SLA_WINDOWS,
    BIAS_CONFIGMAP,
    SlaWindows,
    eviction_report_name,
)
from gleaner.api.nodetrace import without_hours
from gleaner.batch.deadline import deadline_outlook
from gleaner.dashboard.model import (
    AdmissionSettings,
    BatchView,
    ClusterRecord,
    ClusterSeries,
    ClusterSnapshot,
    ClusterSummary,
    EvictionView,
    Factors,
    GpuView,
    JobEviction,
    JobView,
    MemoryDistribution,
    NodeView,
    ObservedView,
    PeriodFigures,
    Point,
    RecordedReport,
    RunnerUp,
)
from gleaner.perfmodel import JobProfile, ModelConfig, NodeSummary
from gleaner.perfmodel.model import compute_factors, pair_scores
from gleaner.scheduler import (
    BiasTable,
    EvictionReport,
    JobRequest,
    SchedulerConfig,
    SchedulingSnapshot,
    SLAMonitorConfig,
    explain_nodes,
    measures,
)
from gleaner.scheduler.bias import from_configmap
from gleaner.scheduler.lifecycle import BOUND_PHASES, leave_type_of
from gleaner.scheduler.risk import AdmissionRisk

MAX_SETS_PER_NODE = 512
"""GPU sets tried per node when looking for a job's runner-ups."""

MAX_RUNNER_UPS = 5

DEFAULT_MODEL = ModelConfig()

DEFAULT_MONITOR = SLAMonitorConfig()
"""The SLA monitor's defaults: its tolerance decides whether a fraction meets the SLA."""

PLACED_PHASES = frozenset(p.value for p in BOUND_PHASES)
FINISHED_PHASES = frozenset((Phase.SUCCEEDED.value, Phase.FAILED.value))
"""Phases (as shown) of jobs that hold GPUs: the lifecycle's bound phases."""


# ---------------------------------------------------------------------------------------
# Small pure helpers
# ---------------------------------------------------------------------------------------


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float | None:
    """Lower ``q``-quantile: the smallest value whose cumulative weight share reaches ``q``."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    pairs = sorted((float(v), float(w)) for v, w in zip(values, weights, strict=True) if w > 0)
    if not pairs:
        return None
    total = sum(w for _, w in pairs)
    cum = 0.0
    for value, weight in pairs:
        cum += weight
        if cum >= q * total - 1e-12 * total:
            return value
    return pairs[-1][0]


def memory_distribution(values: Sequence[float], seconds: Sequence[float]) -> MemoryDistribution:
    """Quantiles, mean, range and histogram of one GPU's harvestable memory."""
    total = float(sum(seconds))
    if total <= 0 or not values:
        return MemoryDistribution()
    q = {p: weighted_quantile(values, seconds, p / 100) for p in (10, 25, 50, 75, 90)}
    mean = sum(v * s for v, s in zip(values, seconds, strict=True)) / total
    hist = [
        Point(t=float(v), v=float(s) / total)
        for v, s in sorted(zip(values, seconds, strict=True))
        if s > 0
    ]
    return MemoryDistribution(
        p10=q[10],
        p25=q[25],
        p50=q[50],
        p75=q[75],
        p90=q[90],
        mean=mean,
        min=min(values),
        max=max(values),
        histogram=hist,
    )


def parse_sla_windows(annotation: str | None) -> list[Point]:
    """The observed series kept by the operator in ``ANNOTATION_SLA_WINDOWS`` (or [])."""
    stored = SlaWindows.parse(annotation)
    if stored is None:
        return []
    return [Point(t=end, v=frac) for end, frac in stored.windows]


def merge_job_series(
    kept: Mapping[str, list[Point]], offline_jobs: Iterable[Mapping[str, Any]], max_points: int
) -> dict[str, list[Point]]:
    """Each job's observed series: what was kept from earlier reads plus the windows its
    ``ANNOTATION_SLA_WINDOWS`` holds now (the operator clears that annotation when it
    evicts the job, so without this the history would vanish with the placement). Jobs no
    longer listed are dropped; at most ``max_points`` newest points are kept per job."""
    out: dict[str, list[Point]] = {}
    for obj in offline_jobs:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        now = parse_sla_windows((meta.get("annotations") or {}).get(ANNOTATION_SLA_WINDOWS))
        by_time = {p.t: p for p in kept.get(key, [])}
        by_time.update({p.t: p for p in now})
        if by_time:
            out[key] = sorted(by_time.values(), key=lambda p: p.t)[-max_points:]
    return out


def eviction_id(namespace: str, config_map: str) -> str:
    """Stable id of a report: namespace names hold no dots, so the first dot splits it."""
    return f"{namespace}.{config_map}"


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


# ---------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------


def node_view(summary: NodeSummary) -> NodeView:
    """A node's GPUs, memory distributions and overlap matrix from its summary."""
    has_window = summary.window_seconds > 0
    idle = compute_factors(summary) if has_window else None
    busy = summary.online_busy_seconds / summary.window_seconds if has_window else None
    scores = pair_scores(summary)
    ev = summary.events_or_zeros()
    jobs = list(summary.offline_jobs) or [None] * summary.n_gpus
    gpus: list[GpuView] = []
    for pos, spec in enumerate(summary.gpus):
        values, seconds = (
            summary.memory.marginal(pos) if summary.memory.n_states else (np.zeros(0), np.zeros(0))
        )
        gpus.append(
            GpuView(
                index=spec.index,
                uuid=spec.uuid,
                product=spec.product,
                memory_gi_b=spec.memory_gib,
                idle_fraction=None if idle is None else float(idle[pos]),
                online_busy_fraction=(
                    None if busy is None else float(min(1.0, max(0.0, busy[pos])))
                ),
                memory=memory_distribution(values.tolist(), seconds.tolist()),
                preemptions=int(ev.preemptions[pos]),
                reclamations=int(ev.reclamations[pos]),
                online_requests=int(ev.online_requests[pos]),
                offline_job=jobs[pos] if pos < len(jobs) else None,
            )
        )
    overlap: list[list[float | None]] = []
    for a in range(summary.n_gpus):
        row: list[float | None] = []
        for b in range(summary.n_gpus):
            measured = not np.isnan(summary.pair_union_seconds[a, b])
            row.append(float(scores[a, b]) if measured or a == b else None)
        overlap.append(row)
    held = sorted({j for j in jobs if j})
    return NodeView(
        name=summary.node,
        gpus=gpus,
        window_seconds=summary.window_seconds,
        window_end=summary.window_end,
        last_report_time=summary.last_report_time,
        idle_fraction=None if idle is None or idle.size == 0 else float(idle.mean()),
        harvestable_memory_p10_gi_b=summary.memory.quantile(0.10),
        overlap=overlap,
        offline_jobs=held,
        labels=dict(summary.labels),
        preemptions=int(ev.preemptions.sum()),
        reclamations=int(ev.reclamations.sum()),
    )


def with_uninstrumented(node: NodeView, trace: Mapping[str, Any] | None) -> NodeView:
    """``node`` with each GPU's uninstrumented processes and the guard's mode, from its raw
    NodeTrace (docs/agent.md, "Uninstrumented processes"); unchanged when it says nothing."""
    try:
        status = (
            NodeTrace.model_validate(without_hours(trace)).status if trace is not None else None
        )
    except ValidationError:
        status = None  # _summaries already warned
    if status is None or status.uninstrumented_guard is None:
        return node
    found = {
        g.index: [f"{p.describe()} ({p.reason})" for p in g.uninstrumented_processes or ()]
        for g in status.per_gpu
    }
    gpus = [g.model_copy(update={"uninstrumented": found.get(g.index, [])}) for g in node.gpus]
    guard = status.uninstrumented_guard.value
    return node.model_copy(update={"gpus": gpus, "uninstrumented_guard": guard})


def with_placements(node: NodeView, jobs: Sequence[JobView]) -> NodeView:
    """``node`` with each GPU's offline job as the jobs' placements say.

    The agent reports ``perGPU[].offlineJob`` from the Pods it sees, once per report
    interval; the OfflineJobs' placements are the operator's current word. A placed job's
    GPUs are its own (so the cards agree with the jobs table); other GPUs keep what the
    agent reported."""
    placed = {g: j.key for j in jobs if j.node == node.name for g in j.gpus}
    if not placed:
        return node
    gpus = [
        g.model_copy(update={"offline_job": placed[g.index]}) if g.index in placed else g
        for g in node.gpus
    ]
    held = sorted({g.offline_job for g in gpus if g.offline_job})
    return node.model_copy(update={"gpus": gpus, "offline_jobs": held})


# ---------------------------------------------------------------------------------------
# Evictions
# ---------------------------------------------------------------------------------------


def eviction_view(recorded: RecordedReport) -> EvictionView:
    """One report; raises ValueError when the report JSON is malformed."""
    report = EvictionReport.from_json(recorded.report)
    data = report.to_json()
    job_name = report.job.split("/", 1)[-1]
    config_map = recorded.config_map or eviction_report_name(job_name, report.eviction_count)
    p, o = report.predicted, report.observed
    return EvictionView(
        id=eviction_id(recorded.namespace, config_map),
        namespace=recorded.namespace,
        config_map=config_map,
        job=report.job if "/" in report.job else f"{recorded.namespace}/{report.job}",
        node=report.node,
        gpus=list(report.gpus),
        gpu_uuids=list(report.gpu_uuids),
        sla=report.sla,
        predicted=Factors(
            compute=p.compute,
            memory=p.memory,
            multi_gpu=p.multi_gpu,
            throughput_fraction=p.throughput_fraction,
        ),
        observed=ObservedView(
            mean=o.mean,
            min=o.min,
            last=o.last,
            windows=o.windows,
            windows_missed=o.windows_missed,
            window_seconds=o.window_seconds,
        ),
        reason=report.reason,
        time=data["time"],
        eviction_count=report.eviction_count,
        outcome="failed" if report.failed else "requeued",
        next_attempt_after=data["nextAttemptAfter"],
        excluded_nodes=list(report.excluded_nodes),
        next_placement=report.next_placement,
    )


# ---------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """A validated OfflineJob with what the builder derived for it."""

    obj: OfflineJob
    key: str
    profile: JobProfile | None


def batch_view(job: OfflineJob, now: datetime) -> BatchView | None:
    """A ``spec.batch`` job's progress and its outlook against the deadline at ``now``
    (the rule: ``gleaner.batch.deadline.deadline_outlook``); None for other jobs."""
    if job.spec.batch is None:
        return None
    progress = job.status.batch
    done = progress.requests_done if progress is not None else 0
    total = progress.requests_total if progress is not None else 0
    projected = progress.projected_finish if progress is not None else None
    succeeded = job.status.phase.value == Phase.SUCCEEDED.value
    if succeeded:
        done = total = max(done, total)  # the runner exits 0 only once all are answered
    deadline = job.spec.batch.deadline
    outlook = deadline_outlook(
        deadline=deadline,
        projected_finish=projected,
        requests_done=done,
        requests_total=total,
        now=now,
        succeeded=succeeded,
    )
    return BatchView(
        requests_done=done,
        requests_total=total,
        requests_failed=progress.requests_failed if progress is not None else 0,
        tokens=progress.tokens if progress is not None else 0,
        deadline=deadline,
        projected_finish=projected,
        outlook=outlook.state,
        margin_seconds=outlook.margin_seconds,
        deadline_sla=progress.deadline_sla if progress is not None else None,
        updated_at=progress.updated_at if progress is not None else None,
    )


def record_monitor(record: ClusterRecord) -> SLAMonitorConfig:
    """The SLA monitor's rule the record's jobs were judged with (its defaults if unsaid)."""
    given = record.sla_monitor
    if given is None:
        return DEFAULT_MONITOR
    return replace(
        DEFAULT_MONITOR,
        window_seconds=given.window_seconds,
        grace_seconds=given.grace_seconds,
        tolerance=given.tolerance,
        max_sla_window_seconds=given.max_sla_window_seconds,
    )


def _job_view(
    job: _Job,
    series: list[Point],
    reports: Mapping[str, list[EvictionView]],
    now: datetime,
    monitor: SLAMonitorConfig = DEFAULT_MONITOR,
) -> JobView:
    meta, spec, status = job.obj.metadata, job.obj.spec, job.obj.status
    namespace = meta.namespace or "default"
    placement = status.placement
    placed = placement is not None and status.phase.value in PLACED_PHASES
    predicted = None
    if placement is not None:
        predicted = Factors(
            compute=placement.compute,
            memory=placement.memory,
            multi_gpu=placement.multi_gpu,
            throughput_fraction=placement.throughput_fraction,
            tokens_per_second=placement.predicted_tokens_per_second,
        )
    over = status.phase.value in FINISHED_PHASES
    finished = placement is not None and over
    # A job that failed on an SLA eviction lost its placement; its last eviction says where.
    last_stay = status.evictions[-1] if over and placement is None and status.evictions else None
    observed = status.observed.throughput_fraction if status.observed is not None else None
    since = placement.decided_at.timestamp() if placement and placement.decided_at else None
    recent = series and (since is None or series[-1].t > since)
    if observed is None and recent and (placed or finished):
        observed = series[-1].v  # a window of the current (or last) placement only
    meets: bool | None = None
    if placed and placement is not None and since is not None:
        # The newest SLA window over the job's spec.slaWindow, as the SLA monitor judges it.
        meets = measures.placement_met(
            ((p.t, p.v) for p in series),
            spec.throughput_sla,
            since,
            spec.sla_window_seconds,
            monitor,
        )
    if placed and meets is None:
        # No SLA window closed yet: the newest sample, else the prediction.
        basis = measures.job_fraction(
            observed, predicted.throughput_fraction if predicted is not None else None
        )
        meets = None if basis is None else measures.meets_sla(basis, spec.throughput_sla, monitor)
    elif finished:
        # A finished job is judged on what it got over its last placement (the mean of its
        # windows there; else the last one), so a Succeeded job far below its SLA shows as a
        # miss, and one slow last window does not (a prediction proves nothing now).
        stay = [p.v for p in series if since is None or p.t > since]
        got = sum(stay) / len(stay) if stay else observed
        meets = None if got is None else measures.meets_sla(got, spec.throughput_sla, monitor)
    job_reports = reports.get(job.key, [])
    evictions: list[JobEviction] = []
    for rec in status.evictions:
        rid = None
        if rec.report:
            rid = eviction_id(namespace, rec.report)
        else:
            match = next(
                (
                    r
                    for r in job_reports
                    if r.node == rec.node and abs((r.time - rec.time).total_seconds()) < 1.0
                ),
                None,
            )
            rid = match.id if match is not None else None
        evictions.append(
            JobEviction(
                time=rec.time,
                node=rec.node,
                gpus=list(rec.gpu_indices),
                type=leave_type_of(rec).value,
                reason=rec.reason,
                sla=rec.sla,
                predicted_throughput_fraction=rec.predicted_throughput_fraction,
                observed_throughput_fraction=rec.observed_throughput_fraction,
                report_id=rid,
            )
        )
    if not evictions and job_reports:
        # The status's bounded list may be empty (an older operator, a trimmed record): the
        # job's reports still say where and why it was evicted.
        evictions = [
            JobEviction(
                time=r.time,
                node=r.node,
                gpus=list(r.gpus),
                reason=r.reason,
                sla=r.sla,
                predicted_throughput_fraction=r.predicted.throughput_fraction,
                observed_throughput_fraction=r.observed.mean,
                report_id=r.id,
            )
            for r in sorted(job_reports, key=lambda r: r.time)
        ]
    if over and placement is None and last_stay is None and evictions:
        last_stay_node, last_stay_gpus = evictions[-1].node, list(evictions[-1].gpus)
    elif last_stay is not None:
        last_stay_node, last_stay_gpus = last_stay.node, list(last_stay.gpu_indices)
    else:
        last_stay_node, last_stay_gpus = None, []
    return JobView(
        namespace=namespace,
        name=meta.name,
        key=job.key,
        phase=status.phase.value,
        message=status.message,
        node=placement.node if placed and placement is not None else None,
        gpus=list(placement.gpu_indices) if placed and placement is not None else [],
        planned_exit=placed and placement is not None and placement.planned_exit,
        ran_on=placement.node if finished and placement is not None else last_stay_node,
        ran_on_gpus=(
            list(placement.gpu_indices) if finished and placement is not None else last_stay_gpus
        ),
        gpu_count=spec.gpus,
        sla=spec.throughput_sla,
        priority=spec.priority,
        standalone_tokens_per_second=(
            job.profile.standalone_tokens_per_second if job.profile is not None else None
        ),
        predicted=predicted,
        observed=observed,
        observed_series=series,
        predicted_series=predicted_steps(series, evictions, predicted, since),
        meets_sla=meets,
        # The records hold moves too (a planned exit is one); they are not SLA evictions.
        eviction_count=max(status.eviction_count, len(status.evictions) - status.move_count),
        move_count=status.move_count,
        evictions=evictions,
        excluded_nodes=list(status.excluded_nodes),
        created_at=meta.creation_timestamp,
        decided_at=placement.decided_at if placement is not None else None,
        batch=batch_view(job.obj, now),
    )


def predicted_steps(
    observed: Sequence[Point],
    evictions: Sequence[JobEviction],
    predicted: Factors | None,
    placed_at: float | None,
) -> list[Point]:
    """Each placement's prediction over its stay, as a step line on the observed series' time
    axis: an evicted stay ends at its eviction (the record holds its prediction), the current
    placement runs from ``placed_at`` to the last observation. Stays without observations
    in range are left out (the line spans only what the chart shows)."""
    if not observed:
        return []
    t_first, t_last = observed[0].t, observed[-1].t
    out: list[Point] = []
    start = t_first
    last_eviction: float | None = None
    for ev in sorted(evictions, key=lambda e: e.time):
        end = last_eviction = ev.time.timestamp()
        if t_first <= end <= t_last and start < end:
            v = ev.predicted_throughput_fraction
            out += [Point(t=start, v=v), Point(t=end, v=v)]
        start = max(start, end)
    evicted_since = (
        last_eviction is not None and placed_at is not None and placed_at < last_eviction
    )
    if predicted is not None and not evicted_since:  # else the placement was the evicted one
        begin = max(start, placed_at) if placed_at is not None else start
        if begin <= t_last:
            v = predicted.throughput_fraction
            out += [Point(t=begin, v=v), Point(t=t_last, v=v)]
    return out


def runner_ups(
    profile: JobProfile,
    sla: float,
    gpu_count: int,
    nodes: Mapping[str, NodeSummary],
    occupied: Mapping[str, Iterable[int]],
    chosen: tuple[str, float] | None = None,
    excluded: Iterable[str] = (),
    config: ModelConfig = DEFAULT_MODEL,
    limit: int = MAX_RUNNER_UPS,
    job: str = "",
    bias: BiasTable | None = None,
    now: datetime | None = None,
    stale_after_seconds: float | None = None,
) -> list[RunnerUp]:
    """The best other nodes for a job and why each lost (see the module docstring).

    ``chosen`` is (node, predicted fraction) of the job's placement, or None for a job that
    is not placed; ``occupied`` lists, per node, GPUs other jobs hold. Each node is judged
    by ``gleaner.scheduler.explain_nodes`` (the scheduler's filters, factors, bias and
    wording); this only ranks them and words the comparison with the chosen node.
    """
    request = JobRequest(
        key=job or "runner-up",
        profile=profile,
        gpus=gpu_count,
        sla=sla,
        excluded_nodes=frozenset(excluded),
    )
    held = {node: {int(g): "other" for g in gpus} for node, gpus in occupied.items() if gpus}
    snapshot = SchedulingSnapshot(
        jobs=[request],
        nodes=nodes,
        occupied=held,
        bias=bias or BiasTable(),
        now=now,
        stale_after_seconds=stale_after_seconds,
    )
    skip = () if chosen is None else (chosen[0],)
    scored: list[tuple[float, RunnerUp]] = []
    unscored: list[RunnerUp] = []
    scheduler_config = SchedulerConfig(model=config, max_sets_per_node=MAX_SETS_PER_NODE)
    explained = explain_nodes(snapshot, request, scheduler_config, skip)
    for ex in explained:
        if not ex.gpus or ex.throughput_fraction is None:
            unscored.append(RunnerUp(node=ex.node, why=group_pair_clauses(ex.lost_to(chosen))))
            continue
        standalone = profile.standalone_tokens_per_second
        factors = Factors(
            compute=_finite(ex.compute or 0.0),
            memory=_finite(ex.memory or 0.0),
            multi_gpu=_finite(ex.multi_gpu or 0.0),
            throughput_fraction=_finite(ex.throughput_fraction),
            tokens_per_second=_finite(ex.throughput_fraction * standalone),
        )
        scored.append(
            (
                ex.throughput_fraction,
                RunnerUp(
                    node=ex.node,
                    gpus=list(ex.gpus),
                    factors=factors,
                    feasible=ex.feasible,
                    why=group_pair_clauses(ex.lost_to(chosen)),
                ),
            )
        )
    scored.sort(key=lambda item: (not item[1].feasible, -item[0], item[1].node))
    out = [r for _, r in scored] + unscored
    return out[:limit]


# ---------------------------------------------------------------------------------------
# The whole snapshot
# ---------------------------------------------------------------------------------------


def current_point(nodes: Sequence[NodeView], jobs: Sequence[JobView]) -> ClusterSummary:
    """The headline numbers of the current state (see the module docstring)."""
    gpus = [g for n in nodes for g in n.gpus]
    held = [g.idle_fraction or 0.0 for g in gpus if g.offline_job]
    idle = [g.idle_fraction for g in gpus if g.idle_fraction is not None]
    running = [j for j in jobs if j.phase in PLACED_PHASES]
    credited: list[tuple[float, int]] = []
    for j in running:
        predicted = j.predicted.throughput_fraction if j.predicted is not None else 0.0
        frac = measures.job_fraction(j.observed, predicted)
        credited.append((frac if frac is not None else 0.0, j.gpu_count))
    judged = [j for j in running if j.meets_sla is not None]
    by_phase: dict[str, int] = {}
    for j in jobs:
        by_phase[j.phase] = by_phase.get(j.phase, 0) + 1
    return ClusterSummary(
        nodes=len(nodes),
        gpus=len(gpus),
        gpus_with_offline_job=sum(1 for g in gpus if g.offline_job),
        mean_idle_fraction=sum(idle) / len(idle) if idle else None,
        harvested_utilization=measures.harvested_utilization(held, len(gpus)),
        offline_throughput=measures.offline_throughput(credited),
        sla_attainment=measures.sla_attainment(bool(j.meets_sla) for j in judged),
        sla_attainment_by_gpus={
            size: attained
            for size in sorted({j.gpu_count for j in judged})
            if (
                attained := measures.sla_attainment(
                    bool(j.meets_sla) for j in judged if j.gpu_count == size
                )
            )
            is not None
        },
        jobs=len(jobs),
        jobs_by_phase=dict(sorted(by_phase.items())),
        evictions=sum(j.eviction_count for j in jobs),
        preemptions=sum(n.preemptions for n in nodes),
        reclamations=sum(n.reclamations for n in nodes),
    )


def period_figures(series: ClusterSeries) -> PeriodFigures | None:
    """The means of the cluster series over the time they cover (None: fewer than two
    points, no period to speak of). Points are one per reporting interval, so a plain mean
    is the time average; a figure the source gives itself (``series.period_means``, a
    simulation's summary) is used as it is, so the cards say what its report says."""

    def mean(points: list[Point], name: str) -> float | None:
        if name in series.period_means:
            return series.period_means[name]
        return sum(p.v for p in points) / len(points) if points else None

    parts = (series.harvested_utilization, series.offline_throughput, series.sla_attainment)
    times = [p.t for points in parts for p in points]
    longest = max(len(points) for points in parts)
    if longest < 2:
        return None
    return PeriodFigures(
        start=datetime.fromtimestamp(min(times), UTC),
        end=datetime.fromtimestamp(max(times), UTC),
        points=longest,
        harvested_utilization=mean(series.harvested_utilization, "harvestedUtilization"),
        offline_throughput=mean(series.offline_throughput, "offlineThroughput"),
        sla_attainment=mean(series.sla_attainment, "slaAttainment"),
    )


def series_with_point(series: ClusterSeries, t: float, summary: ClusterSummary) -> ClusterSeries:
    """``series`` with one more point at ``t`` from ``summary`` (a point at ``t`` is replaced)."""

    def add(points: list[Point], value: float | None) -> list[Point]:
        kept = [p for p in points if p.t != t]
        if value is None:
            return kept
        return sorted([*kept, Point(t=t, v=float(value))], key=lambda p: p.t)

    return ClusterSeries(
        harvested_utilization=add(series.harvested_utilization, summary.harvested_utilization),
        offline_throughput=add(series.offline_throughput, summary.offline_throughput),
        sla_attainment=add(series.sla_attainment, summary.sla_attainment),
        preemptions=add(series.preemptions, float(summary.preemptions)),
        reclamations=add(series.reclamations, float(summary.reclamations)),
        notes=dict(series.notes),
        period_means=dict(series.period_means),
    )


@dataclass
class DashboardData:
    """A snapshot plus what the job page needs to explain a placement on demand."""

    snapshot: ClusterSnapshot
    summaries: dict[str, NodeSummary] = field(default_factory=dict)
    profiles: dict[str, JobProfile] = field(default_factory=dict)
    occupied: dict[str, dict[int, str]] = field(default_factory=dict)
    config: ModelConfig = field(default_factory=ModelConfig)
    bias: BiasTable = field(default_factory=BiasTable)
    """The operator's bias table, as its scheduler corrects predictions with it."""
    now: datetime | None = None
    """When the record was taken: a node whose last report is older than
    ``stale_after_seconds`` then is unavailable."""
    stale_after_seconds: float | None = None
    """The operator's ``--trace-stale-after`` (None: no node is judged stale)."""
    _details: dict[str, JobView] = field(default_factory=dict)

    def job_detail(self, namespace: str, name: str) -> JobView | None:
        """The job with its runner-up nodes (computed once, then kept)."""
        key = f"{namespace}/{name}"
        if key in self._details:
            return self._details[key]
        job = self.snapshot.job(namespace, name)
        if job is None:
            return None
        profile = self.profiles.get(key)
        if profile is not None and job.phase not in (Phase.SUCCEEDED.value, Phase.INVALID.value):
            occupied = {
                node: [g for g, holder in held.items() if holder != key]
                for node, held in self.occupied.items()
            }
            # A finished job is compared with the node it last ran on, as a placed one is.
            where = job.node or job.ran_on
            predicted = job.predicted.throughput_fraction if job.predicted is not None else None
            if predicted is None and job.ran_on is not None and job.evictions:
                predicted = job.evictions[-1].predicted_throughput_fraction
            chosen = (where, predicted) if where is not None and predicted is not None else None
            ups = runner_ups(
                profile,
                job.sla,
                job.gpu_count,
                self.summaries,
                occupied,
                chosen=chosen,
                excluded=job.excluded_nodes,
                config=self.config,
                job=key,
                bias=self.bias,
                now=self.now,
                stale_after_seconds=self.stale_after_seconds,
            )
            if job.phase == Phase.FAILED.value:
                ups = [r.model_copy(update={"why": failed_why(r.why)}) for r in ups]
            job = job.model_copy(update={"runner_ups": ups})
        self._details[key] = job
        return job


WAITS = "; the job waits for the next scheduling pass"
_PAIR = re.compile(r"^GPU pair (\d+)-(\d+): busy overlap ([0-9.]+) < ([0-9.]+) \(admission\)$")
MAX_PAIRS_NAMED = 4


def group_pair_clauses(why: str) -> str:
    """The scheduler's reasons with the per-pair admission clauses of one threshold grouped
    into one: "6 GPU pairs overlap < 0.95 (0.38-0.40: 1-2, 1-3, 1-4, 2-3, ...)". Other
    clauses keep their place and words; a single pair clause is left as it is."""
    clauses = why.split("; ")
    pairs: dict[str, list[tuple[str, float]]] = {}
    for clause in clauses:
        m = _PAIR.match(clause)
        if m:
            pairs.setdefault(m.group(4), []).append(
                (f"{m.group(1)}-{m.group(2)}", float(m.group(3)))
            )
    out: list[str] = []
    done: set[str] = set()
    for clause in clauses:
        m = _PAIR.match(clause)
        if m is None or len(pairs[m.group(4)]) < 2:
            out.append(clause)
            continue
        threshold = m.group(4)
        if threshold in done:
            continue
        done.add(threshold)
        group = pairs[threshold]
        low, high = min(v for _, v in group), max(v for _, v in group)
        spread = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
        named = ", ".join(name for name, _ in group[:MAX_PAIRS_NAMED])
        more = ", ..." if len(group) > MAX_PAIRS_NAMED else ""
        out.append(
            f"{len(group)} GPU pairs overlap < {threshold} (busy overlap {spread}; "
            f"pairs {named}{more})"
        )
    return "; ".join(out)


def failed_why(why: str) -> str:
    """A runner-up's reason for a Failed job, which no scheduling pass will place again."""
    if why.endswith(WAITS):
        why = why[: -len(WAITS)]
    return f"{why}; unused: a Failed job is not placed again"


def _summaries(record: ClusterRecord, warnings: list[str]) -> dict[str, NodeSummary]:
    out: dict[str, NodeSummary] = {}
    for raw in record.node_traces:
        name = str((raw.get("metadata") or {}).get("name", "?"))
        try:
            trace = NodeTrace.model_validate(without_hours(raw))
            summary = NodeSummary.from_nodetrace(trace, labels=record.node_labels.get(name))
        except (ValidationError, ValueError) as exc:
            warnings.append(f"NodeTrace {name}: {str(exc).splitlines()[0]}")
            continue
        out[summary.node] = summary
    return out


def validation_summary(exc: ValidationError) -> str:
    """The first problem as ``field.path: message`` (what a user fixes first)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "object"
    return f"{where}: {str(err['msg']).removeprefix('Value error, ')}"


def _number(value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def invalid_job_view(raw: Mapping[str, Any], problem: str) -> JobView:
    """A job whose spec does not validate: listed (phase Invalid) with what is wrong.

    The API server may hold such objects (a CRD older than the schema, or a cluster where
    validation was off); users look for them in the jobs table, not in a warnings list.
    """
    meta = raw.get("metadata") or {}
    spec: Mapping[str, Any] = raw["spec"] if isinstance(raw.get("spec"), dict) else {}
    status: Mapping[str, Any] = raw["status"] if isinstance(raw.get("status"), dict) else {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name", "?"))
    message = str(status.get("message") or "") or f"invalid spec: {problem}"
    return JobView(
        namespace=namespace,
        name=name,
        key=f"{namespace}/{name}",
        phase=Phase.INVALID.value,
        message=message,
        gpu_count=int(_number(spec.get("gpus"), 0)),
        sla=_number(spec.get("throughputSLA"), 0.0),
    )


def _jobs(
    record: ClusterRecord, warnings: list[str], invalid: list[JobView] | None = None
) -> list[_Job]:
    out: list[_Job] = []
    for raw in record.offline_jobs:
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '?')}"
        try:
            obj = OfflineJob.model_validate(raw)
        except ValidationError as exc:
            problem = str(exc).splitlines()[0]
            warnings.append(f"OfflineJob {key}: {problem}")
            if invalid is not None:
                invalid.append(invalid_job_view(raw, validation_summary(exc)))
            continue
        profile: JobProfile | None = None
        api_profile = obj.spec.profile
        try:
            if api_profile is None and key in record.profiles:
                api_profile = Profile.model_validate(record.profiles[key])
            if api_profile is not None:
                profile = JobProfile.from_api(api_profile)
        except (ValidationError, ValueError) as exc:
            warnings.append(f"OfflineJob {key}: profile: {str(exc).splitlines()[0]}")
        out.append(_Job(obj=obj, key=key, profile=profile))
    return out


def build_dashboard(record: ClusterRecord, config: ModelConfig | None = None) -> DashboardData:
    """The snapshot of ``record`` (see the module docstring)."""
    warnings: list[str] = []
    summaries = _summaries(record, warnings)
    bias = record_bias(record, warnings)
    traces = {str((t.get("metadata") or {}).get("name")): t for t in record.node_traces}
    nodes = [with_uninstrumented(node_view(summaries[n]), traces.get(n)) for n in sorted(summaries)]

    evictions: list[EvictionView] = []
    for rec in record.eviction_reports:
        try:
            evictions.append(eviction_view(rec))
        except (ValueError, ValidationError) as exc:
            where = f"{rec.namespace}/{rec.config_map or '?'}"
            warnings.append(f"eviction report {where}: {str(exc).splitlines()[0]}")
    evictions.sort(key=lambda e: e.time, reverse=True)
    by_job: dict[str, list[EvictionView]] = {}
    for ev in evictions:
        by_job.setdefault(ev.job, []).append(ev)

    monitor = record_monitor(record)
    jobs: list[JobView] = []
    jobs_in = _jobs(record, warnings, invalid=jobs)
    for job in jobs_in:
        series = record.job_series.get(job.key) or parse_sla_windows(
            job.obj.metadata.annotations.get(ANNOTATION_SLA_WINDOWS)
        )
        points = sorted(series, key=lambda p: p.t)
        jobs.append(_job_view(job, points, by_job, record.generated_at, monitor))
    jobs.sort(key=lambda j: j.key)

    nodes = [with_placements(n, jobs) for n in nodes]
    occupied: dict[str, dict[int, str]] = {}
    for n in nodes:
        for g in n.gpus:
            if g.offline_job:
                occupied.setdefault(n.name, {})[g.index] = g.offline_job

    summary = current_point(nodes, jobs)
    summary.evictions = max(summary.evictions, len(evictions))
    history = record.series
    if not history.harvested_utilization:
        history = series_with_point(history, record.generated_at.timestamp(), summary)
    summary.period = period_figures(history)
    snapshot = ClusterSnapshot(
        generated_at=record.generated_at,
        source=record.source,
        title=record.title,
        summary=summary,
        nodes=nodes,
        jobs=jobs,
        evictions=evictions,
        series=history,
        warnings=warnings,
    )
    return DashboardData(
        snapshot=snapshot,
        summaries=summaries,
        profiles={j.key: j.profile for j in jobs_in if j.profile is not None},
        occupied=occupied,
        config=config or ModelConfig(),
        bias=bias,
        # A record that says how its operator admits is judged so, stale nodes included.
        now=record.generated_at if record.admission is not None else None,
        stale_after_seconds=(
            record.admission.trace_stale_after_seconds if record.admission is not None else None
        ),
    )


def record_bias(record: ClusterRecord, warnings: list[str]) -> BiasTable:
    """The operator's bias table in ``record``, configured as its admission rule configures
    it (an empty table when there is none, or, with a warning, when it does not parse)."""
    admission = record.admission or AdmissionSettings()
    config = AdmissionRisk(admission.risk_target).bias_config()
    try:
        return from_configmap(record.bias, config)
    except ValueError as exc:
        warnings.append(
            f"bias table {BIAS_CONFIGMAP}: {str(exc).splitlines()[0]}; other nodes are "
            "judged without the operator's learned corrections"
        )
        return BiasTable(config)
