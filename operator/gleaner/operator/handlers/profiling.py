"""Profile on submit, the shell: one step per scheduling pass for each job that needs a profile.

Contract (docs/profiling.md, "Profile on submit"; the decisions are
``gleaner.operator.autoprofile``). The scheduling pass, under its lock, hands
:func:`advance_profiles` the jobs whose verdict is ``NeedsProfile`` (valid, Pending, past
``nextAttemptAfter``) and the offline Pods it listed. For each job the pure ``next_step``
on the Pods of its current attempt decides:

- before it: each run of the attempt still being accounted gets the latest agent report
  of its node (the NodeTrace window, :func:`_account`): ``count_window`` adds what it
  covers of the run to the Pod's annotation ``gleaner.dev/profile-gpu-time`` (a patch), so
  the runs' tokens become tokens per offline GPU-second;
- Wait: nothing to write (a finished run waiting for its report wakes the loop at the
  grace's end);
- Fail: ``Profiled=False``/``ProfilingFailed`` with the reason, ``profilingAttempts`` + 1,
  ``nextAttemptAfter`` = now + the eviction backoff for that count, a Warning Event
  ``ProfilingFailed``; the requeue timer starts the next attempt (new Pod names);
- Store: the ConfigMap ``spec.profileFrom.name`` is created (owned by the job; a 409 means
  an earlier pass made it, or it holds a profile measured with an older image, which is
  replaced), ``Profiled=True``, a Normal Event ``Profiled``; its creation
  re-validates the job through the ConfigMap watch and the next pass places it normally;
- Launch: the job goes back to the pass as a ``QueuedJob`` with the provisional profile, so
  the run is placed in the same ``decide()`` call as every other job (no GPU is booked
  twice). :func:`bind_run` creates the run's Pod (deterministic name, check-before-create:
  the Pod itself is the record, which a later pass counts as occupied) and posts a Normal
  Event ``Profiling``; :func:`explain_wait` says in the condition why no GPU fits yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gleaner.api import OfflineJob, OfflineJobStatus, Placement
from gleaner.api.contract import ANNOTATION_PROFILE_GPU_TIME, ANNOTATION_PROFILE_IMAGE, LABEL_JOB
from gleaner.clients.kube import ConflictError, KubeError, configmaps_path, pods_path
from gleaner.operator.autoprofile import (
    Fail,
    Launch,
    ProfilingRun,
    Store,
    Wait,
    build_profile_configmap,
    build_profiling_pod,
    count_window,
    measured_how,
    next_step,
    node_gpus_of,
    on_pool,
    profiled,
    profiling,
    profiling_failed,
    profiling_pod_name,
    provisional_profile,
    runs_of,
)
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event
from gleaner.operator.jobs import update_status
from gleaner.operator.observation import observe_from_nodetrace
from gleaner.operator.placement import QueuedJob
from gleaner.scheduler.monitor import backoff_seconds

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingRun:
    """A run to place: the job as queued (provisional profile) and which run it is."""

    queued: QueuedJob
    launch: Launch
    attempt: int


def _where(job: OfflineJob) -> tuple[str, str, str | None]:
    return job.metadata.namespace or "default", job.metadata.name, job.metadata.uid


async def advance_profiles(
    ctx: OperatorContext,
    jobs: list[OfflineJob],
    pods: list[dict[str, Any]],
    traces: list[dict[str, Any]],
    now: datetime,
) -> tuple[list[PendingRun], datetime | None]:
    """One step for each job that needs a profile; returns the runs to place this pass and
    the earliest time the loop must look again (a failed attempt's backoff, a finished
    run's wait for its agent report)."""
    out: list[PendingRun] = []
    retry: datetime | None = None
    by_node = {str((t.get("metadata") or {}).get("name")): t for t in traces}
    for job in jobs:
        ref = job.spec.profile_from
        if ref is None:
            continue
        attempt = job.status.profiling_attempts
        mine = [
            p
            for p in pods
            if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB) == job.metadata.name
            and (p.get("metadata") or {}).get("namespace", "default")
            == (job.metadata.namespace or "default")
        ]
        runs = [
            await _account(ctx, job, run, mine, by_node)
            for run in runs_of(mine, job.metadata.name, attempt)
        ]
        step = next_step(ref.measurement, runs, now)
        if isinstance(step, Wait) and step.until is not None:
            retry = step.until if retry is None else min(retry, step.until)
        elif isinstance(step, Launch):
            profile = provisional_profile(ref.measurement, step.kv_gib)
            queued = QueuedJob(on_pool(job, ctx.config.profiling_pool), profile)
            out.append(PendingRun(queued, step, attempt))
        elif isinstance(step, Fail):
            at = await _fail(ctx, job, step.message)
            if at is not None:
                retry = at if retry is None else min(retry, at)
        elif isinstance(step, Store):
            await _store(ctx, job, step, now)
    return out, retry


