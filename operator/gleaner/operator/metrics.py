"""The operator's own Prometheus metrics, in a registry of their own.

Contract: ``OperatorMetrics(registry)`` registers exactly these families (names are a
contract: ``gleaner_operator_`` prefix) and nothing in the global default registry:

- ``gleaner_operator_jobs{phase}`` (gauge): OfflineJobs by phase, as of the last pass;
- ``gleaner_operator_placements_total`` (counter): Pods bound to a placement;
- ``gleaner_operator_evictions_total`` (counter): SLA evictions;
- ``gleaner_operator_unschedulable_total`` (counter): jobs found unschedulable in a pass;
- ``gleaner_operator_scheduling_latency_seconds`` (histogram): wall time of one scheduling
  pass (list state, decide, bind);
- ``gleaner_operator_job_queue_latency_seconds`` (histogram): job creation to binding.

Tests give each instance a fresh ``CollectorRegistry`` and read values with
``registry.get_sample_value``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter

from gleaner.api import Phase

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class OperatorMetrics:
    """Metric objects the handlers update (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.jobs = Gauge(
            "gleaner_operator_jobs",
            "OfflineJobs by phase (as of the last scheduling pass).",
            ["phase"],
            registry=self.registry,
        )
        self.placements = PromCounter(
            "gleaner_operator_placements",
            "Offline Pods bound to a placement.",
            registry=self.registry,
        )
        self.evictions = PromCounter(
            "gleaner_operator_evictions",
            "SLA evictions.",
            registry=self.registry,
        )
        self.unschedulable = PromCounter(
            "gleaner_operator_unschedulable",
            "Jobs found unschedulable by a scheduling pass.",
            registry=self.registry,
        )
        self.scheduling_latency = Histogram(
            "gleaner_operator_scheduling_latency_seconds",
            "Wall time of one scheduling pass (read state, decide, bind).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_latency = Histogram(
            "gleaner_operator_job_queue_latency_seconds",
            "Seconds from an OfflineJob's creation to its binding.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        for phase in Phase:
            self.jobs.labels(phase=phase.value).set(0)

    def set_phases(self, phases: Iterable[Phase]) -> None:
        counts = Counter(phases)
        for phase in Phase:
            self.jobs.labels(phase=phase.value).set(counts.get(phase, 0))
