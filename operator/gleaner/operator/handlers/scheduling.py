"""The scheduling loop: one pass at a time reads the cluster, binds, places, explains.

Contract. ``scheduling_loop`` waits for kicks (job created/validated, NodeTrace changed, a
Pod finished, an eviction) or for the earliest backoff of a queued job to pass (the loop's
own clock, from the last pass; every ``requeue_interval`` until a pass has run) and runs
``scheduling_pass`` at most once per ``min_pass_interval``; many kicks coalesce into one
pass. With peering on, each pass first
reads kopf's peering object and is skipped unless this replica is the active one
(``gleaner.operator.peering``): kopf pauses a standby's handlers, not this loop. A pass,
under the global scheduling lock:

1. reads OfflineJobs, offline Pods (label ``gleaner.dev/role=offline``) and NodeTraces
   (or asks Prometheus) from the operator's watch caches (``ctx.watched_jobs``, ...:
   ``gleaner.operator.objectcache``), each listed from the API server and merged in before
   the first pass, after a standby spell and every ``CACHE_RESYNC_SECONDS``; the
   operator's own writes go into them as the API server returned them, so a pass never
   decides on a copy older than what this replica wrote. Then it refreshes the metrics
   read from jobs (jobs by phase; per-job SLA and observed fraction);
2. **binds**: a Scheduled job whose Pod is missing gets it (check-before-create with the
   deterministic name ``<job>-<attempt>``; a 409 means it is there) — this is also how a
   restarted operator finishes a binding it was killed in the middle of;
   a Running job whose Pod vanished is requeued (``Evicted``, ``PodDeleted``);
3. **collects**: deletes offline Pods no bound job owns any more (leftovers of an
   eviction or of a job deleted while the operator was down); finished Pods are kept;
4. derives the occupied GPUs from the Pods that still exist plus the placements recorded
   in bound jobs' status (recorded first, bound second: nothing is ever double-booked);
5. **places** the queued jobs (Pending, Unschedulable and Evicted, valid, past their
   ``nextAttemptAfter``) with one call to the scheduler, which also reads the Kubernetes
   Nodes' labels (``gpuSelector.nodeSelector``) and cordons from ``ctx.nodes`` (listed
   once when the cache is not primed yet, then kept current by the Node watch); each
   placement's Pod is created first (create first: a 409 means it is there, and reads it;
   ``handlers.binding``), and the job's status records the placement once the Pod runs or
   ``record_delay`` has passed (judged on the job as this pass listed it, with its
   resourceVersion as a precondition: a job changed since is read again and judged
   afresh); a queued job whose current attempt's Pod exists with no placement held (a
   restart between the two) adopts that Pod's placement; jobs that fit
   nowhere become Unschedulable with the scheduler's reasons, a ``FailedScheduling`` Event
   (only when the reasons change), and a backoff before the next attempt. Jobs whose
   profile is being measured (``handlers.profiling``) take their next profiling run through
   the same call; they stay Pending.

The loop runs passes with ``background=True``: step 5's writes (placements and Unschedulable
reasons) go on in a task while the next pass runs; ``ctx.binding`` holds them until each is
written (its Pod created and its placement recorded). A pass takes a copy of it with its
caches' snapshots and counts those placements' GPUs as taken in step 4, and leaves their
jobs out of steps 2, 3 and 5.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from gleaner.api import API_VERSION, ConditionType, OfflineJob, OfflineJobStatus, Phase, Placement
from gleaner.api.common import find_condition
from gleaner.api.contract import FINALIZER, LABEL_JOB
from gleaner.clients.kube import (
    ConflictError,
    KubeError,
    configmaps_path,
    nodes_path,
    offlinejobs_path,
    pods_path,
)
from gleaner.operator import status as st
from gleaner.operator.builders import build_offline_pod, placement_of_pod, pod_name
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event, post_object_event
from gleaner.operator.handlers import binding, profiling
from gleaner.operator.handlers.bias import flush_bias, load_bias
from gleaner.operator.handlers.binding import Judged
from gleaner.operator.handlers.validate import (
    WAITING_PHASES,
    apply_verdict,
    spec_judged,
)
from gleaner.operator.jobs import parse_status, update_status
from gleaner.operator.listing import list_histories, prime_caches
from gleaner.operator.metrics import cluster_measures, job_gauges
from gleaner.operator.peering import PeeringVerdict, peering_paths, peering_verdict
from gleaner.operator.placement import (
    TERMINAL_POD_PHASES,
    QueuedJob,
    explained_placements,
    object_key,
    object_meta,
    occupied_gpus,
    plan_placements,
)
from gleaner.operator.traces import (
    FORECAST_HORIZON_S,
    load_node_summaries,
    unbindable_nodes,
    uninstrumented_gpus,
    with_histories,
)
from gleaner.operator.uninstrumented import REASON as UNINSTRUMENTED
from gleaner.operator.uninstrumented import BoundJob, recovered, uninstrumented_notices
from gleaner.operator.validation import (
    NeedsProfile,
    ValidJob,
    profile_configmap_name,
    validate_job,
)
from gleaner.scheduler.explain import chosen_summary

logger = logging.getLogger(__name__)


@dataclass
class PassResult:
    """What one pass did (for logs, metrics and tests)."""

    jobs: int = 0
    queued: int = 0
    placed: int = 0
    unschedulable: int = 0
    handed: int = 0
    """Placements and Unschedulable reasons left to a background binding (not counted in
    ``placed`` and ``unschedulable``)."""
    bound_missing: int = 0
    collected: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per stage: read, reconcile, decide, bind."""
    errors: list[str] = field(default_factory=list)
    next_due: datetime | None = None
    """When the next pass has work without a kick: the earliest backoff of a queued job
    that was not due yet, a retry after a job this pass marked Unschedulable, or now when
    the queue was longer than one pass takes. None: nothing waits on time."""


