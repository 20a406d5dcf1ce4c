"""Profile on submit, the shell: one step per scheduling pass for each job that needs a profile.

Contract (docs/profiling.md, "Profile on submit"; the decisions are
``gleaner.operator.autoprofile``). The scheduling pass, under its lock, hands
:func:`advance_profiles` the jobs whose verdict is ``NeedsProfile`` (valid, Pending, past
``nextAttemptAfter``) and the offline Pods it listed. For each job the pure ``next_step``
on the Pods of its current attempt decides:

- Wait: nothing to write;
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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gleaner.api import OfflineJob, OfflineJobStatus, Placement
from gleaner.api.contract import ANNOTATION_PROFILE_IMAGE
from gleaner.clients.kube import ConflictError, KubeError, configmaps_path, pods_path
from gleaner.operator.autoprofile import (
    Fail,
    Launch,
    Store,
    build_profile_configmap,
    build_profiling_pod,
    next_step,
    profiled,
    profiling,
    profiling_failed,
    provisional_profile,
    runs_of,
)
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event
from gleaner.operator.jobs import update_status
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
    ctx: OperatorContext, jobs: list[OfflineJob], pods: list[dict[str, Any]], now: datetime
) -> tuple[list[PendingRun], datetime | None]:
    """One step for each job that needs a profile; returns the runs to place this pass and
    the earliest retry a failed attempt set (the scheduling loop wakes then)."""
    out: list[PendingRun] = []
    retry: datetime | None = None
    for job in jobs:
        ref = job.spec.profile_from
        if ref is None:
            continue
        attempt = job.status.profiling_attempts
        step = next_step(ref.measurement, runs_of(pods, job.metadata.name, attempt))
        if isinstance(step, Launch):
            profile = provisional_profile(ref.measurement, step.kv_gib)
            out.append(PendingRun(QueuedJob(job, profile), step, attempt))
        elif isinstance(step, Fail):
            at = await _fail(ctx, job, step.message)
            if at is not None:
                retry = at if retry is None else min(retry, at)
        elif isinstance(step, Store):
            await _store(ctx, job, step, now)
    return out, retry


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
    message = f"profile measured in {runs} runs, stored in ConfigMap {ns}/{ref.name}"

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
    manifest = build_profiling_pod(job, placement, run.attempt, run.launch, ref.measurement)
    pod = manifest["metadata"]["name"]
    try:
        if await ctx.client.get(pods_path(ns, pod)) is None:
            await ctx.client.create(pods_path(ns), manifest)
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
