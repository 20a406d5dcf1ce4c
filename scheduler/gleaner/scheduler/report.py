"""The SLA eviction report: one record per eviction decision (pure data, JSON round-trip).

Contract. :class:`EvictionReport` holds everything a user needs to understand one
eviction: the job and where it ran (node, GPU indices), its SLA, what the model
predicted there (the three factors and their product), a summary of what was observed
(mean / min / last throughput fraction, windows considered and missed), the monitor's
reason, when it happened, and what happens next (requeued with a backoff deadline and
the nodes now excluded, or given up as Failed).

``to_json()`` returns a JSON-ready dict in the stored format,
:class:`gleaner.api.contract.EvictionReportDocument` (camelCase keys, times as RFC 3339 UTC
strings); ``from_json()`` accepts that dict or its serialized string and returns an equal
record. The operator stores it under ``REPORT_KEY`` of a ConfigMap labelled
``LABEL_REPORT=REPORT_SLA_EVICTION`` (both in ``gleaner.api.contract``);
``gleaner report evictions`` and the dashboard read them back with ``from_json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gleaner.api.contract import (
    EvictionReportDocument,
    ObservedSummaryDocument,
    PredictedFactorsDocument,
    rfc3339,
)
from gleaner.scheduler.monitor import (
    EvictionPlan,
    SLADecision,
    SLAHistory,
    SLAMonitorConfig,
    summarize,
    window_missed,
)


@dataclass(frozen=True)
class PredictedFactors:
    """What the model predicted for the placement (the three factors of docs/perfmodel.md)."""

    compute: float
    memory: float
    multi_gpu: float
    throughput_fraction: float


@dataclass(frozen=True)
class ObservedSummary:
    """Summary of the observed throughput fractions the decision looked at."""

    mean: float
    min: float
    last: float
    windows: int
    """Windows considered (after grace, at most n)."""
    windows_missed: int
    window_seconds: float


@dataclass(frozen=True)
class EvictionReport:
    """One SLA eviction (see the module docstring)."""

    job: str
    node: str
    gpus: tuple[int, ...]
    sla: float
    predicted: PredictedFactors
    observed: ObservedSummary
    reason: str
    time: float
    """When the eviction was decided, seconds since the epoch."""
    eviction_count: int
    failed: bool
    """True: the job gave up as Failed; False: it was requeued."""
    next_attempt_after: float | None
    excluded_nodes: tuple[str, ...] = field(default_factory=tuple)
    gpu_uuids: tuple[str, ...] = field(default_factory=tuple)

    @property
    def next_placement(self) -> str:
        """Human-readable: what happens to the job next."""
        if self.failed:
            return f"none: gave up as Failed after {self.eviction_count} eviction(s)"
        assert self.next_attempt_after is not None
        away = ", ".join(self.excluded_nodes) or "-"
        return f"requeued; not before {rfc3339(self.next_attempt_after)}, not on {away}"

    def document(self) -> EvictionReportDocument:
        """This report in the stored format."""
        return EvictionReportDocument(
            job=self.job,
            node=self.node,
            gpus=list(self.gpus),
            gpu_uuids=list(self.gpu_uuids),
            sla=self.sla,
            predicted=PredictedFactorsDocument(
                compute=self.predicted.compute,
                memory=self.predicted.memory,
                multi_gpu=self.predicted.multi_gpu,
                throughput_fraction=self.predicted.throughput_fraction,
            ),
            observed=ObservedSummaryDocument(
                mean=self.observed.mean,
                min=self.observed.min,
                last=self.observed.last,
                windows=self.observed.windows,
                windows_missed=self.observed.windows_missed,
                window_seconds=self.observed.window_seconds,
            ),
            reason=self.reason,
            time=self.time,
            eviction_count=self.eviction_count,
            outcome="failed" if self.failed else "requeued",
            next_attempt_after=self.next_attempt_after,
            excluded_nodes=list(self.excluded_nodes),
            next_placement=self.next_placement,
        )

    def to_json(self) -> dict[str, Any]:
        return self.document().serialize()

    @classmethod
    def from_document(cls, doc: EvictionReportDocument) -> EvictionReport:
        pred, obs = doc.predicted, doc.observed
        return cls(
            job=doc.job,
            node=doc.node,
            gpus=tuple(doc.gpus),
            gpu_uuids=tuple(doc.gpu_uuids),
            sla=doc.sla,
            predicted=PredictedFactors(
                compute=pred.compute,
                memory=pred.memory,
                multi_gpu=pred.multi_gpu,
                throughput_fraction=pred.throughput_fraction,
            ),
            observed=ObservedSummary(
                mean=obs.mean,
                min=obs.min,
                last=obs.last,
                windows=obs.windows,
                windows_missed=obs.windows_missed,
                window_seconds=obs.window_seconds,
            ),
            reason=doc.reason,
            time=doc.time,
            eviction_count=doc.eviction_count,
            failed=doc.failed,
            next_attempt_after=doc.next_attempt_after,
            excluded_nodes=tuple(doc.excluded_nodes),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | bytes) -> EvictionReport:
        """Parse ``to_json()``'s output (or its string); raise ValueError on bad input."""
        return cls.from_document(EvictionReportDocument.parse(data))


def build_eviction_report(
    history: SLAHistory,
    decision: SLADecision,
    plan: EvictionPlan,
    predicted: PredictedFactors,
    now: float,
    config: SLAMonitorConfig,
    gpu_uuids: tuple[str, ...] = (),
) -> EvictionReport:
    """The report of an eviction decided by :func:`decide_sla` and planned by
    :func:`plan_after_eviction`; the observed summary covers the windows it considered."""
    considered = history.after_grace(config.grace_seconds)[-config.history_windows :]
    mean, low, last = summarize(considered)
    missed = sum(1 for w in considered if window_missed(w.throughput_fraction, history.sla, config))
    return EvictionReport(
        job=history.job,
        node=history.node,
        gpus=history.gpus,
        gpu_uuids=gpu_uuids,
        sla=history.sla,
        predicted=predicted,
        observed=ObservedSummary(
            mean=mean,
            min=low,
            last=last,
            windows=len(considered),
            windows_missed=missed,
            window_seconds=config.window_seconds,
        ),
        reason=decision.reason,
        time=now,
        eviction_count=plan.eviction_count,
        failed=plan.failed,
        next_attempt_after=plan.next_attempt_after,
        excluded_nodes=plan.excluded_nodes,
    )
