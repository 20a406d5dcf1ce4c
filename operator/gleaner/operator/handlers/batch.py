"""Following a ``spec.batch`` job: its runner's progress into status, its deadline into SLA.

Contract (docs/batch.md, "Progress and deadlines in the cluster"). Each tick (one loop over
the Running jobs that have ``spec.batch``, ``handlers.running``, every
:data:`PROGRESS_INTERVAL` seconds):

1. reads the runner's ``GET /progress`` at the current Pod's IP (``gleaner.clients.http``);
   no IP yet or no answer: nothing changes this tick;
2. applies it with ``gleaner.batch.tracking.track`` (pure): ``status.batch`` (requests
   done/total, tokens, projected finish) and, with a deadline, ``deadlineSLA`` (raised,
   never lowered) and the ``DeadlineMet`` condition;
3. exports the progress on /metrics (``gleaner_operator_job_batch_*``).

The raised SLA takes effect where the SLA is read: the SLA monitor's next window and the
next placement (``OfflineJob.effective_throughput_sla``). A job whose placement no longer
meets it is evicted by the SLA monitor and placed again at the new SLA; its runner then
continues from its checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from gleaner.api import OfflineJobStatus, Phase
from gleaner.batch.pod import progress_url
from gleaner.batch.tracking import RunnerReport, track
from gleaner.clients.http import HttpReadError, get_json
from gleaner.clients.kube import configmaps_path, pods_path
from gleaner.operator.context import OperatorContext
from gleaner.operator.jobs import update_status
from gleaner.operator.validation import ValidJob, profile_configmap_name, validate_job

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL = 15.0
"""Seconds between two reads of a batch runner's progress."""

ReadJson = Callable[[str], Awaitable[Any]]


async def track_batch(ctx: OperatorContext, body: dict[str, Any], read: ReadJson = get_json) -> str:
    """One progress tick for one batch job; returns a short outcome for kopf's log."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    cm_name = profile_configmap_name(body)
    configmap = await ctx.client.get(configmaps_path(namespace, cm_name)) if cm_name else None
    valid = validate_job(body, configmap)
    if not isinstance(valid, ValidJob) or valid.job.spec.batch is None:
        return "not a valid batch job"
    pods = list((body.get("status") or {}).get("pods") or [])
    if not pods:
        return "no pod yet"
    pod = await ctx.client.get(pods_path(namespace, str(pods[-1])))
    url = progress_url(pod) if pod is not None else None
    if url is None:
        return "pod has no IP yet"
    try:
        report = RunnerReport.from_json(await read(url))
    except (HttpReadError, ValueError) as exc:
        return f"no progress: {exc}"
    standalone = valid.profile.standalone_tokens_per_second
    now = datetime.now(UTC)
    deadline = valid.job.spec.batch.deadline

    def apply(fresh: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        if cur.phase is not Phase.RUNNING:
            return None
        job = valid.job.model_copy(update={"status": cur})
        return track(job, report, standalone, now)

    new = await update_status(ctx, namespace, name, apply)
    if new is not None and new.batch is not None:
        ctx.metrics.set_batch(namespace, name, new.batch, deadline)
        return f"progress {new.batch.summary}"
    return "unchanged"


def is_batch_job(spec: Any) -> bool:
    return isinstance(spec, dict) and isinstance(spec.get("batch"), dict)
