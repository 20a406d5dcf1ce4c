"""What a scheduling cycle answers: placements, unschedulable jobs with reasons, deferrals.

Contract. :class:`ScheduleResult` lists one :class:`PlacementDecision` per placed job
(node, GPU indices and UUIDs, the model's ``Prediction`` for exactly that set, the bias
multiplier applied, and the score that chose it) and one :class:`Unschedulable` per job
that fits nowhere, whose ``reasons`` group the nodes by why they were rejected, in the
form kube-scheduler users know ("0/12 nodes are available: 9 predicted throughput below
SLA (best 0.31 < 0.60, compute 0.35), 3 no 2 aligned free GPUs (pair overlap < 0.95).").
Jobs still in backoff are listed in ``deferred``.

``ScheduleResult.to_json()`` is the ``gleaner place`` JSON (docs/scheduler.md):
``{"placements": [{job, node, gpus, compute, memory, multi_gpu, throughput_fraction}],
"unschedulable": [{job, reasons}]}``. ``throughput_fraction`` is the bias-corrected
prediction the decision relied on (equal to compute * memory * multi_gpu when no
correction applies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gleaner.api import Placement
from gleaner.perfmodel.model import Prediction
from gleaner.scheduler.explain import NodeExplanation


@dataclass(frozen=True)
class PlacementDecision:
    """One job placed on a GPU set."""

    job: str
    node: str
    gpus: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    prediction: Prediction
    """The performance model's prediction for this exact set: factors and
    ``throughput_fraction`` uncorrected, the verdict judged with ``bias``."""
    bias: float = 1.0
    """Bias-correction multiplier applied to the prediction."""
    score: float = 0.0
    """Weighted score (0..100) that chose this set among the feasible ones."""
    explanation: NodeExplanation | None = None
    """Why this node and set: every factor, the bias, every filter's verdict."""

    @property
    def reasons(self) -> tuple[str, ...]:
        """The explanation's lines (the prediction's, corrected by the bias, without one)."""
        if self.explanation is not None:
            return self.explanation.reasons
        return self.prediction.reasons

    @property
    def throughput_fraction(self) -> float:
        """The bias-corrected predicted fraction of standalone throughput."""
        return min(1.0, max(0.0, self.prediction.throughput_fraction * self.bias))

    @property
    def tokens_per_second(self) -> float:
        return self.prediction.tokens_per_second * (
            self.throughput_fraction / self.prediction.throughput_fraction
            if self.prediction.throughput_fraction > 0
            else 0.0
        )

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        return {
            "job": self.job,
            "node": self.node,
            "gpus": list(self.gpus),
            "compute": p.compute,
            "memory": p.memory,
            "multi_gpu": p.multi_gpu,
            "throughput_fraction": self.throughput_fraction,
        }

    def to_placement(self, decided_at: datetime) -> Placement:
        """The OfflineJob ``status.placement`` for this decision."""
        p = self.prediction
        return Placement(
            node=self.node,
            gpu_indices=list(self.gpus),
            gpu_uuids=[u for u in self.gpu_uuids if u],
            compute=min(1.0, max(0.0, p.compute)),
            memory=min(1.0, max(0.0, p.memory)),
            multi_gpu=min(1.0, max(0.0, p.multi_gpu)),
            throughput_fraction=self.throughput_fraction,
            predicted_tokens_per_second=max(0.0, self.tokens_per_second),
            decided_at=decided_at,
        )


@dataclass(frozen=True)
class Unschedulable:
    """A job no node can take, with the reasons grouped per node class."""

    job: str
    reasons: tuple[str, ...]
    """``"<count> <reason>"`` per node class, most nodes first; or job-level reasons."""
    nodes_total: int | None = None
    """Nodes considered; None when the job failed before looking at nodes."""

    @property
    def message(self) -> str:
        """One line, kube-scheduler style."""
        if self.nodes_total is None:
            return "; ".join(self.reasons)
        if not self.reasons:
            return f"0/{self.nodes_total} nodes are available."
        return f"0/{self.nodes_total} nodes are available: {', '.join(self.reasons)}."

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class ScheduleResult:
    """The answer of one cycle."""

    placements: list[PlacementDecision] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    """Jobs not considered because their backoff (``not_before``) has not passed."""

    def placement(self, job: str) -> PlacementDecision | None:
        for p in self.placements:
            if p.job == job:
                return p
        return None

    def reasons(self, job: str) -> Unschedulable | None:
        for u in self.unschedulable:
            if u.job == job:
                return u
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "placements": [p.to_json() for p in self.placements],
            "unschedulable": [u.to_json() for u in self.unschedulable],
        }
