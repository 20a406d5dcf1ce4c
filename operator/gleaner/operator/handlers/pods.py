"""Following offline Pods: their phase drives the job's phase.

Contract: every event of a Pod labelled ``gleaner.dev/role=offline`` (including kopf's
initial listing, so a restarted operator catches up) goes into ``ctx.watched_pods`` (what the
scheduling pass reads), and the owning job's status moves with
the phase machine: Running -> Running (``Ready=True``), Succeeded -> Succeeded, Failed ->
Failed (with the container's termination reason), and a deleted current Pod of a bound
job -> Evicted (``PodDeleted``), requeued. Only the job's current Pod (``status.pods[-1]``)
counts. A Pod that finished or vanished frees GPUs, so the scheduling loop is kicked. A
``spec.batch`` job's Pod that succeeded completes its ``status.batch`` count
(``gleaner.batch.tracking.finished``, which ``status.from_pod_phase`` applies).
Profiling Pods (``LABEL_PROFILING_RUN``, docs/profiling.md) only kick: the pass takes the
measurement's next step.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gleaner.api import OfflineJobStatus
from gleaner.api.contract import LABEL_JOB, LABEL_PROFILING_RUN
from gleaner.operator import status as st
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event
from gleaner.operator.handlers.binding import dropped, failure_detail, record, unrecorded_pod
from gleaner.operator.jobs import update_status


async def follow_pod(ctx: OperatorContext, event_type: str | None, pod: dict[str, Any]) -> None:
    ctx.watched_pods.observe(event_type, pod)
    meta = pod.get("metadata") or {}
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    if not job:
        return
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    now = datetime.now(UTC)
    phase = str((pod.get("status") or {}).get("phase") or "")
    if LABEL_PROFILING_RUN in (meta.get("labels") or {}):
        # A profiling run measures; it never moves the job's phase. Its end is the next
        # step of the measurement (handlers.profiling), taken by a pass.
        if event_type == "DELETED" or phase in ("Succeeded", "Failed"):
            ctx.kick(f"profiling pod {namespace}/{name} {phase.lower() or 'deleted'}")
        return

    if event_type == "DELETED":
        dropped(ctx, namespace, job, name)

        def lost(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
            return st.pod_lost(cur, name, now)

        await update_status(ctx, namespace, job, lost)
        ctx.kick(f"pod {namespace}/{name} deleted")
        return

    if phase not in ("Running", "Succeeded", "Failed"):
        return  # st.from_pod_phase moves no job on any other phase: no need to read it
    detail = failure_detail(pod) if phase == "Failed" else ""

    def follow(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        return st.from_pod_phase(cur, name, phase, now, detail)

    if unrecorded_pod(ctx, namespace, job, name):
        # A placement not recorded yet is recorded with this phase, in one write.
        new = await record(ctx, (namespace, job), pod)
    else:
        new = await update_status(ctx, namespace, job, follow)
    if new is None:
        return
    if phase in ("Succeeded", "Failed"):
        ctx.kick(f"pod {namespace}/{name} {phase.lower()}")
        type_ = "Normal" if phase == "Succeeded" else "Warning"
        reason = "Completed" if phase == "Succeeded" else "PodFailed"
        await post_event(ctx.client, namespace, job, None, type_, reason, new.message)
