"""Moves before a forecast peak: the operator drives the simulator's move rule.

Contract. ``move_loop(ctx)`` wakes every ``--move-check-interval`` (0: never started) and,
on the active replica only, runs ``move_pass``: for each Running job placed at least
``--move-min-stay`` ago it builds the same ``SchedulingSnapshot`` a scheduling pass builds
(node summaries over the placement horizon, occupied GPUs, Node labels and availability,
staleness, the bias table) and asks ``gleaner.scheduler.move.check_move`` (which the
simulator calls too) whether the job's node still admits it over the next
``--move-horizon`` with its own GPUs counted free, and whether another node admits it by
the placement rule. When it moves, the SLA eviction's path carries it out
(``handlers.sla.carry_out_eviction`` with ``move``): the status records it (an
``evictions`` entry with reason "moved ...", ``excludedNodes`` unchanged, phase Evicted
with no backoff, ``Ready`` false with reason ``MovedBeforePeak``, ``evictionCount``
unchanged), then the Pods are deleted and a Normal Event ``MovedBeforePeak`` says why; the
scheduling pass places the job again at once by the placement rule (which does not
admit the node it left over the coming hours).

A job whose placement carries a planned exit (``status.placement.plannedExit``: placed by
the scheduling pass's shorter admission pass, ``--planned-exit``) and that no other node
admits is asked once more, over the exit horizon (the next hour:
``gleaner.scheduler.move.check_exit``); when its node does not admit it then either, it
takes the same path with reason "planned exit: ..." (``Ready`` false and a Normal Event,
both with reason ``PlannedExit``, the Event saying "left NODE: planned exit: ..."): it waits
in the queue (phase Evicted, no backoff, no node excluded) until the placement rule, or the
shorter pass again, places it. The status is written
before any Pod is deleted, so a restart in between completes the move once: the job is
Evicted, its old Pod is collected by the scheduling pass and one new Pod is created.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gleaner.api import Phase
from gleaner.clients.kube import configmaps_path
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.scheduling import replica_verdict
from gleaner.operator.handlers.sla import carry_out_eviction
from gleaner.operator.jobs import parse_status
from gleaner.operator.listing import list_histories, prime_caches
from gleaner.operator.placement import object_key, object_meta, occupied_gpus
from gleaner.operator.slahistory import history_for, spec_sla_window_seconds, stored_windows
from gleaner.operator.traces import (
    load_node_summaries,
    unbindable_nodes,
    uninstrumented_gpus,
    with_histories,
)
from gleaner.operator.validation import ValidJob, profile_configmap_name, validate_job
from gleaner.perfmodel import JobProfile, NodeSummary
from gleaner.scheduler import JobRequest, SchedulingSnapshot
from gleaner.scheduler.monitor import SLAAction, SLADecision
from gleaner.scheduler.move import MoveCheck, check_exit, check_move, exit_open

logger = logging.getLogger(__name__)


def _moved(
    occupied: Mapping[str, Mapping[int, str]], job: str, check: MoveCheck
) -> dict[str, dict[int, str]]:
    out = {n: {g: k for g, k in held.items() if k != job} for n, held in occupied.items()}
    if check.destination is not None:
        out.setdefault(check.destination.node, {}).update(
            dict.fromkeys(check.destination.gpus, job)
        )
    return out


def _created(body: dict[str, Any]) -> str:
    """The order moves are judged in: oldest job first (its creation timestamp)."""
    return str(object_meta(body).get("creationTimestamp"))


async def move_pass(ctx: OperatorContext) -> list[str]:
    """One look at every Running job (module docstring); returns the jobs moved."""
    cfg = ctx.config
    await prime_caches(ctx)  # what the scheduling pass reads (its watch caches)
    jobs = ctx.watched_jobs.items()
    pods = ctx.watched_pods.items()
    traces = ctx.watched_traces.items()
    now = datetime.now(UTC)
    live = [j for j in jobs if not object_meta(j).get("deletionTimestamp")]
    statuses = {object_key(j): parse_status(j) for j in live}
    rule = cfg.planned_exit
    due = [
        j
        for j in live
        if (s := statuses[object_key(j)]).phase is Phase.RUNNING
        and s.placement is not None
        and (now - s.placement.decided_at).total_seconds() >= cfg.move_min_stay
    ]
    if not due:
        return []
    if not ctx.histories.listed:
        await list_histories(ctx)
    with_hours = with_histories(traces, ctx.histories)
    nodes = await load_node_summaries(cfg, with_hours, now, ctx.hours)
    coming = await load_node_summaries(cfg, with_hours, now, ctx.hours, cfg.move_horizon)
    snapshot = SchedulingSnapshot(
        jobs=[],
        nodes=nodes,
        now=now,
        node_labels=ctx.nodes.labels(),
        occupied=occupied_gpus(pods, statuses),
        unavailable={**unbindable_nodes(nodes), **ctx.nodes.unavailable()},
        stale_after_seconds=cfg.trace_stale_after,
        bias=ctx.bias,
        uninstrumented=uninstrumented_gpus(traces, ctx.hours),
    )
    # A node whose trace is stale, or that is cordoned or not ready, says nothing about a
    # coming peak: its jobs are left to the SLA monitor, not moved on its silence.
    unavailable = snapshot.state().unavailable
    soon: dict[str, NodeSummary] | None = None  # over the exit horizon, loaded when asked
    moved: list[str] = []
    for body in sorted(due, key=_created):
        ns, name = object_key(body)
        status = statuses[(ns, name)]
        placement = status.placement
        assert placement is not None
        if placement.node not in coming or placement.node in unavailable:
            continue  # nothing (current) to judge its node by
        cm_name = profile_configmap_name(body)
        cm = None if not cm_name else await ctx.client.get(configmaps_path(ns, cm_name))
        verdict = validate_job(body, cm)
        if not isinstance(verdict, ValidJob):
            continue
        job = verdict.job.model_copy(update={"status": status})
        request = JobRequest.from_offlinejob(job, JobProfile.from_api(verdict.profile))
        check = check_move(
            snapshot,
            request,
            placement.node,
            coming[placement.node],
            placement.decided_at.timestamp(),
            now.timestamp(),
            None,
            cfg.move_min_stay,
        )
        reason = check.reason
        planned_exit = not check.move
        if not check.move:
            if rule is None or not exit_open(check, placement.planned_exit):
                continue
            if soon is None:
                soon = await load_node_summaries(
                    cfg, with_hours, now, ctx.hours, rule.exit_horizon_s
                )
            if placement.node not in soon or not check_exit(
                check, snapshot, request, placement.node, soon[placement.node], True
            ):
                continue
            reason = rule.exit_reason
        history = history_for(
            f"{ns}/{name}",
            request.sla,
            placement,
            stored_windows(body),
            spec_sla_window_seconds(body.get("spec") or {}),
            cfg.sla,
        )
        decision = SLADecision(SLAAction.EVICT, reason)
        await carry_out_eviction(
            ctx,
            body,
            status,
            placement,
            history,
            decision,
            now,
            move=True,
            planned_exit=planned_exit,
        )
        moved.append(f"{ns}/{name}")
        # The next job is judged as the simulator judges it: this one's GPUs free, the
        # destination's held (the scheduling pass places it there by the same rule).
        snapshot = replace(snapshot, occupied=_moved(snapshot.occupied, request.key, check))
    return moved


async def move_loop(ctx: OperatorContext) -> None:
    """``move_pass`` every ``--move-check-interval`` on the active replica, forever."""
    while True:
        await asyncio.sleep(ctx.config.move_check_interval)
        if not ctx.running:
            continue
        verdict = await replica_verdict(ctx)
        if not verdict.active:
            continue
        try:
            async with ctx.scheduling_lock:
                moved = await move_pass(ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # tried again at the next interval
            logger.exception("move check failed: %s", exc)
            continue
        if moved:
            logger.info("moved before a forecast peak: %s", ", ".join(moved))
