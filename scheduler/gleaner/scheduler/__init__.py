"""Scheduler: SLA-guaranteed placement and SLA-monitor decisions (pure).

The public API (everything the operator, the simulator and the CLI use) is re-exported
here; the modules behind it are:

- ``job`` — :class:`JobRequest` (one pending OfflineJob) and the queue order;
- ``cluster`` — :class:`ClusterState` (node summaries, labels, occupancy, availability)
  and :class:`SchedulingSnapshot` (that plus the queue, staleness and the time: the one
  input of :func:`decide`, the entry every shell calls);
- ``config`` — :class:`SchedulerConfig`;
- ``framework``, ``registry``, ``plugins/`` — filters with reasons and scores 0..100,
  kube-scheduler style;
- ``schedule`` — :func:`schedule`, one cycle; ``result`` — what it answers;
- ``explain`` — :class:`NodeExplanation`, why a job goes to a node or not (every factor,
  the bias, every filter's verdict), from :func:`explain_nodes` / :func:`explain_set`;
- ``monitor`` — SLA monitor: :func:`decide_sla` (k of n windows, grace),
  :func:`next_attempt_after` (exponential backoff), :func:`plan_after_eviction`;
- ``report`` — :class:`EvictionReport`, the record of one eviction (JSON round-trip);
- ``lifecycle`` — the job lifecycle the operator and the simulator both drive: phase
  table, backoff gate, SLA tick, eviction (import it as ``gleaner.scheduler.lifecycle``);
- ``measures`` — the headline measures (SLA attainment, harvested utilization, offline
  throughput) shared by the dashboard, the operator's /metrics and the simulator;
- ``bias`` — :class:`BiasTable`, observed/predicted correction per node and job class.

Nothing here does I/O, reads a clock or imports a Kubernetes or Prometheus client.
"""

from gleaner.scheduler.bias import BiasConfig, BiasEntry, BiasTable
from gleaner.scheduler.cluster import (
    NO_WINDOW_REASON,
    STALE_REASON,
    ClusterState,
    SchedulingSnapshot,
    occupied_from_summaries,
    stale_nodes,
)
from gleaner.scheduler.config import (
    DEFAULT_FILTERS,
    DEFAULT_SCORES,
    DEFAULT_SLA_MARGIN,
    SchedulerConfig,
)
from gleaner.scheduler.explain import NodeExplanation, Rule, placed_message
from gleaner.scheduler.job import JOB_CLASS_LABEL, JobRequest, order_key, queue_order
from gleaner.scheduler.monitor import (
    EvictionPlan,
    SLAAction,
    SLADecision,
    SLAHistory,
    SLAMonitorConfig,
    WindowObservation,
    backoff_seconds,
    decide_sla,
    next_attempt_after,
    plan_after_eviction,
    window_missed,
)
from gleaner.scheduler.registry import FILTERS, SCORES
from gleaner.scheduler.report import (
    EvictionReport,
    ObservedSummary,
    PredictedFactors,
    build_eviction_report,
)
from gleaner.scheduler.result import PlacementDecision, ScheduleResult, Unschedulable
from gleaner.scheduler.schedule import (
    Scheduler,
    decide,
    explain_nodes,
    explain_runner_ups,
    explain_set,
    schedule,
)

SLAState = SLAHistory
"""Alias: the monitor's per-placement state is its window history."""

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORES",
    "DEFAULT_SLA_MARGIN",
    "FILTERS",
    "JOB_CLASS_LABEL",
    "NO_WINDOW_REASON",
    "SCORES",
    "STALE_REASON",
    "BiasConfig",
    "BiasEntry",
    "BiasTable",
    "ClusterState",
    "EvictionPlan",
    "EvictionReport",
    "JobRequest",
    "NodeExplanation",
    "ObservedSummary",
    "PlacementDecision",
    "PredictedFactors",
    "Rule",
    "SLAAction",
    "SLADecision",
    "SLAHistory",
    "SLAMonitorConfig",
    "SLAState",
    "ScheduleResult",
    "Scheduler",
    "SchedulerConfig",
    "SchedulingSnapshot",
    "Unschedulable",
    "WindowObservation",
    "backoff_seconds",
    "build_eviction_report",
    "decide",
    "decide_sla",
    "explain_nodes",
    "explain_runner_ups",
    "explain_set",
    "next_attempt_after",
    "occupied_from_summaries",
    "order_key",
    "placed_message",
    "plan_after_eviction",
    "queue_order",
    "schedule",
    "stale_nodes",
    "window_missed",
]
