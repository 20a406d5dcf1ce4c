"""The cluster as the scheduler sees it: node summaries, labels, occupancy, availability.

Contract. :class:`ClusterState` is plain data the shells assemble each cycle:

- ``nodes``: the performance model's ``NodeSummary`` per node name (its GPU inventory
  and one window of online load);
- ``node_labels``: Kubernetes node labels (merged over the summary's own labels) for
  ``gpuSelector.nodeSelector``;
- ``occupied``: per node, GPU index -> the offline job holding it. In v1 a GPU holds at
  most one offline job, so an occupied GPU is never a candidate;
- ``unavailable``: nodes that must not receive work, with a *class-level* reason
  ("stale trace", "node not ready", "cordoned"): reasons are grouped by their text in
  unschedulable messages, so keep node-specific numbers out of them;
- ``bias``: the learned observed/predicted correction (``gleaner.scheduler.bias``).

Nodes whose summary has an empty window are treated as unavailable ("no trace window").
:func:`stale_nodes` marks nodes whose last report is too old. ``with_placements``
returns the state after a cycle's placements (what the simulator feeds the next cycle).

:class:`SchedulingSnapshot` is the one input of ``gleaner.scheduler.decide``: the queue (each
job with its eviction history: ``excluded_nodes``, ``eviction_count``, ``not_before``),
the node summaries, labels, occupancy, unavailable nodes, the staleness limit, the bias
table and the time of the decision, as one value. The operator, ``gleaner place`` and the
simulator each build one; ``state()`` is the ClusterState it implies (stale nodes
marked unavailable, Kubernetes' own reasons winning).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from gleaner.perfmodel.summary import NodeSummary
from gleaner.scheduler.bias import BiasTable
from gleaner.scheduler.job import JobRequest

if TYPE_CHECKING:
    from gleaner.scheduler.result import PlacementDecision

STALE_REASON = "stale trace"
DEFAULT_TRACE_STALE_AFTER_S = 600.0
"""The operator's default ``--trace-stale-after``: a node whose last report is older is
unavailable."""
NO_WINDOW_REASON = "no trace window"


@dataclass(frozen=True)
class ClusterState:
    """Everything a scheduling cycle reads about the cluster (see the module docstring)."""

    nodes: Mapping[str, NodeSummary]
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    occupied: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    """node -> {GPU index: namespace/name of the offline job on it}."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """node -> class-level reason it must not be used."""
    bias: BiasTable = field(default_factory=BiasTable)
    uninstrumented: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    """node -> {GPU index: who runs there uninstrumented, e.g. ``pod ns/name``}: GPUs the
    Instrumented filter keeps offline work off (docs/scheduler.md)."""

    def labels(self, node: str) -> dict[str, str]:
        summary = self.nodes.get(node)
        base = dict(summary.labels) if summary is not None else {}
        base.update(self.node_labels.get(node, {}))
        return base

    def unavailable_reason(self, node: str) -> str | None:
        if node in self.unavailable:
            return self.unavailable[node]
        summary = self.nodes.get(node)
        if summary is None or not summary.window_seconds > 0:
            return NO_WINDOW_REASON
        return None

    def free_gpus(self, node: str) -> list[int]:
        taken = self.occupied.get(node, {})
        return [i for i in self.nodes[node].gpu_indices if i not in taken]

    def with_placements(self, placements: Iterable[PlacementDecision]) -> ClusterState:
        """A copy with the placements' GPUs occupied by their jobs."""
        occupied = {n: dict(g) for n, g in self.occupied.items()}
        for p in placements:
            slot = occupied.setdefault(p.node, {})
            for gpu in p.gpus:
                slot[gpu] = p.job
        return replace(self, occupied=occupied)

    def without_job(self, job: str) -> ClusterState:
        """A copy with ``job``'s GPUs freed (after an eviction or completion)."""
        occupied = {
            n: {g: j for g, j in gpus.items() if j != job} for n, gpus in self.occupied.items()
        }
        return replace(self, occupied=occupied)


@dataclass(frozen=True)
class SchedulingSnapshot:
    """Everything one scheduling decision reads, as one value (see the module docstring)."""

    jobs: Sequence[JobRequest]
    """The queue, each job with its eviction history."""
    nodes: Mapping[str, NodeSummary]
    now: datetime | None = None
    """The time of the decision: backoffs (``not_before``) and staleness are judged at it."""
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    occupied: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Nodes that must not receive Pods (cordoned, not ready, unbindable) -> reason."""
    stale_after_seconds: float | None = None
    """Nodes whose last report is older than this at ``now`` are unavailable (None: never)."""
    bias: BiasTable = field(default_factory=BiasTable)
    uninstrumented: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    """node -> {GPU index: who runs there uninstrumented} (see ClusterState)."""

    def state(self) -> ClusterState:
        """The ClusterState this snapshot implies (stale nodes marked unavailable)."""
        unavailable = dict(self.unavailable)
        if self.stale_after_seconds is not None and self.now is not None:
            stale = stale_nodes(self.nodes, self.now, self.stale_after_seconds)
            unavailable = {**stale, **unavailable}
        return ClusterState(
            nodes=self.nodes,
            node_labels=self.node_labels,
            occupied=self.occupied,
            unavailable=unavailable,
            bias=self.bias,
            uninstrumented=self.uninstrumented,
        )

    @property
    def clock(self) -> float | None:
        """``now`` in the seconds of ``JobRequest.not_before`` (epoch seconds)."""
        return None if self.now is None else self.now.timestamp()


def stale_nodes(
    nodes: Mapping[str, NodeSummary], now: datetime, max_age_seconds: float
) -> dict[str, str]:
    """Nodes whose last report is older than ``max_age_seconds`` (or unknown) -> reason."""
    out: dict[str, str] = {}
    for name, summary in nodes.items():
        last = summary.last_report_time
        if last is None or (now - last).total_seconds() > max_age_seconds:
            out[name] = STALE_REASON
    return out


def occupied_from_summaries(nodes: Mapping[str, NodeSummary]) -> dict[str, dict[int, str]]:
    """Occupancy as the agents reported it (each summary's ``offline_jobs``)."""
    out: dict[str, dict[int, str]] = {}
    for name, summary in nodes.items():
        held = {
            spec.index: job
            for spec, job in zip(summary.gpus, summary.offline_jobs, strict=False)
            if job is not None
        }
        if held:
            out[name] = held
    return out
