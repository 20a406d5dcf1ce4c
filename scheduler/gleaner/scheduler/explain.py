"""Why a job goes to a node, or not: one type, one wording (pure).

Contract. :class:`NodeExplanation` is the scheduler's answer about one job on one node:
the GPU set it judged there (the chosen set of a placement; for any other node the set
that scheduler would pick there, else its most promising one), every factor of the
performance model for that set, the bias multiplier applied, the score, and one
:class:`Rule` per configured filter (node filters first, up to the first that rejects
the node as the cycle counts it, then set filters) saying whether it passed and why, in
the filters' own wording (``gleaner.perfmodel.admission`` for the SLA and pair-overlap
rules). ``gleaner.scheduler.schedule.Scheduler`` builds it
(``explain_node``, ``explain_set``); placements carry the one that chose them, and
``gleaner place``, ``gleaner predict``, the operator, the simulator and the dashboard's
runner-ups all read their reasons from it. :meth:`NodeExplanation.lost_to` words why a
node lost to the chosen one. docs/scheduler.md shows examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gleaner.perfmodel.admission import limiting


def placed_message(node: str, gpus: Sequence[int], fraction: float) -> str:
    """The one-line message of a placement (the operator's Scheduled condition and Event)."""
    listed = ",".join(str(g) for g in gpus)
    return f"placed on {node} GPUs {listed}: predicted {fraction:.2f} of standalone throughput"


SLA_RULE = "ThroughputSLA"
"""The filter whose verdict leads an explanation (the predicted product against the SLA)."""


@dataclass(frozen=True)
class Rule:
    """One filter's verdict on a node (node filters) or on the node's judged set."""

    name: str
    """The filter's registered name (``NodeUsable``, ``ThroughputSLA``, ...)."""
    passed: bool
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "text": self.text}


@dataclass(frozen=True)
class NodeExplanation:
    """Why ``job`` goes (or would not go) to ``node`` (see the module docstring)."""

    job: str
    node: str
    sla: float
    rules: tuple[Rule, ...]
    gpus: tuple[int, ...] = ()
    """The judged GPU set (empty when a node filter rejected the node, or none exists)."""
    compute: float | None = None
    memory: float | None = None
    multi_gpu: float | None = None
    bias: float = 1.0
    """The learned bias multiplier applied to the model's product."""
    score: float | None = None
    """The weighted score (0..100) of the set when it is feasible."""

    @property
    def raw_fraction(self) -> float | None:
        """compute * memory * multi_gpu: the model's own prediction for the set."""
        if self.compute is None or self.memory is None or self.multi_gpu is None:
            return None
        return self.compute * self.memory * self.multi_gpu

    @property
    def throughput_fraction(self) -> float | None:
        """The bias-corrected prediction the rules judged, within [0, 1]."""
        raw = self.raw_fraction
        return None if raw is None else min(1.0, max(0.0, raw * self.bias))

    @property
    def feasible(self) -> bool:
        return bool(self.gpus) and all(r.passed for r in self.rules)

    @property
    def failed(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if not r.passed)

    @property
    def limiting(self) -> str | None:
        """The smallest factor of the judged set (``compute 0.35``), if there is a set."""
        if self.compute is None or self.memory is None or self.multi_gpu is None:
            return None
        return limiting(
            {"compute": self.compute, "memory": self.memory, "multi_gpu": self.multi_gpu}
        )

    @property
    def reasons(self) -> tuple[str, ...]:
        """The verdict in lines: the SLA rule's first (when a set was judged), then the
        failed rules' texts, or every other rule's text when all passed."""
        failed = self.failed
        first = [r for r in self.rules if r.name == SLA_RULE]
        rest = [r for r in (failed or self.rules) if r.name != SLA_RULE]
        return tuple(r.text for r in first + rest)

    @property
    def why(self) -> str:
        """One line: why the job cannot go here, or the SLA verdict when it can."""
        if self.failed:
            return "; ".join(r.text for r in self.failed)
        return self.sla_text or "feasible"

    @property
    def sla_text(self) -> str | None:
        for r in self.rules:
            if r.name == SLA_RULE:
                return r.text
        return None

    @property
    def message(self) -> str:
        """The placement's one-line message when this set is chosen (``placed_message``)."""
        return placed_message(self.node, self.gpus, self.throughput_fraction or 0.0)

    @property
    def factors_text(self) -> str:
        """The judged set's factors and bias in one line (``compute 0.90 x memory 1.00 x
        multi-GPU 1.00 x bias 1.00 = 0.90``), or ``no GPU set`` when none was judged."""
        if self.compute is None or self.memory is None or self.multi_gpu is None:
            return "no GPU set"
        return (
            f"compute {self.compute:.2f} x memory {self.memory:.2f} x multi-GPU "
            f"{self.multi_gpu:.2f} x bias {self.bias:.2f} = {self.throughput_fraction or 0.0:.2f}"
        )

    def lost_to(self, chosen: tuple[str, float] | None) -> str:
        """Why this node lost to ``chosen`` ((node, predicted fraction) of the placement),
        or, for a job not placed (``chosen`` None), what stops it here."""
        if not self.feasible:
            return self.why
        fraction = self.throughput_fraction or 0.0
        if chosen is None:
            return f"feasible ({self.why}); the job waits for the next scheduling pass"
        node, theirs = chosen
        if fraction < theirs:
            return f"predicted {fraction:.2f} < {theirs:.2f} on {node} ({self.limiting})"
        return (
            f"predicted {fraction:.2f} now, not below {theirs:.2f} on {node}: the trace "
            f"changed since the placement, or the scheduler's scores (packing, SLA "
            f"headroom) preferred {node}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "node": self.node,
            "gpus": list(self.gpus),
            "compute": self.compute,
            "memory": self.memory,
            "multi_gpu": self.multi_gpu,
            "bias": self.bias,
            "throughput_fraction": self.throughput_fraction,
            "sla": self.sla,
            "score": self.score,
            "feasible": self.feasible,
            "rules": [r.to_json() for r in self.rules],
        }


def runner_up_reasons(
    chosen: NodeExplanation, others: Sequence[NodeExplanation], limit: int | None = None
) -> tuple[str, ...]:
    """``node: why it lost`` for every other node, the closest first (feasible ones by
    predicted fraction, then the others by name), at most ``limit`` of them: what
    ``gleaner place --explain`` prints and the operator's ``NotChosen`` Event says."""
    mine = (chosen.node, chosen.throughput_fraction or 0.0)
    rest = sorted(
        (e for e in others if e.node != chosen.node),
        key=lambda e: (not e.feasible, -(e.throughput_fraction or 0.0), e.node),
    )
    return tuple(f"{e.node}: {e.lost_to(mine)}" for e in rest[:limit])


def chosen_summary(chosen: NodeExplanation, runner_ups: Sequence[str]) -> str:
    """The short line for the operator's Scheduled condition: the factors and bias of the
    chosen set, and the closest runner-up."""
    closest = f"; next best {runner_ups[0]}" if runner_ups else ""
    return f"{chosen.factors_text}{closest}"
