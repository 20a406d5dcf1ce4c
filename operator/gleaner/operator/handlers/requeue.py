"""Requeue triggers: NodeTrace changes kick the scheduling loop.

Contract: ``nodetrace_changed`` kicks the loop whenever a NodeTrace is written (a node's
load changed: an Unschedulable job may fit now); ``nodetrace_event`` also keeps
``ctx.traces`` and ``ctx.watched_traces`` current (every event, kopf's initial listing
included; a deleted NodeTrace is forgotten). ``nodehistory_event`` keeps
``ctx.histories`` current the same way, without a kick (the hours change once an hour;
the next pass reads them). A job's backoff
(``status.nextAttemptAfter``) needs no trigger here: the scheduling loop wakes itself when
the earliest one passes (``gleaner.operator.handlers.scheduling``). The pass itself
respects every job's backoff, so kicking early is harmless.
"""

from __future__ import annotations

from typing import Any

from gleaner.operator.context import OperatorContext


def nodetrace_changed(ctx: OperatorContext, name: str) -> None:
    ctx.kick(f"nodetrace {name}")


def nodetrace_event(ctx: OperatorContext, event_type: str | None, body: dict[str, Any]) -> None:
    ctx.traces.update(event_type, body)
    ctx.watched_traces.observe(event_type, body)
    nodetrace_changed(ctx, str((body.get("metadata") or {}).get("name")))


def nodehistory_event(ctx: OperatorContext, event_type: str | None, body: dict[str, Any]) -> None:
    ctx.histories.update(event_type, body)