def _key_of(q: QueuedJob) -> tuple[str, str]:
    return q.job.metadata.namespace or "default", q.job.metadata.name


def _wait_seconds(due: datetime | None, now: datetime, heartbeat: float) -> float:
    """How long the loop waits for a kick before it looks at the clock again."""
    if due is None:
        return heartbeat
    return min(heartbeat, max(0.0, (due - now).total_seconds()))


async def scheduling_loop(ctx: OperatorContext) -> None:
    """Run passes on kicks and when a backoff passes, forever (cancelled at cleanup).

    The loop keeps the time at which queued jobs come due itself (``PassResult.next_due``)
    instead of a kopf timer per waiting job: with thousands of jobs those timers were most
    of the operator's CPU (docs/benchmarks.md, "Scheduling on the real control plane").
    Until a pass has run (a standby replica, a failed pass) it looks again every
    ``requeue_interval``, as the timers did.

    Passes run with ``background=True``: while one pass's placements are being written, the
    next pass decides the jobs that arrived meanwhile against the GPUs left. The background
    bindings are cancelled with the loop.
    """
    try:
        await _loop(ctx)
    finally:
        for task in list(ctx.bind_tasks):
            task.cancel()
        for task in list(ctx.bind_tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _loop(ctx: OperatorContext) -> None:
    last = 0.0
    standby = False  # this replica was paused: the active one kept learning meanwhile
    ctx.health.first_pass_done = True
    retry = timedelta(seconds=ctx.config.requeue_interval)
    due: datetime | None = datetime.now(UTC) + retry
    while True:
        reasons = await ctx.wait_for_kick(_wait_seconds(due, datetime.now(UTC), 5.0))
        ctx.health.beat()
        await flush_bias(ctx)  # the SLA monitor's feed, at most once per persist interval
        if not reasons:
            if due is None or datetime.now(UTC) < due:
                continue
            reasons = {"backoff passed"}
        wait = ctx.config.min_pass_interval - (time.monotonic() - last)
        if wait > 0:
            await asyncio.sleep(wait)
        last = time.monotonic()
        due = datetime.now(UTC) + retry  # unless a pass says otherwise
        verdict = await replica_verdict(ctx)
        if not verdict.active:
            logger.info("scheduling pass skipped: %s", verdict.reason)
            standby = True
            if verdict.paused:
                for cache in ctx.caches():
                    cache.invalidate()  # kopf paused this replica's watches: list again
            continue
        if standby and await load_bias(ctx):
            standby = False
        try:
            result = await scheduling_pass(ctx, background=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed pass must not kill the loop
            logger.exception("scheduling pass failed: %s", exc)
            ctx.kick("retry after a failed pass")
            await asyncio.sleep(1.0)
            continue
        due = result.next_due
        if (
            result.placed
            or result.unschedulable
            or result.bound_missing
            or result.collected
            or result.handed
        ):
            logger.info(
                "pass: %d jobs, %d queued, %d handed to binding, %d placed, "
                "%d unschedulable, %d re-bound, "
                "%d collected in %.3fs %s (kicked by %s)",
                result.jobs,
                result.queued,
                result.handed,
                result.placed,
                result.unschedulable,
                result.bound_missing,
                result.collected,
                result.seconds,
                result.timings,
                ", ".join(sorted(reasons))[:200],
            )


async def replica_verdict(ctx: OperatorContext) -> PeeringVerdict:
    """Whether this replica may run a pass now (always, without peering)."""
    name = ctx.config.peering
    if name is None:
        return PeeringVerdict(True, "standalone")
    now = datetime.now(UTC)
    verdict = PeeringVerdict(True, "no peering object")
    for path in peering_paths(name, ctx.config.namespaces):
        try:
            body = await ctx.client.get(path)
        except KubeError as exc:
            return PeeringVerdict(False, f"peering object unreadable: {exc}", paused=True)
        if body is None:
            return PeeringVerdict(False, f"peering object {path} does not exist", paused=True)
        status = body.get("status") or {}
        verdict = peering_verdict(
            status if isinstance(status, dict) else {}, ctx.config.peering_priority, now
        )
        if not verdict.active:
            return verdict
    return verdict


def _is_valid(status: OfflineJobStatus) -> bool:
    cond = find_condition(status.conditions, ConditionType.VALID.value)
    return cond is not None and cond.status.value == "True"


def _due(status: OfflineJobStatus, now: datetime) -> bool:
    return status.next_attempt_after is None or status.next_attempt_after <= now


async def scheduling_pass(ctx: OperatorContext, *, background: bool = False) -> PassResult:
    """One pass. ``background``: the pass returns once it has decided, and its placements
    and Unschedulable reasons are written by a task of their own (``ctx.binding`` holds
    them until written), so the next pass can decide the jobs that arrived meanwhile."""
    async with ctx.scheduling_lock:
        started = time.monotonic()
        result = await _pass(ctx, background)
        result.seconds = time.monotonic() - started
        ctx.metrics.scheduling_latency.observe(result.seconds)
        return result


async def _pass(ctx: OperatorContext, background: bool = False) -> PassResult:
    result = PassResult()
    mark = time.monotonic()

    def stage(name: str) -> None:
        nonlocal mark
        now_m = time.monotonic()
        result.timings[name] = round(now_m - mark, 3)
        mark = now_m

    await prime_caches(ctx)
    # Taken with the caches' snapshots, with no await between: a binding that ended before
    # is in the caches (its status write and its Pod went in as the API server returned
    # them), one that has not is in this copy.
    held = dict(ctx.binding)
    jobs = ctx.watched_jobs.items()
    pods = ctx.watched_pods.items()
    traces = ctx.watched_traces.items()
    now = datetime.now(UTC)
    result.jobs = len(jobs)
    live = [j for j in jobs if not object_meta(j).get("deletionTimestamp")]
    statuses = {object_key(j): parse_status(j) for j in live}
    bodies = {object_key(j): j for j in live}
    ctx.metrics.set_phases(s.phase for s in statuses.values())
    by_key = {k: (bodies[k], s) for k, s in statuses.items()}
    ctx.metrics.sync_jobs(*job_gauges(by_key))
    ctx.metrics.set_cluster(*cluster_measures(by_key, ctx.config.sla))
    pods_by_key = {object_key(p): p for p in pods}
    stage("read")

    # 2. bind what was recorded but not created; requeue what lost its Pod.
    for key, status in statuses.items():
        if status.phase not in st.BOUND_PHASES or not status.pods or status.placement is None:
            continue
        if key in held:
            continue  # its binding is under way
        current = (key[0], status.pods[-1])
        if current in pods_by_key:
            continue
        if status.phase is Phase.SCHEDULED:
            pod = await _ensure_pod(ctx, bodies[key], status.placement, status.attempt)
            if pod is not None:
                pods_by_key[current] = pod
                result.bound_missing += 1
        else:
            new = await update_status(ctx, key[0], key[1], _lost(current[1], now))
            if new is not None:
                statuses[key] = new

    # A queued job whose current attempt's Pod exists, its placement not held: the operator
    # stopped between making the Pod and recording it. Record it now (or delete the Pod).
    adopted: set[tuple[str, str]] = set()
    for key, status in statuses.items():
        if status.phase not in st.QUEUED_PHASES or key in held:
            continue
        pod = pods_by_key.get((key[0], pod_name(key[1], status.attempt)))
        if pod is not None and (object_meta(pod).get("labels") or {}).get(LABEL_JOB) == key[1]:
            adopted.add(key)
            await binding.adopt(ctx, key, status, pod)
            result.bound_missing += 1

    # 3. collect Pods no bound job owns.
    for pkey, pod in list(pods_by_key.items()):
        owner = (pkey[0], str((object_meta(pod).get("labels") or {}).get(LABEL_JOB)))
        if owner in held or owner in adopted:
            continue  # its job's status in the lists may be older than the Pod
        if _should_collect(pod, pkey, statuses):
            try:
                await ctx.client.delete(pods_path(*pkey))
                result.collected += 1
            except KubeError as exc:
                result.errors.append(str(exc))
            del pods_by_key[pkey]

    # 4. occupied GPUs.
    occupied = occupied_gpus(pods_by_key.values(), statuses, held)

    stage("reconcile")

    # Uninstrumented GPUs: Events on their NodeTrace, Node and the bound jobs they pause.
    uninstrumented = uninstrumented_gpus(traces, ctx.hours)
    await _report_uninstrumented(ctx, uninstrumented, statuses, bodies)

    # 5. place the queue.
    needs_profile: list[OfflineJob] = []
    fresh: dict[tuple[str, str], Judged] = {}
    waiting = {k: s for k, s in statuses.items() if k not in held and k not in adopted}
    queue = await _build_queue(ctx, bodies, waiting, now, needs_profile, fresh)
    # Profile on submit: runs to place go through the same decide() call.
    runs, retry = await profiling.advance_profiles(
        ctx, needs_profile, list(pods_by_key.values()), traces, now
    )
    result.queued = len(queue)
    result.next_due = _next_due(statuses, now)
    if retry is not None:  # a profiling attempt's backoff, or a run awaiting its GPU time
        result.next_due = retry if result.next_due is None else min(result.next_due, retry)
    if len(queue) > ctx.config.max_batch:
        result.next_due = now  # the rest of the queue, in the next pass
    if not queue and not runs:
        return result
    if not ctx.histories.listed:
        await list_histories(ctx)
    nodes = await load_node_summaries(
        ctx.config, with_histories(traces, ctx.histories), now, ctx.hours
    )
    ctx.judged = (now, dict(nodes))
    await _prime_nodes(ctx)
    run_of = {r.queued.key: r for r in runs}
    batch = queue[: ctx.config.max_batch] + [r.queued for r in runs]
    # The planned exit's second pass judges large jobs over a shorter horizon: the nodes
    # over it are loaded only when such a job waits (profiling runs are not such jobs), and
    # never from Prometheus, whose summaries have no hours (every horizon reads the same).
    rule = None if ctx.config.prometheus_url else ctx.config.planned_exit
    candidates = (
        set()
        if rule is None
        else {
            q.key
            for q in batch
            if q.key not in run_of and rule.second_pass(q.job.spec.gpus, FORECAST_HORIZON_S)
        }
    )
    short_nodes = None
    if rule is not None and candidates:
        short_nodes = await load_node_summaries(
            ctx.config,
            with_histories(traces, ctx.histories),
            now,
            ctx.hours,
            rule.admission_horizon_s,
        )
    # On a thread: a decision over a large queue takes seconds, and the event loop keeps
    # binding the last pass's placements and renewing kopf's peering record meanwhile.
    # Everything it reads is this pass's own (the bias table a copy).
    plan = await asyncio.to_thread(
        plan_placements,
        batch,
        nodes,
        occupied,
        now,
        stale_after_seconds=ctx.config.trace_stale_after,
        node_labels=ctx.nodes.labels(),
        unavailable={**unbindable_nodes(nodes), **ctx.nodes.unavailable()},
        uninstrumented=uninstrumented,
        bias=ctx.bias.copy(),
        explained=explained_placements(len(batch)),
        planned_exit=rule,
        short_nodes=short_nodes,
        horizon_s=FORECAST_HORIZON_S,
        exit_candidates=candidates,
    )
    stage("decide")
    sem = ctx.bind_slots

    async def bind_one(q: QueuedJob, placement: Placement) -> bool:
        explanation = plan.explanations.get(q.key)
        why_not = plan.runner_ups.get(q.key, ())
        detail = "" if explanation is None else chosen_summary(explanation, why_not)
        async with sem:
            if q.key in run_of:
                return await profiling.bind_run(ctx, run_of[q.key], placement)
            return await _bind(
                ctx,
                q,
                placement,
                statuses,
                now,
                detail,
                why_not,
                bodies.get(_key_of(q)),
                fresh.get(_key_of(q)),
            )

    async def explain_one(q: QueuedJob, reason: str) -> bool:
        async with sem:
            if q.key in run_of:
                await profiling.explain_wait(ctx, run_of[q.key], reason)
                return True
            return await _mark_unschedulable(
                ctx, q, reason, now, bodies.get(_key_of(q)), fresh.get(_key_of(q))
            )

    if background:
        # Profiling runs are bound in the pass, as before; the jobs' writes go on in a task
        # while the next pass decides the jobs that arrived meanwhile.
        placements = [(q, p) for q, p in plan.placements if q.key not in run_of]
        unschedulable = [(q, r) for q, r in plan.unschedulable if q.key not in run_of]
        for q, p in placements:
            ctx.binding[_key_of(q)] = p
        for q, _ in unschedulable:
            ctx.binding[_key_of(q)] = None
        result.handed = len(placements) + len(unschedulable)

        async def release(key: tuple[str, str], work: Any) -> bool:
            try:
                return bool(await work)
            finally:
                if key not in ctx.unrecorded:  # held until its placement is recorded
                    ctx.binding.pop(key, None)

        task = asyncio.create_task(
            _finish_binding(
                ctx,
                [release(_key_of(q), bind_one(q, p)) for q, p in placements],
                [release(_key_of(q), explain_one(q, r)) for q, r in unschedulable],
            ),
            name="gleaner-binding",
        )
        ctx.bind_tasks.add(task)
        task.add_done_callback(ctx.bind_tasks.discard)
        plan_placements_now = [(q, p) for q, p in plan.placements if q.key in run_of]
        plan_unschedulable_now = [(q, r) for q, r in plan.unschedulable if q.key in run_of]
        if unschedulable:
            retry_at = datetime.now(UTC) + timedelta(seconds=ctx.config.unschedulable_backoff)
            result.next_due = (
                retry_at if result.next_due is None else min(result.next_due, retry_at)
            )
    else:
        plan_placements_now = list(plan.placements)
        plan_unschedulable_now = list(plan.unschedulable)
    bound = await asyncio.gather(*(bind_one(q, p) for q, p in plan_placements_now))
    result.placed = sum(bound)
    explained = await asyncio.gather(*(explain_one(q, r) for q, r in plan_unschedulable_now))
    result.unschedulable = len(explained)
    if any(explained):
        retry_at = datetime.now(UTC) + timedelta(seconds=ctx.config.unschedulable_backoff)
        result.next_due = retry_at if result.next_due is None else min(result.next_due, retry_at)
    stage("bind")
    return result


async def _finish_binding(
    ctx: OperatorContext,
    binds: list[Coroutine[Any, Any, bool]],
    explains: list[Coroutine[Any, Any, bool]],
) -> None:
    """A background pass's writes: its placements, then its Unschedulable reasons (all
    started at once, each waiting for a slot of ``ctx.bind_slots`` in that order)."""
    started = time.monotonic()
    done = await asyncio.gather(*binds, *explains, return_exceptions=True)
    failed = [d for d in done if isinstance(d, BaseException)]
    for exc in failed:
        if isinstance(exc, asyncio.CancelledError):
            raise exc
        # The job is left queued (or recorded and not bound) for the next pass.
        logger.error("binding failed: %s", exc, exc_info=exc)
    if failed:
        ctx.kick("retry after a failed binding")
    logger.info(
        "bound: %d placed, %d unschedulable in %.3fs",
        sum(1 for d in done[: len(binds)] if d is True),
        sum(1 for d in done[len(binds) :] if d is True),
        time.monotonic() - started,
    )


async def _report_uninstrumented(
    ctx: OperatorContext,
    current: dict[str, dict[int, str]],
    statuses: dict[tuple[str, str], OfflineJobStatus],
    bodies: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Post the Events of ``gleaner.operator.uninstrumented`` for what changed since the
    last pass."""
    bound = [
        BoundJob(ns, name, object_meta(bodies[(ns, name)]).get("uid"), s.placement)
        for (ns, name), s in sorted(statuses.items())
        if s.phase in st.BOUND_PHASES and s.placement is not None
    ]
    notices = [
        *uninstrumented_notices(ctx.uninstrumented, current, bound),
        *recovered(ctx.uninstrumented, current),
    ]
    ctx.uninstrumented = {node: dict(gpus) for node, gpus in current.items()}
    for notice in notices:
        if notice.kind == "OfflineJob":
            await post_event(
                ctx.client,
                notice.namespace,
                notice.name,
                notice.uid,
                "Warning",
                notice.reason,
                notice.message,
            )
            continue
        involved = {
            "apiVersion": API_VERSION if notice.kind == "NodeTrace" else "v1",
            "kind": notice.kind,
            "name": notice.name,
        }
        type_ = "Warning" if notice.reason == UNINSTRUMENTED else "Normal"
        await post_object_event(ctx.client, involved, type_, notice.reason, notice.message)


async def _prime_nodes(ctx: OperatorContext) -> None:
    """List Nodes once, the first time a pass needs them (the watch keeps them current)."""
    if ctx.nodes.primed:
        return
    try:
        ctx.nodes.prime(await ctx.client.list(nodes_path()))
    except KubeError as exc:
        # Without Node labels a job with a nodeSelector is explained as not matching; the
        # next pass lists again.
        logger.warning("cannot list Nodes (labels and cordons unknown this pass): %s", exc)


def _next_due(statuses: dict[tuple[str, str], OfflineJobStatus], now: datetime) -> datetime | None:
    """The earliest backoff end of a valid queued job that is not due at ``now``."""
    waits = [
        s.next_attempt_after
        for s in statuses.values()
        if s.next_attempt_after is not None
        and s.phase in st.QUEUED_PHASES
        and _is_valid(s)
        and not _due(s, now)
    ]
    return min(waits, default=None)


def _lost(
    pod: str, now: datetime
) -> Callable[[dict[str, Any], OfflineJobStatus], OfflineJobStatus | None]:
    def change(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        return st.pod_lost(cur, pod, now)

    return change


def _should_collect(
    pod: dict[str, Any],
    pkey: tuple[str, str],
    statuses: dict[tuple[str, str], OfflineJobStatus],
) -> bool:
    if (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
        return False
    if object_meta(pod).get("deletionTimestamp"):
        return False
    job = (object_meta(pod).get("labels") or {}).get(LABEL_JOB)
    if not job:
        return False
    status = statuses.get((pkey[0], job))
    if status is None:
        return True  # its job is gone (deleted while the operator was down)
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return True
    if status.phase in st.BOUND_PHASES:
        return not status.pods or status.pods[-1] != pkey[1]
    return status.phase is Phase.EVICTED or status.phase is Phase.UNSCHEDULABLE


async def _build_queue(
    ctx: OperatorContext,
    bodies: dict[tuple[str, str], dict[str, Any]],
    statuses: dict[tuple[str, str], OfflineJobStatus],
    now: datetime,
    needs_profile: list[OfflineJob],
    fresh: dict[tuple[str, str], Judged],
) -> list[QueuedJob]:
    """The jobs to place; those whose profile is to be measured go to ``needs_profile``.

    A waiting job whose spec is not judged yet (new, or edited) is validated here: valid,
    queued and due, it is placed with the rest and ``fresh`` says so (its ``Valid`` is
    written with the placement); otherwise its verdict is written now (``apply_verdict``).
    """
    queue: list[QueuedJob] = []
    configmaps: dict[tuple[str, str], dict[str, Any] | None] = {}
    for key, status in statuses.items():
        body = bodies[key]
        if FINALIZER not in (object_meta(body).get("finalizers") or []):
            # Not seen by the job handler yet: it adds the finalizer, whose echo kicks a
            # pass. Placing the job now would write on a copy that the finalizer's patch
            # is about to make stale (a 409 and a fresh read per job), and create Pods for
            # a job whose deletion would not wait for them.
            continue
        judged = spec_judged(body)
        if judged and (
            status.phase not in st.QUEUED_PHASES or not _is_valid(status) or not _due(status, now)
        ):
            continue
        if not judged and status.phase not in WAITING_PHASES:
            continue  # a bound or finished job: its event handler validates it
        cm_name = profile_configmap_name(body)
        cm = None
        if cm_name:
            if (key[0], cm_name) not in configmaps:
                configmaps[(key[0], cm_name)] = await ctx.client.get(
                    configmaps_path(key[0], cm_name)
                )
            cm = configmaps[(key[0], cm_name)]
        verdict = validate_job(body, cm)
        if not judged:
            if (
                isinstance(verdict, ValidJob)
                and status.phase in st.QUEUED_PHASES
                and _due(status, now)
            ):
                fresh[key] = Judged(verdict, object_meta(body).get("generation"))
                job = verdict.job.model_copy(update={"status": status})
                queue.append(QueuedJob(job, verdict.profile))
            else:
                await apply_verdict(ctx, body, verdict)
            continue
        if isinstance(verdict, ValidJob):
            # validate_job parses metadata and spec only; the scheduler also reads the
            # status (excludedNodes after an eviction, evictionCount, nextAttemptAfter).
            job = verdict.job.model_copy(update={"status": status})
            queue.append(QueuedJob(job, verdict.profile))
        elif isinstance(verdict, NeedsProfile):
            if status.phase is Phase.PENDING:
                needs_profile.append(verdict.job.model_copy(update={"status": status}))
            else:
                # Its ConfigMap went away (or went stale) after an eviction: back to
                # Pending, where profiling runs.
                await apply_verdict(ctx, body, verdict)
        else:
            # Its profile ConfigMap went away or turned invalid since it was validated: say
            # so (Invalid); the ConfigMap watch re-validates it when the ConfigMap changes.
            await apply_verdict(ctx, body, verdict)
    return queue


def _job_from_body(body: dict[str, Any]) -> OfflineJob | None:
    raw = {k: v for k, v in body.items() if k in ("apiVersion", "kind", "metadata", "spec")}
    try:
        return OfflineJob.model_validate(raw)
    except ValidationError:
        return None


async def _ensure_pod(
    ctx: OperatorContext,
    body: dict[str, Any],
    placement: Placement,
    attempt: int,
    *,
    look_first: bool = True,
    why: str = "",
) -> dict[str, Any] | None:
    """Create the job's Pod unless it exists (deterministic name; 409 means it exists).

    ``look_first``: GET it before creating, for a binding found half done (a restarted or
    newly active replica, where the Pod is likely there). A placement this pass has just
    recorded creates at once: its Pod is almost never there, and when it is (a deleted Pod
    of the same attempt still terminating), the 409 leads to the same GET.
    """
    job = _job_from_body(body)
    if job is None:
        return None
    manifest = build_offline_pod(job, placement, attempt, why)
    ns = manifest["metadata"]["namespace"]
    if look_first:
        existing = await ctx.client.get(pods_path(ns, manifest["metadata"]["name"]))
        if existing is not None:
            ctx.watched_pods.written(existing)
            return existing
    try:
        pod: dict[str, Any] | None = await ctx.client.create(pods_path(ns), manifest)
    except ConflictError:
        pod = await ctx.client.get(pods_path(ns, manifest["metadata"]["name"]))
    if pod:
        ctx.watched_pods.written(pod)
    return pod


async def _bind(
    ctx: OperatorContext,
    q: QueuedJob,
    placement: Placement,
    statuses: dict[tuple[str, str], OfflineJobStatus],
    now: datetime,
    detail: str = "",
    why_not: tuple[str, ...] = (),
    known: dict[str, Any] | None = None,
    judged: Judged | None = None,
) -> bool:
    """Create the job's Pod for ``placement``; its status records the placement once the
    Pod exists (``handlers.binding``: with the Pod's phase when it runs soon, else after
    ``record_delay``). ``known`` is the pass's copy of the job; with ``judged``, the same
    status write records the pass's validation (``Valid=True``)."""
    ns = q.job.metadata.namespace or "default"
    name = q.job.metadata.name
    key = (ns, name)
    body = known if known is not None else await ctx.client.get(offlinejobs_path(ns, name))
    if body is None or object_meta(body).get("deletionTimestamp"):
        return False
    cur = parse_status(body)
    if object_meta(body).get("uid") != q.job.metadata.uid or cur.phase not in st.QUEUED_PHASES:
        return False  # replaced or moved on since the pass read it
    pod = await _ensure_pod(ctx, body, placement, cur.attempt, look_first=False, why=detail)
    if pod is None:
        return False
    made = placement_of_pod(pod)
    ours = made is not None and made.job_uid == q.job.metadata.uid
    if object_meta(pod).get("deletionTimestamp") or made is None or not ours:
        return False  # this attempt's Pod is going, or not ours: the next pass sees to it
    if made.placement != placement:
        judged = None  # another replica's Pod of this attempt: record its placement
    binding.hold(ctx, key, pod, made, judged, body)
    new = st.scheduled(cur, made.placement, str(object_meta(pod).get("name")), now, made.why)
    statuses[key] = new
    ctx.metrics.placements.inc()
    created = q.job.metadata.creation_timestamp
    if created is not None:
        ctx.metrics.queue_latency.observe(max(0.0, (datetime.now(UTC) - created).total_seconds()))
    await post_event(ctx.client, ns, name, q.job.metadata.uid, "Normal", "Scheduled", new.message)
    if why_not:
        # "Why not node X", as `gleaner place --explain` words it.
        why = "; ".join(why_not)
        await post_event(ctx.client, ns, name, q.job.metadata.uid, "Normal", "NotChosen", why)
    return True


async def _mark_unschedulable(
    ctx: OperatorContext,
    q: QueuedJob,
    reason: str,
    now: datetime,
    known: dict[str, Any] | None = None,
    judged: Judged | None = None,
) -> bool:
    ns = q.job.metadata.namespace or "default"
    name = q.job.metadata.name
    # From the time of marking, not of the pass's read: a long pass must not eat the backoff.
    retry_at = datetime.now(UTC) + timedelta(seconds=ctx.config.unschedulable_backoff)
    changed_reasons: dict[str, bool] = {}

    def mark(body: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        if cur.phase not in st.QUEUED_PHASES:
            return None
        if judged is not None:
            valid = judged.apply(body, cur, now)
            if valid is None:
                return None  # its spec changed since this pass judged it: the next pass
            cur = valid
        new = st.unschedulable(cur, [reason], now, retry_at)
        changed_reasons["changed"] = (
            cur.phase is not Phase.UNSCHEDULABLE or cur.message != new.message
        )
        return new

    new = await update_status(ctx, ns, name, mark, known=known)
    if new is None:
        return False
    ctx.metrics.unschedulable.inc()
    if changed_reasons.get("changed"):
        await post_event(
            ctx.client, ns, name, q.job.metadata.uid, "Warning", "FailedScheduling", new.message
        )
    return True
