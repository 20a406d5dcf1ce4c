"""The SLA monitor: one tick per Running job per window; keep, or evict and requeue.

Contract. Each tick (``handlers.running``: one loop over the Running OfflineJobs, every
``--sla-window``):

1. observes the job's throughput fraction for the latest window
   (``gleaner.operator.observation``: the NodeTrace of its node as the watch delivered it,
   ``ctx.traces``, else a GET; or Prometheus through ``ctx.prometheus``), skipping windows
   from before the placement;
2. appends the sample to the placement's history (annotation ``gleaner.dev/sla-windows``),
   judged over the job's ``spec.slaWindow`` (``gleaner.scheduler.monitor.sla_windows``), and
   writes ``status.observed`` and the ``SLAMet`` condition (and the job's
   ``gleaner_operator_job_observed_throughput_fraction`` / ``..._throughput_sla`` gauges),
   and counts each SLA window it closed in ``gleaner_operator_sla_windows_total``;
3. feeds the recorded sample to the bias table (``gleaner.operator.bias.feed``: observed
   against the placement's raw prediction, under the job's class), which later scheduling
   passes correct their predictions by and ``handlers.bias`` writes back to its ConfigMap;
4. asks ``gleaner.scheduler.decide_sla`` (grace, k-of-n) whether to keep or evict.

Steps 2 and 3 and the eviction plan are the shared lifecycle's
(``gleaner.scheduler.lifecycle``: ``sla_tick``, ``evict``), which the simulator drives too.

On evict, in an order that a crash at any point can resume without loss or duplicates:
the eviction-report ConfigMap (named by the eviction number, so a retry finds it); the
status (``evictions`` record, ``evictionCount``, ``excludedNodes``, phase Evicted with
``nextAttemptAfter`` from the backoff, or Failed after ``maxEvictions``); then the Pods
are deleted, the history cleared, a Warning Event ``SLAViolation`` posted, and the
scheduling loop kicked so the job is placed elsewhere once its backoff passes.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

from gleaner.api import (
    EvictionRecord,
    NodeTrace,
    Observed,
    OfflineJobStatus,
    Phase,
    Placement,
)
from gleaner.api.contract import ANNOTATION_SLA_WINDOWS, job_selector
from gleaner.clients.kube import ConflictError, configmaps_path, nodetraces_path, pods_path
from gleaner.operator import status as st
from gleaner.operator.bias import feed, job_class
from gleaner.operator.builders import build_eviction_report_configmap
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event
from gleaner.operator.jobs import parse_status, patch_annotations, update_status
from gleaner.operator.observation import ObservedWindow, observe_from_nodetrace
from gleaner.operator.slahistory import (
    dump_history,
    history_for,
    spec_sla_window_seconds,
    stored_windows,
)
from gleaner.operator.sources.prometheus import observe_from_prometheus
from gleaner.scheduler.lifecycle import evict as lifecycle_evict
from gleaner.scheduler.lifecycle import sla_tick
from gleaner.scheduler.monitor import SLADecision, SLAHistory
from gleaner.scheduler.report import PredictedFactors, build_eviction_report

logger = logging.getLogger(__name__)


async def _observe(
    ctx: OperatorContext, namespace: str, name: str, placement: Placement, now: datetime
) -> ObservedWindow | None:
    if ctx.prometheus is not None:
        obs = await observe_from_prometheus(
            ctx.prometheus,
            namespace,
            name,
            ctx.config.sla.window_seconds,
            placement.memory,
            now,
        )
        if obs is not None and obs.end <= placement.decided_at:
            return None
        return obs
    try:
        # The NodeTrace watch's copy (parsed once for every job on the node); a GET only
        # when the watch has not delivered this node.
        trace: NodeTrace | dict[str, Any] | None = ctx.traces.trace(placement.node)
        if trace is None:
            trace = await ctx.client.get(nodetraces_path(placement.node))
        if trace is None:
            return None
        return observe_from_nodetrace(
            trace, list(placement.gpu_indices), placement.memory, placement.decided_at
        )
    except ValueError as exc:
        logger.warning("NodeTrace %s unusable for %s/%s: %s", placement.node, namespace, name, exc)
        return None


async def monitor_sla(ctx: OperatorContext, body: dict[str, Any]) -> str:
    """One SLA tick for one job; returns a short outcome for kopf's log."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    status = parse_status(body)
    placement = status.placement
    if status.phase is not Phase.RUNNING or placement is None:
        return "not running"
    sla = float((body.get("spec") or {}).get("throughputSLA") or 0)
    if status.batch is not None and status.batch.deadline_sla is not None:
        sla = max(sla, status.batch.deadline_sla)  # a batch deadline raised it (docs/batch.md)
    if not 0 < sla <= 1:
        return "no SLA"
    now = datetime.now(UTC)
    obs = await _observe(ctx, namespace, name, placement, now)
    history = history_for(
        f"{namespace}/{name}",
        sla,
        placement,
        stored_windows(body),
        spec_sla_window_seconds(body.get("spec") or {}),
        ctx.config.sla,
    )
    tick = sla_tick(
        history,
        None if obs is None else (obs.end.timestamp(), obs.throughput_fraction),
        now.timestamp(),
        ctx.config.sla,
    )
    history = tick.history
    if obs is not None and tick.recorded:
        await patch_annotations(
            ctx, namespace, name, {ANNOTATION_SLA_WINDOWS: dump_history(history)}
        )
        # Fed once per recorded sample (the history annotation makes a restarted operator
        # skip samples it already recorded, so none is fed twice).
        if feed(ctx.bias, placement, job_class(meta.get("labels")), obs.throughput_fraction):
            ctx.bias_clock.changed()
        # The windows this sample closed, counted once for the same reason.
        ctx.metrics.count_windows(namespace, len(placement.gpu_indices), tick.judged)
        met = tick.met  # None: this sample closed no SLA window
        observed = Observed(
            throughput_fraction=obs.throughput_fraction,
            window_seconds=obs.seconds,
            tokens_per_second=(placement.predicted_tokens_per_second or 0.0)
            / max(placement.throughput_fraction, 1e-9)
            * obs.throughput_fraction
            if placement.predicted_tokens_per_second is not None
            else None,
            updated_at=now,
        )

        def record(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
            if cur.phase is not Phase.RUNNING or cur.placement != placement:
                return None
            return st.observed(cur, observed, sla, met, now)

        if await update_status(ctx, namespace, name, record) is not None:
            ctx.metrics.set_job(namespace, name, sla, obs.throughput_fraction)

    decision = tick.decision
    if not decision.evict:
        return decision.reason
    await carry_out_eviction(ctx, body, status, placement, history, decision, now)
    return f"evicted: {decision.reason}"


async def carry_out_eviction(
    ctx: OperatorContext,
    body: dict[str, Any],
    status: OfflineJobStatus,
    placement: Placement,
    history: SLAHistory,
    decision: SLADecision,
    now: datetime,
    move: bool = False,
    planned_exit: bool = False,
) -> None:
    """Evict the job from its placement (module docstring). With ``move`` (a move before a
    forecast peak, ``handlers.move``): requeued at once by the placement rule, not counted
    toward ``maxEvictions``, no eviction report, a Normal Event ``MovedBeforePeak``; with
    ``planned_exit`` too (the job leaves by its planned exit, for the queue), the Event and
    the ``Ready`` condition say ``PlannedExit`` instead."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    cfg = ctx.config.sla
    plan = lifecycle_evict(
        status.phase,
        placement.node,
        status.eviction_count,
        int(spec.get("maxEvictions", 3)),
        status.excluded_nodes,
        now.timestamp(),
        cfg,
        move,
    ).plan
    predicted = PredictedFactors(
        compute=placement.compute,
        memory=placement.memory,
        multi_gpu=placement.multi_gpu,
        throughput_fraction=placement.throughput_fraction,
    )
    report_name: str | None = None
    if not move:  # reports are numbered by eviction; a move is not one
        report = build_eviction_report(
            history, decision, plan, predicted, now.timestamp(), cfg, tuple(placement.gpu_uuids)
        )
        configmap = build_eviction_report_configmap(
            name, namespace, plan.eviction_count, report.to_json()
        )
        with contextlib.suppress(ConflictError):  # written by an earlier try of this eviction
            await ctx.client.create(configmaps_path(namespace), configmap)
        report_name = configmap["metadata"]["name"]
    last = history.windows[-1].throughput_fraction if history.windows else 0.0
    record = EvictionRecord(
        time=now,
        node=placement.node,
        gpu_indices=list(placement.gpu_indices),
        reason=decision.reason,
        sla=history.sla,
        predicted_throughput_fraction=placement.throughput_fraction,
        observed_throughput_fraction=last,
        report=report_name,
        type=st.leave_type(move, planned_exit),
    )
    next_at = (
        None
        if plan.next_attempt_after is None
        else datetime.fromtimestamp(plan.next_attempt_after, UTC)
    )

    def mark(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        if cur.phase not in st.BOUND_PHASES or cur.placement != placement:
            return None
        return st.evicted(
            cur,
            record,
            eviction_count=plan.eviction_count,
            excluded_nodes=plan.excluded_nodes,
            failed=plan.failed,
            next_attempt_after=next_at,
            message=plan.message,
            now=now,
            moved=move,
            planned_exit=move and planned_exit,
        )

    new = await update_status(ctx, namespace, name, mark)
    if new is None:
        return
    ctx.metrics.set_job(namespace, name, history.sla, None)  # no longer bound, not observed
    pods = await ctx.client.list(pods_path(namespace), label_selector=job_selector(name))
    for pod in pods:
        await ctx.client.delete(pods_path(namespace, str((pod.get("metadata") or {}).get("name"))))
    await patch_annotations(ctx, namespace, name, {ANNOTATION_SLA_WINDOWS: None})
    if move:
        left = "left" if planned_exit else "moved from"
        await post_event(
            ctx.client,
            namespace,
            name,
            meta.get("uid"),
            "Normal",
            st.move_reason(planned_exit),
            f"{left} {placement.node}: {decision.reason}; {plan.message}",
        )
        ctx.kick(f"move {namespace}/{name}")
        return
    ctx.metrics.evictions.inc()
    await post_event(
        ctx.client,
        namespace,
        name,
        meta.get("uid"),
        "Warning",
        "SLAViolation",
        f"evicted from {placement.node}: {decision.reason}; {plan.message}",
    )
    ctx.kick(f"eviction {namespace}/{name}")
