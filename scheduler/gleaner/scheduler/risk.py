"""How the risk target sets admission: one rule for the operator and the simulator.

Contract. :class:`AdmissionRisk` holds the risk target (the probability a window must meet
its SLA with; None: the mean rule) and the horizon a placement is judged over, and answers
the two ways it enters admission:

- :meth:`AdmissionRisk.bias_config`: the bias table's configuration. Its residual quantile
  at the risk target multiplies every prediction (``BiasTable.factor``), with the table's
  default bounds on the learned ratio;
- :meth:`AdmissionRisk.node_summary`: what a node with hours (a time-of-day profile) is
  admitted by: each GPU at its busiest hour of the horizon, its load scaled by the learned
  load spread at the risk target (perfmodel's ``node_admission`` with
  ``LoadSpread.scale``).

A node's admission bound is then the scheduler's bias-corrected prediction on that summary,
with a table fed by :func:`gleaner.scheduler.bias.feed` (observed windows against the
placement's raw prediction). The operator builds its bias table and its node summaries
through this class, and the simulator's ``gleaner`` policy does the same, so for the same
node history, load spread, bias observations and risk target both admit by the same bound.

Why here. The operator sits above the simulator (the layers contract), so the rule cannot
live in either; the scheduler owns the bias table and is the lowest layer both import that
knows about it. Pure: no I/O, no clock (``start`` is an argument).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gleaner.perfmodel.admission import ADMISSION_HORIZON_H, DEFAULT_RISK_TARGET, LoadSpread
from gleaner.perfmodel.diurnal import DiurnalProfile
from gleaner.perfmodel.hours import node_admission
from gleaner.perfmodel.summary import NodeSummary
from gleaner.scheduler.bias import BiasConfig


@dataclass(frozen=True)
class AdmissionRisk:
    """The risk target and the horizon admission judges a placement by."""

    risk_target: float | None = DEFAULT_RISK_TARGET
    """The probability a window must meet its SLA with; None: the mean rule (no load
    spread, no residual quantile)."""
    horizon_seconds: float = ADMISSION_HORIZON_H * 3600.0
    """How far ahead a placement on a node with hours is judged."""

    def __post_init__(self) -> None:
        if self.risk_target is not None and not 0 < self.risk_target < 1:
            raise ValueError("risk_target must be in (0, 1)")
        if not self.horizon_seconds > 0:
            raise ValueError("horizon_seconds must be > 0")

    def bias_config(self) -> BiasConfig:
        """How the bias table learns and corrects under this risk target."""
        return BiasConfig(risk_target=self.risk_target)

    def busy_scale(self, spread: LoadSpread, node: str) -> float:
        """How much busier than forecast ``node``'s load is taken to be."""
        return spread.scale(node, self.risk_target)

    def node_summary(
        self,
        recent: NodeSummary,
        profile: DiurnalProfile,
        start: datetime,
        spread: LoadSpread,
        horizon_seconds: float | None = None,
        mean: NodeSummary | None = None,
    ) -> NodeSummary:
        """What a node with hours is admitted by for a run from ``start`` over the horizon
        (``horizon_seconds``; None: this rule's): ``recent`` is the node's latest report,
        ``profile`` its hours, ``spread`` the load spread learned so far (``mean``: the
        node's mean forecast over the horizon when the caller has it already)."""
        return node_admission(
            recent,
            profile,
            start,
            self.horizon_seconds if horizon_seconds is None else horizon_seconds,
            busy_scale=self.busy_scale(spread, recent.node),
            mean=mean,
        )


__all__ = ["AdmissionRisk"]
