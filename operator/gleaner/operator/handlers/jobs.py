"""Every watch event of an OfflineJob: finalizer, deletion, validation hand-off, Running cache.

Contract. ``job_event`` is the operator's only handler of OfflineJob events (a kopf
``on.event`` handler: kopf stores no progress or diff-base on the job and makes no patch of
its own). It judges each event from the object alone, so a repeated or replayed event
(kopf's initial listing after a restart, the echo of the operator's own writes) costs no
request:

- deleted from the API server: forgotten (``ctx.forget_job``), the loop kicked;
- being deleted (``deletionTimestamp``) and still carrying ``gleaner.dev/finalizer``: the
  job's Pods are deleted (``handlers.delete``), then the finalizer is removed (a merge
  patch with the job's ``resourceVersion`` as a precondition: a conflict reads the job
  again), so the job goes;
- otherwise the finalizer is added when it is missing (one metadata patch per job, once;
  the scheduling pass places only jobs that carry it, so its copy of the job is the one
  after this patch). The admission webhook normally stored it at creation
  (``gleaner.operator.jobadmission``): then no patch is sent;
- a spec the operator has not judged yet (``metadata.generation`` differs from the
  ``Valid`` condition's ``observedGeneration``, or no ``Valid`` condition): a job waiting
  for a placement (no phase yet, Pending, Invalid, Unschedulable, Evicted) is left to the
  scheduling pass, which validates it with the rest of its queue and writes the verdict
  together with the placement or the reason it fits nowhere (``handlers.scheduling``); a
  bound or finished job is validated here (``handlers.validate``): its new spec applies to
  its next attempt;
- ``ctx.watched_jobs`` keeps every event's body for the scheduling pass;
- ``ctx.keep_job`` keeps Running jobs' bodies for the SLA and batch loops
  (``handlers.running``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gleaner.api.contract import FINALIZER
from gleaner.clients.kube import ConflictError, KubeError, NotFoundError, offlinejobs_path
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.delete import delete_job_pods
from gleaner.operator.handlers.validate import WAITING_PHASES, spec_judged, validate_and_queue

logger = logging.getLogger(__name__)

DELETION_RETRY_MAX = 30.0
"""Seconds between two tries, at most, of a job's deletion that failed."""


def _meta(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, dict) else {}


def waits_for_placement(body: dict[str, Any]) -> bool:
    """Whether the job has no phase yet or waits for a placement (the pass validates it)."""
    phase = (body.get("status") or {}).get("phase")
    return not phase or phase in {p.value for p in WAITING_PHASES}


def finalizers_without(body: dict[str, Any], finalizer: str) -> list[str]:
    return [str(f) for f in _meta(body).get("finalizers") or [] if f != finalizer]


async def job_event(ctx: OperatorContext, event_type: str | None, body: dict[str, Any]) -> str:
    """Handle one event of one job; returns a short outcome for the log."""
    meta = _meta(body)
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    ctx.watched_jobs.observe(event_type, body)
    if event_type == "DELETED":
        ctx.keep_job(body, gone=True)
        ctx.forget_job(namespace, name)
        ctx.kick(f"job {namespace}/{name} gone")
        return "gone"
    ctx.keep_job(body)
    finalizers = list(meta.get("finalizers") or [])
    if meta.get("deletionTimestamp"):
        if FINALIZER not in finalizers:
            return "being deleted"
        return await _finalize(ctx, namespace, name, body)
    if FINALIZER not in finalizers:
        try:
            await ctx.client.patch(
                offlinejobs_path(namespace, name),
                {"metadata": {"finalizers": [*finalizers, FINALIZER]}},
            )
        except NotFoundError:
            return "gone"
        except KubeError as exc:  # the job's next event (the pass writes one) adds it
            logger.warning("%s/%s: finalizer not added yet: %s", namespace, name, exc)
    if spec_judged(body):
        return "unchanged"
    if waits_for_placement(body):
        ctx.kick(f"job {namespace}/{name}")
        return "queued for validation"
    return await validate_and_queue(ctx, body)


async def _finalize(ctx: OperatorContext, namespace: str, name: str, body: dict[str, Any]) -> str:
    """Delete the job's Pods, then remove the finalizer; retried until done (kopf does not
    retry an event handler, and a job being deleted may get no further event)."""
    delay = 1.0
    while True:
        try:
            deleted = await delete_job_pods(ctx, namespace, name)
            await _release(ctx, namespace, name, body)
            return f"deleted {deleted} pod(s)"
        except (KubeError, TimeoutError) as exc:
            logger.warning(
                "%s/%s: deletion not finished, again in %.0f s: %s", namespace, name, delay, exc
            )
            await asyncio.sleep(delay)
            delay = min(2 * delay, DELETION_RETRY_MAX)


async def _release(ctx: OperatorContext, namespace: str, name: str, body: dict[str, Any]) -> None:
    """Remove the finalizer (with the copy's resourceVersion as a precondition)."""
    path = offlinejobs_path(namespace, name)
    current: dict[str, Any] | None = body
    while current is not None and FINALIZER in (_meta(current).get("finalizers") or []):
        patch = {
            "metadata": {
                "finalizers": finalizers_without(current, FINALIZER),
                "resourceVersion": _meta(current).get("resourceVersion"),
            }
        }
        try:
            await ctx.client.patch(path, patch)
            return
        except NotFoundError:
            return
        except ConflictError:
            current = await ctx.client.get(path)
