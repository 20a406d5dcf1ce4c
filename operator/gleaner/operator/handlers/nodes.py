"""Kubernetes Node events: keep the node cache current; kick the loop when it changed.

Contract: every event of a Node (kopf's initial listing included) goes into
``ctx.nodes`` (``gleaner.operator.nodes.NodeCache``). When the node's labels or
availability (cordoned, not ready) changed, the scheduling loop is kicked: a job whose
``gpuSelector.nodeSelector`` matched no node may fit now, and a cordoned node must stop
receiving Pods. Heartbeat-only updates (the kubelet's status every few seconds) change
neither, so they do not kick.
"""

from __future__ import annotations

from typing import Any

from gleaner.operator.context import OperatorContext


def node_changed(ctx: OperatorContext, event_type: str | None, body: dict[str, Any]) -> bool:
    changed = ctx.nodes.observe(event_type, body)
    if changed:
        ctx.kick(f"node {(body.get('metadata') or {}).get('name')}")
    return changed
