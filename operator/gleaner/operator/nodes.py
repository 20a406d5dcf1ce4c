"""What the scheduler needs from Kubernetes Node objects, cached from a watch (pure).

Contract. ``NodeCache`` holds, per Node name, a ``NodeInfo``: its labels (matched by
``spec.gpuSelector.nodeSelector``) and whether it may receive offline Pods. It is fed by
kopf's watch of Nodes (``observe(event_type, body)``, which says whether anything the
scheduler reads changed, so the handler kicks the loop only then) and primed once by a
plain list (``prime(items)``) the first time a scheduling pass needs it, because a watch
gives no signal that its initial listing is complete. A node the watch already reported
(present or deleted) keeps the watch's view when the list comes in later: the watch is
never older than a list that raced with it.

A Node is unavailable, with a class-level reason the scheduler groups in its messages
(kube-scheduler style), when it is cordoned (``spec.unschedulable``: ``"cordoned"``) or its
``Ready`` condition is present and not ``True`` (``"node not ready"``). A node with a
NodeTrace but no Node object (simulations, tests, a Node deleted while its agent's trace
lingers) has no Kubernetes labels and no availability verdict from here.

It holds no state the API server does not have: a restarted operator rebuilds it from the
same watch and list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CORDONED_REASON = "cordoned"
NOT_READY_REASON = "node not ready"


@dataclass(frozen=True)
class NodeInfo:
    """The parts of a Node object scheduling reads."""

    labels: Mapping[str, str] = field(default_factory=dict)
    unavailable: str | None = None
    """Class-level reason the node must not receive offline Pods, or None."""


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    """Labels and availability of one Node object (as the API server returns it)."""
    meta = body.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    spec = body.get("spec") or {}
    reason: str | None = None
    if spec.get("unschedulable"):
        reason = CORDONED_REASON
    else:
        for cond in (body.get("status") or {}).get("conditions") or []:
            if isinstance(cond, Mapping) and cond.get("type") == "Ready":
                if str(cond.get("status")) != "True":
                    reason = NOT_READY_REASON
                break
    return NodeInfo(labels=labels, unavailable=reason)


@dataclass
class NodeCache:
    """Node name -> ``NodeInfo``, from a watch plus one priming list."""

    _nodes: dict[str, NodeInfo] = field(default_factory=dict)
    _watched: set[str] = field(default_factory=set)
    """Names the watch reported (present or deleted): a later list does not override them."""
    primed: bool = False

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """Apply one watch event; True when the node's labels or availability changed."""
        name = str((body.get("metadata") or {}).get("name") or "")
        if not name:
            return False
        self._watched.add(name)
        if event_type == "DELETED":
            return self._nodes.pop(name, None) is not None
        info = node_info(body)
        changed = self._nodes.get(name) != info
        self._nodes[name] = info
        return changed

    def prime(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Fill in what the watch has not reported yet from a full list of Nodes."""
        for body in items:
            name = str((body.get("metadata") or {}).get("name") or "")
            if name and name not in self._watched:
                self._nodes[name] = node_info(body)
        self.primed = True

    def labels(self) -> dict[str, dict[str, str]]:
        """Node name -> labels, for ``ClusterState.node_labels``."""
        return {name: dict(info.labels) for name, info in self._nodes.items()}

    def unavailable(self) -> dict[str, str]:
        """Node name -> reason, for nodes that must not receive offline Pods."""
        return {n: i.unavailable for n, i in self._nodes.items() if i.unavailable is not None}

    def __len__(self) -> int:
        return len(self._nodes)
