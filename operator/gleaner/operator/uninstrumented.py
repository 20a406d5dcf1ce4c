"""Pure: which Events the operator posts when an agent reports an uninstrumented GPU
(docs/operator.md, "Uninstrumented GPUs").

Contract. ``uninstrumented_notices(previous, current, bound)`` compares two readings of the
NodeTraces' uninstrumented GPUs (node → {GPU index: who, ``pod ns/name`` or ``pid N``}, as
``gleaner.operator.traces.uninstrumented_gpus`` reads them) and returns the Warning Events
to post, reason ``GPUUninstrumented`` (:data:`REASON`):

- one on the node's NodeTrace and one on its Node, for every node with a GPU that is newly
  uninstrumented or now runs someone else, naming every such GPU in the scheduler's words
  (``gleaner.scheduler.plugins.instrumented.uninstrumented_reason``);
- one on each bound OfflineJob (``bound``: its namespace, name, uid and placement) holding
  one of those GPUs: the agent holds that GPU's offline gate closed, so the job is paused
  there — ``kubectl describe oj`` says why.

A GPU that stays uninstrumented with the same process is not reported again; one that was
reported, recovered and came back is. Jobs that cannot be placed because of it learn it from
the scheduler's own reasons (their ``FailedScheduling`` Event and ``Unschedulable``
condition). :func:`recovered` names the GPUs that are no longer uninstrumented (Normal
Events, reason :data:`RECOVERED`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from gleaner.api import Placement
from gleaner.scheduler.plugins.instrumented import uninstrumented_reason

REASON = "GPUUninstrumented"
RECOVERED = "GPUInstrumented"

Uninstrumented = Mapping[str, Mapping[int, str]]
"""node -> {GPU index: who runs there uninstrumented}."""


@dataclass(frozen=True, slots=True)
class Notice:
    """One Event to post."""

    kind: Literal["NodeTrace", "Node", "OfflineJob"]
    name: str
    namespace: str = ""
    uid: str | None = None
    reason: str = REASON
    message: str = ""


@dataclass(frozen=True, slots=True)
class BoundJob:
    namespace: str
    name: str
    uid: str | None
    placement: Placement


def _fresh(previous: Uninstrumented, node: str, gpus: Mapping[int, str]) -> dict[int, str]:
    before = previous.get(node, {})
    return {g: who for g, who in sorted(gpus.items()) if before.get(g) != who}


def uninstrumented_notices(
    previous: Uninstrumented, current: Uninstrumented, bound: Iterable[BoundJob]
) -> list[Notice]:
    """The Warning Events for what ``current`` reports that ``previous`` did not."""
    jobs = list(bound)
    out: list[Notice] = []
    for node, gpus in sorted(current.items()):
        fresh = _fresh(previous, node, gpus)
        if not fresh:
            continue
        reasons = "; ".join(uninstrumented_reason(g, who) for g, who in fresh.items())
        node_message = (
            f"{reasons}: no Gleaner shim accounts for it, so the node's agent keeps the "
            "GPU's offline gate closed and the scheduler places no offline job there "
            '(docs/agent.md, "Uninstrumented processes")'
        )
        out.append(Notice("NodeTrace", node, message=node_message))
        out.append(Notice("Node", node, message=node_message))
        for job in jobs:
            if job.placement.node != node:
                continue
            hit = [g for g in job.placement.gpu_indices if g in fresh]
            if not hit:
                continue
            why = "; ".join(uninstrumented_reason(g, fresh[g]) for g in hit)
            out.append(
                Notice(
                    "OfflineJob",
                    job.name,
                    job.namespace,
                    job.uid,
                    message=f"node {node}: {why}; the agent keeps the GPU's offline gate "
                    "closed, so this job is paused there until that process runs with the "
                    "Gleaner shim or ends",
                )
            )
    return out


def recovered(previous: Uninstrumented, current: Uninstrumented) -> list[Notice]:
    """Normal Events on the NodeTraces whose GPUs are no longer uninstrumented."""
    out: list[Notice] = []
    for node, gpus in sorted(previous.items()):
        gone = sorted(g for g in gpus if g not in current.get(node, {}))
        if gone:
            listed = ("GPU " if len(gone) == 1 else "GPUs ") + ", ".join(str(g) for g in gone)
            out.append(
                Notice(
                    "NodeTrace",
                    node,
                    reason=RECOVERED,
                    message=f"{listed}: no uninstrumented process any more; offline work may "
                    "run there again",
                )
            )
    return out
