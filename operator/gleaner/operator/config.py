"""The operator's configuration: one typed object, built once from the command line.

Contract: ``OperatorConfig`` holds every knob of the operator with a doc per field. The CLI
(``gleaner operator``) builds it from flags (and ``GLEANER_OPERATOR_*`` environment
variables for the test-only knobs), ``main.register`` reads the intervals from it when it
registers kopf handlers, and handlers get it through kopf's ``memo`` (``OperatorContext``).
Nothing else reads flags or the environment.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The one value (perfmodel's, also the simulator's default), re-exported for the CLI.
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET as DEFAULT_RISK_TARGET
from gleaner.scheduler.bias import BiasConfig
from gleaner.scheduler.cluster import DEFAULT_TRACE_STALE_AFTER_S
from gleaner.scheduler.lifecycle import DEFAULT_MIN_STAY_SECONDS, PlannedExitRule
from gleaner.scheduler.lifecycle import DEFAULT_MOVE_HORIZON_H as DEFAULT_MOVE_HORIZON_H
from gleaner.scheduler.monitor import SLAMonitorConfig
from gleaner.scheduler.risk import AdmissionRisk

PEERING_NAME = "gleaner"
"""The kopf peering object shared by all replicas (one active operator at a time)."""

DEFAULT_STATE_NAMESPACE = "gleaner-system"
"""Where the operator keeps its own state (the bias table) when not told otherwise."""


MAX_PEERING_PRIORITY = 2**31 - 1
"""Largest peering priority (kopf stores it as a JSON integer; kept within int32)."""


def default_peering_priority() -> int:
    """A random peering priority in [1, MAX_PEERING_PRIORITY], drawn once per process.

    kopf pauses a replica while a live peer has a higher priority, and pauses *every*
    replica when two share one, so replicas must never tie: with random priorities drawn
    from two billion values, the highest one is active and the others stand by.
    """
    return 1 + secrets.randbelow(MAX_PEERING_PRIORITY)


@dataclass(frozen=True)
class ProfilingPool:
    """A dedicated profiling node pool (docs/profiling.md, "A dedicated profiling node
    pool"): profiling runs are placed only on nodes with these labels, and tolerate these
    taints; no online Pod runs there, so a run has its GPU to itself."""

    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """Kubernetes Toleration objects added to profiling Pods."""


@dataclass(frozen=True)
class OperatorConfig:
    """Everything ``gleaner operator`` can be told (see docs/operator.md, "Flags")."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to serve; empty: all namespaces (cluster-wide)."""
    http_port: int = 8080
    """Port of the HTTP server (/healthz, /readyz, /metrics, dashboard); 0 disables it."""
    http_host: str = "0.0.0.0"
    """Address the HTTP server binds."""
    webhook_port: int = 0
    """Port of the TLS admission webhook server (docs/operator.md, "Webhook"); 0 disables it."""
    webhook_host: str = "0.0.0.0"
    """Address the webhook server binds."""
    webhook_cert_dir: str = ""
    """Directory holding the webhook's ``tls.crt`` and ``tls.key`` (a kubernetes.io/tls
    Secret mounted as files)."""
    batch_api_port: int = 0
    """Port of the OpenAI-compatible Batch API (docs/batch.md, "The Batch API"); 0: off."""
    batch_api_host: str = "0.0.0.0"
    """Address the Batch API binds."""
    batch_api_dir: str = ""
    """Directory of the Batch API's file store (a volume of the operator's Pod)."""
    batch_api_url: str = ""
    """Where the runners of the batches the API creates reach it (the operator's Service)."""
    batch_api_max_file_bytes: int = 200 << 20
    """Largest file the Batch API takes (an upload is held in memory while it is parsed)."""
    batch_api_cert_dir: str = ""
    """Directory holding the Batch API's ``tls.crt`` and ``tls.key``: serve HTTPS (the pair
    reloaded when the files change); empty: plain HTTP."""
    batch_api_expiry_interval: float = 60.0
    """Seconds between two looks for batches past their completion window."""
    prometheus_url: str | None = None
    """Prometheus base URL: trace and observed-throughput source instead of NodeTraces."""
    peering: str | None = PEERING_NAME
    """kopf peering name; None runs standalone (no peering)."""
    prometheus_window: float = 3600.0
    """Window of Prometheus history summarized for placement, seconds."""
    peering_lifetime: int = 60
    """Seconds a replica's peering record stays valid without keep-alives (kopf)."""
    peering_priority: int = field(default_factory=default_peering_priority)
    """kopf peering priority: the live replica with the highest one is active. Random by
    default, so that replicas never tie (kopf would pause all of them)."""
    verbose: bool = False
    """Debug logging."""

    min_pass_interval: float = 1.0
    """Seconds at least between two scheduling passes (kicks in between coalesce)."""
    requeue_interval: float = 15.0
    """Seconds between the scheduling loop's looks while no pass has run (a standby replica,
    a skipped pass); after a pass it wakes when the earliest backoff passes."""
    sla: SLAMonitorConfig = field(default_factory=SLAMonitorConfig)
    """The SLA monitor's rule (window, k-of-n, grace, tolerance, backoff)."""
    unschedulable_backoff: float = 30.0
    """Seconds before an Unschedulable job is retried even if no NodeTrace changed."""
    trace_stale_after: float = DEFAULT_TRACE_STALE_AFTER_S
    """NodeTraces older than this (by lastReportTime) are not used for placement."""
    watch_timeout: float = 300.0
    """Server-side timeout of kopf's watch requests, seconds (the client adds 30)."""
    record_delay: float = 5.0
    """Seconds after a placement's Pod is made before its status write records the placement
    alone; a Pod that reports a phase sooner is recorded with it, in one write."""
    bind_delay: float = 0.0
    """Fault injection for tests: seconds a placement's status write is held back after its
    Pod is made."""
    max_batch: int = 1000
    """Most jobs considered in one scheduling pass (the rest wait for the next pass)."""
    profiling_pool: ProfilingPool | None = None
    """Where profile on submit runs its profiling Pods; None: on shared GPUs, as any
    harvested job (their runs are then counted per offline GPU-second)."""
    state_namespace: str = DEFAULT_STATE_NAMESPACE
    """Namespace of the operator's own state: the ConfigMap ``gleaner-bias`` (the learned
    observed/predicted ratios; the chart passes the release namespace)."""
    bias_persist_interval: float = 60.0
    """Seconds at least between two writes of the bias table (it is written only when it
    changed)."""
    move_check_interval: float = 3600.0
    """Seconds between two looks for Running jobs to move off a node before a forecast
    peak (0: never move)."""
    move_min_stay: float = DEFAULT_MIN_STAY_SECONDS
    """Seconds a job runs on its node before a move is considered."""
    move_horizon: float = DEFAULT_MOVE_HORIZON_H * 3600.0
    """Seconds ahead a Running job's own node must still admit it, else it moves."""
    planned_exit: PlannedExitRule | None = field(default_factory=PlannedExitRule)
    """The planned exit (docs/scheduler.md, "Planned exits"): large jobs no node admits over
    the admission horizon are placed over a shorter one and leave for the queue before a
    peak no node admits them through; None: off."""
    risk_target: float | None = DEFAULT_RISK_TARGET
    """Risk-aware admission: the probability a window must meet the SLA with, judged from
    the spread of past windows around their prediction; None: the mean rule."""

    @property
    def bias(self) -> BiasConfig:
        """How the operator's bias table learns and corrects."""
        return self.admission_risk.bias_config()

    @property
    def admission_risk(self) -> AdmissionRisk:
        """How the risk target enters admission (the bias table's residual quantile and the
        load spread of nodes with hours): the scheduler's rule, the simulator's too."""
        return AdmissionRisk(self.risk_target)

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces
