"""Requeue triggers: a timer per waiting job and NodeTrace changes kick the scheduling loop.

Contract: ``requeue_due`` (a kopf timer on OfflineJobs waiting for a placement, and on
Scheduled jobs, whose Pod may still need creating) kicks the loop when the job's backoff
(``status.nextAttemptAfter``) has passed (the shared lifecycle's ``may_attempt``);
``nodetrace_changed`` kicks it whenever a NodeTrace is written (a node's load changed: an
Unschedulable job may fit now); ``nodetrace_event`` also keeps ``ctx.traces`` current
(every event, kopf's initial listing included; a deleted NodeTrace is forgotten). The
pass itself respects every job's backoff, so kicking early is harmless.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gleaner.operator import status as st
from gleaner.operator.context import OperatorContext
from gleaner.operator.jobs import parse_status
from gleaner.scheduler.lifecycle import may_attempt


def requeue_due(ctx: OperatorContext, body: dict[str, Any]) -> bool:
    status = parse_status(body)
    if status.phase not in st.QUEUED_PHASES and status.phase.value != "Scheduled":
        return False
    after = status.next_attempt_after
    if not may_attempt(None if after is None else after.timestamp(), datetime.now(UTC).timestamp()):
        return False
    meta = body.get("metadata") or {}
    ctx.kick(f"requeue {meta.get('namespace')}/{meta.get('name')}")
    return True


def nodetrace_changed(ctx: OperatorContext, name: str) -> None:
    ctx.kick(f"nodetrace {name}")


def nodetrace_event(ctx: OperatorContext, event_type: str | None, body: dict[str, Any]) -> None:
    ctx.traces.update(event_type, body)
    nodetrace_changed(ctx, str((body.get("metadata") or {}).get("name")))