async def _account(
    ctx: OperatorContext,
    job: OfflineJob,
    run: ProfilingRun,
    pods: list[dict[str, Any]],
    traces: dict[str, dict[str, Any]],
) -> ProfilingRun:
    """``run`` with its node's latest agent report counted (and recorded on its Pod)."""
    if run.accounted or run.started is None or run.phase not in ("Running", "Succeeded"):
        return run
    name = profiling_pod_name(job.metadata.name, job.status.profiling_attempts, run.index)
    pod = next((p for p in pods if (p.get("metadata") or {}).get("name") == name), None)
    where = None if pod is None else node_gpus_of(pod)
    trace = None if where is None else traces.get(where[0])
    if where is None or trace is None:
        return run
    try:
        window = observe_from_nodetrace(trace, where[1], 1.0, run.started)
    except ValueError:  # a NodeTrace the API would not have accepted
        return run
    counted = None if window is None else count_window(run.accounting, window, run)
    if counted is None:
        return run
    ns = job.metadata.namespace or "default"
    patch = {"metadata": {"annotations": {ANNOTATION_PROFILE_GPU_TIME: counted.to_annotation()}}}
    try:
        written = await ctx.client.patch(pods_path(ns, name), patch)
    except KubeError as exc:
        logger.warning("%s/%s: cannot record GPU time on Pod %s: %s", ns, name, name, exc)
        return run
    if written:
        ctx.watched_pods.written(written)
    return replace(run, accounting=counted)


async def _fail(ctx: OperatorContext, job: OfflineJob, message: str) -> datetime | None:
    ns, name, uid = _where(job)
    now = datetime.now(UTC)

    def change(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        if cur.profiling_attempts != job.status.profiling_attempts:
            return None  # another pass counted this attempt already
        wait = backoff_seconds(cur.profiling_attempts + 1, ctx.config.sla)
        return profiling_failed(cur, message, now, now + timedelta(seconds=wait))

    new = await update_status(ctx, ns, name, change)
    if new is None:
        return None
    logger.info("%s/%s: profiling attempt failed: %s", ns, name, message)
    await post_event(ctx.client, ns, name, uid, "Warning", "ProfilingFailed", message)
    return new.next_attempt_after


async def _store(ctx: OperatorContext, job: OfflineJob, store: Store, now: datetime) -> None:
    ns, name, uid = _where(job)
    ref = job.spec.profile_from
    assert ref is not None
    manifest = build_profile_configmap(job, ref.name, ref.key, store)
    try:
        await ctx.client.create(configmaps_path(ns), manifest)
    except ConflictError:
        # Written by an earlier pass, or measured with an older image (then replaced); one
        # the user wrote meanwhile (no image annotation) is theirs: validation reads it.
        existing = await ctx.client.get(configmaps_path(ns, ref.name)) or {}
        if ANNOTATION_PROFILE_IMAGE in ((existing.get("metadata") or {}).get("annotations") or {}):
            meta = manifest["metadata"]
            await ctx.client.patch(
                configmaps_path(ns, ref.name),
                {
                    "metadata": {k: meta[k] for k in ("annotations", "ownerReferences")},
                    "data": manifest["data"],
                },
            )
    runs = store.fit.get("runs")
    message = (
        f"profile measured in {runs} runs {measured_how(store.fit)}, "
        f"stored in ConfigMap {ns}/{ref.name}"
    )

    def change(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        return profiled(cur, message, now)

    new = await update_status(ctx, ns, name, change)
    if new is not None:
        await post_event(ctx.client, ns, name, uid, "Normal", "Profiled", message)
    ctx.kick(f"job {ns}/{name} profiled")


async def bind_run(ctx: OperatorContext, run: PendingRun, placement: Placement) -> bool:
    """Create the run's Pod on ``placement`` (once) and say so; False if it failed."""
    job = run.queued.job
    ns, name, uid = _where(job)
    ref = job.spec.profile_from
    assert ref is not None
    manifest = build_profiling_pod(
        job, placement, run.attempt, run.launch, ref.measurement, ctx.config.profiling_pool
    )
    pod = manifest["metadata"]["name"]
    try:
        if await ctx.client.get(pods_path(ns, pod)) is None:
            created = await ctx.client.create(pods_path(ns), manifest)
            if created:
                ctx.watched_pods.written(created)
    except ConflictError:
        pass  # it exists: an earlier pass created it
    except KubeError as exc:
        logger.warning("%s/%s: cannot create profiling Pod %s: %s", ns, name, pod, exc)
        return False
    gpus = ",".join(str(g) for g in placement.gpu_indices)
    message = (
        f"profiling run {run.launch.index + 1}/{run.launch.total} at "
        f"{run.launch.kv_gib:.3g} GiB KV: Pod {pod} on {placement.node} GPU {gpus}"
    )
    now = datetime.now(UTC)

    def change(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        return profiling(cur, message, now)

    if await update_status(ctx, ns, name, change) is not None:
        await post_event(ctx.client, ns, name, uid, "Normal", "Profiling", message)
    return True


async def explain_wait(ctx: OperatorContext, run: PendingRun, reason: str) -> None:
    """No GPU for the run now: say so in the condition (the phase stays Pending)."""
    ns, name, _ = _where(run.queued.job)
    message = f"profiling run {run.launch.index + 1} waits for a GPU: {reason}"
    now = datetime.now(UTC)

    def change(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        return profiling(cur, message, now)

    await update_status(ctx, ns, name, change)
