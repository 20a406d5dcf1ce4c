"""OfflineJob create / resume / spec update: validate, then queue (or mark Invalid).

Contract: reads the job (and the ConfigMap named by ``spec.profileFrom``), validates it
with the pure ``validate_job``. Invalid: phase Invalid, ``Valid=False`` whose message names
the field, a Warning Event ``InvalidSpec``; the handler returns normally so kopf does not
retry (the user's next update re-validates). Valid: ``Valid=True``; a new or formerly
invalid job becomes Pending; the scheduling loop is kicked. Running jobs keep running: a
spec change applies to the job's next attempt.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gleaner.api import OfflineJobStatus, Phase
from gleaner.operator import status as st
from gleaner.operator.context import OperatorContext
from gleaner.operator.events import post_event
from gleaner.operator.jobs import update_status
from gleaner.operator.kube import configmaps_path
from gleaner.operator.validation import InvalidJob, profile_configmap_name, validate_job


async def validate_and_queue(ctx: OperatorContext, body: dict[str, Any]) -> str:
    """Validate one job; returns a short outcome for kopf's log."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    generation = meta.get("generation")
    cm_name = profile_configmap_name(body)
    configmap = None
    if cm_name:
        configmap = await ctx.client.get(configmaps_path(namespace, cm_name))
    verdict = validate_job(body, configmap)
    now = datetime.now(UTC)

    if isinstance(verdict, InvalidJob):
        message = verdict.message

        def mark_invalid(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
            if cur.phase not in (Phase.PENDING, Phase.INVALID, Phase.UNSCHEDULABLE, Phase.EVICTED):
                return None  # a bound job keeps running; the new spec is refused for later
            return st.invalid(cur, message, now, generation)

        changed = await update_status(ctx, namespace, name, mark_invalid)
        if changed is not None:
            await post_event(
                ctx.client, namespace, name, meta.get("uid"), "Warning", "InvalidSpec", message
            )
        return f"invalid: {message}"

    def mark_valid(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
        return st.valid(cur, now, generation)

    await update_status(ctx, namespace, name, mark_valid)
    ctx.kick(f"job {namespace}/{name}")
    return "valid"
