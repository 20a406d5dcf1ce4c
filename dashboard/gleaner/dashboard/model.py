"""The dashboard's data model: what the pages show and what ``/api`` answers (pydantic).

Contract. Two documents, both JSON with camelCase keys, both versioned by ``schemaVersion``:

- :class:`ClusterRecord` (``kind: ClusterRecord``) is the *input*: the API objects as the
  API server (or the simulator) holds them — NodeTraces, OfflineJobs, the profiles named by
  ``profileFrom``, SLA eviction reports (the scheduler's ``EvictionReport.to_json()``) —
  plus what no single object holds: each job's observed-throughput series and the
  cluster's time series, and from a cluster the operator's bias table and admission
  settings (runner-up nodes are judged with them, as the scheduler judges).
  ``gleaner simulate --out DIR`` writes one as ``DIR/dashboard.json``; ``KubeSource``
  assembles one from the cluster.
- :class:`ClusterSnapshot` (``kind: ClusterSnapshot``) is the *view*, derived from a record
  by the pure :func:`gleaner.dashboard.build.build_snapshot`: per node and GPU the idle
  fraction, the harvestable-memory quantiles and histogram, the busy-overlap matrix and the
  offline job per GPU; per job its phase, placement, predicted factors, observed series,
  evictions and runner-up nodes with why they lost; the eviction reports with stable ids;
  the cluster time series and a summary. A snapshot file may also be served as is.

Times in series are epoch seconds (for a simulation, of its simulated clock; older
simulation records used seconds since the start); every other time is an RFC 3339 datetime.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gleaner.api.contract import BIAS_CONFIGMAP
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler.cluster import DEFAULT_TRACE_STALE_AFTER_S

if TYPE_CHECKING:
    from gleaner.scheduler.monitor import SLAMonitorConfig

SCHEMA_VERSION = 1

SourceKind = Literal["cluster", "simulation"]


class DashModel(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown keys refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class Point(DashModel):
    """One sample of a time series."""

    t: float = Field(description="Epoch seconds (a simulation's simulated clock).")
    v: float = Field(description="The value.")


class ClusterSeries(DashModel):
    """The cluster's history, one point per reporting interval."""

    harvested_utilization: list[Point] = Field(
        default_factory=list,
        description="Share of all GPU time given to offline work (0..1).",
    )
    offline_throughput: list[Point] = Field(
        default_factory=list,
        description="Offline work done, in standalone-GPU equivalents "
        "(sum over running jobs of throughput fraction x GPUs).",
    )
    sla_attainment: list[Point] = Field(
        default_factory=list,
        description="Share of running jobs meeting their throughput SLA (0..1).",
    )
    preemptions: list[Point] = Field(
        default_factory=list, description="Offline preemptions (gate closes) in the interval."
    )
    reclamations: list[Point] = Field(
        default_factory=list, description="Memory reclamation events in the interval."
    )
    period_means: dict[str, float] = Field(
        default_factory=dict,
        description="Per series name (harvestedUtilization, offlineThroughput, slaAttainment), "
        "the source's own figure over the series' period (a simulation's summary, computed "
        "on every step or job-window rather than on the plotted points); the overview cards "
        "show it instead of the mean of the points.",
    )
    notes: dict[str, str] = Field(
        default_factory=dict,
        description="Per series name (e.g. 'preemptions'), why it is empty or what it stands "
        "for; shown instead of 'no data' (a simulation that does not model an event).",
    )


# ---------------------------------------------------------------------------------------
# Input: the record
# ---------------------------------------------------------------------------------------


class RecordedReport(DashModel):
    """One SLA eviction report as stored: where, and the report JSON itself."""

    namespace: str = Field(description="Namespace of the job (and of the report ConfigMap).")
    config_map: str = Field(default="", description="Name of the report ConfigMap, if any.")
    report: dict[str, Any] = Field(description="The scheduler's EvictionReport.to_json().")


class SlaMonitorSettings(DashModel):
    """How the SLA monitor that produced the record judged windows (its flags)."""

    window_seconds: float = Field(gt=0, description="One observed sample's length, seconds.")
    grace_seconds: float = Field(
        ge=0, description="Samples this soon after a placement are not judged."
    )
    tolerance: float = Field(ge=0, description="A window meets an SLA at SLA x (1 - tolerance).")
    max_sla_window_seconds: float | None = Field(
        default=None, gt=0, description="No job is judged over a longer SLA window, seconds."
    )

    @classmethod
    def of(cls, config: SLAMonitorConfig) -> SlaMonitorSettings:
        """The settings of an SLA monitor's rule."""
        return cls(
            window_seconds=config.window_seconds,
            grace_seconds=config.grace_seconds,
            tolerance=config.tolerance,
            max_sla_window_seconds=config.max_sla_window_seconds,
        )


class AdmissionSettings(DashModel):
    """How the operator that produced the record admits jobs (its flags)."""

    risk_target: float | None = Field(
        default=DEFAULT_RISK_TARGET,
        gt=0,
        lt=1,
        description="The probability a window must meet its SLA with (null: the mean rule).",
    )
    trace_stale_after_seconds: float = Field(
        default=DEFAULT_TRACE_STALE_AFTER_S,
        gt=0,
        description="A node whose last report is older than this is unavailable, seconds.",
    )


class ClusterRecord(DashModel):
    """The dashboard's input (see the module docstring)."""

    schema_version: int = Field(default=SCHEMA_VERSION, description="Format version.")
    kind: Literal["ClusterRecord"] = "ClusterRecord"
    generated_at: datetime = Field(description="When the record was taken.")
    source: SourceKind = Field(description="A live cluster or a simulation.")
    title: str = Field(default="", description="Cluster or scenario name shown in the header.")
    node_traces: list[dict[str, Any]] = Field(
        default_factory=list, description="NodeTrace objects (as the API server returns them)."
    )
    node_labels: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Node labels by node name (gpuSelector), optional."
    )
    offline_jobs: list[dict[str, Any]] = Field(
        default_factory=list, description="OfflineJob objects (as the API server returns them)."
    )
    profiles: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Profiles of jobs that use profileFrom, by 'namespace/name' of the job.",
    )
    eviction_reports: list[RecordedReport] = Field(
        default_factory=list, description="SLA eviction reports."
    )
    job_series: dict[str, list[Point]] = Field(
        default_factory=dict,
        description="Observed throughput fraction over time, by 'namespace/name' of the job.",
    )
    series: ClusterSeries = Field(
        default_factory=ClusterSeries, description="The cluster's time series."
    )
    sla_monitor: SlaMonitorSettings | None = Field(
        default=None,
        description="The SLA monitor's settings the jobs were judged with (absent: its defaults).",
    )
    bias: dict[str, Any] | None = Field(
        default=None,
        description=f"The operator's bias table ConfigMap ({BIAS_CONFIGMAP}; absent: none "
        "learned), which runner-up nodes are judged with, as the scheduler does.",
    )
    admission: AdmissionSettings | None = Field(
        default=None, description="The operator's admission settings (absent: its defaults)."
    )


# ---------------------------------------------------------------------------------------
# Output: the snapshot
# ---------------------------------------------------------------------------------------


class MemoryDistribution(DashModel):
    """Harvestable memory of one GPU over the window (time-weighted)."""

    p10: float | None = Field(default=None, description="10th percentile, GiB.")
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    mean: float | None = Field(default=None, description="Time-weighted mean, GiB.")
    min: float | None = None
    max: float | None = None
    histogram: list[Point] = Field(
        default_factory=list,
        description="t = free GiB (floored to the sketch step), v = share of the window.",
    )


class GpuView(DashModel):
    """One GPU of a node."""

    index: int
    uuid: str = ""
    product: str = ""
    memory_gi_b: float | None = Field(default=None, alias="memoryGiB")
    idle_fraction: float | None = Field(
        default=None, description="Offline-usable share of the window (P_compute of this GPU)."
    )
    online_busy_fraction: float | None = Field(
        default=None, description="Share of the window the online workload was busy."
    )
    memory: MemoryDistribution = Field(default_factory=MemoryDistribution)
    preemptions: int = 0
    reclamations: int = 0
    online_requests: int = 0
    offline_job: str | None = Field(
        default=None, description="namespace/name of the offline job on this GPU, if any."
    )
    uninstrumented: list[str] = Field(
        default_factory=list,
        description="Processes no Gleaner shim accounts for, as the agent reports them "
        "('pod ns/name (unknown)'): the agent holds this GPU's offline gate closed and the "
        "scheduler places nothing here (unless the node opted out).",
    )


class NodeView(DashModel):
    """One GPU node, from its NodeTrace."""

    name: str
    gpus: list[GpuView] = Field(default_factory=list)
    window_seconds: float = 0.0
    window_end: datetime | None = None
    last_report_time: datetime | None = None
    idle_fraction: float | None = Field(default=None, description="Mean over the node's GPUs.")
    harvestable_memory_p10_gi_b: float | None = Field(default=None, alias="harvestableMemoryP10GiB")
    overlap: list[list[float | None]] = Field(
        default_factory=list,
        description="Busy overlap / union per GPU pair, in GPU order (None: not measured).",
    )
    offline_jobs: list[str] = Field(default_factory=list, description="Jobs on this node.")
    labels: dict[str, str] = Field(default_factory=dict)
    preemptions: int = 0
    reclamations: int = 0
    uninstrumented_guard: str | None = Field(
        default=None,
        description="Enforced (GPUs with uninstrumented processes stay closed) or OptedOut "
        "(reported only); None: the agent does not say.",
    )


class Factors(DashModel):
    """The performance model's three factors and their product for one GPU set."""

    compute: float
    memory: float
    multi_gpu: float = Field(alias="multiGPU")
    throughput_fraction: float
    tokens_per_second: float | None = None


class RunnerUp(DashModel):
    """Another node the job could have gone to, and why it did not."""

    node: str
    gpus: list[int] = Field(default_factory=list, description="Best free GPU set there.")
    factors: Factors | None = Field(default=None, description="Predicted there (None: no set).")
    feasible: bool = False
    why: str = Field(description="Why it lost, human-readable.")


class JobEviction(DashModel):
    """One eviction or move of a job (from its status), linked to an eviction's full report."""

    time: datetime
    node: str
    gpus: list[int] = Field(default_factory=list)
    type: Literal["SLAEviction", "Move", "PlannedExit"] = Field(
        default="SLAEviction",
        description="How the job left: an SLA eviction, a move before a forecast peak, or "
        "its planned exit (status.evictions[].type).",
    )
    reason: str
    sla: float
    predicted_throughput_fraction: float
    observed_throughput_fraction: float
    report_id: str | None = Field(default=None, description="Id of the full report (/evictions).")


class BatchView(DashModel):
    """Progress of a batch job (``spec.batch``) and its outlook against its deadline."""

    requests_done: int = Field(description="Requests answered (output or error file).")
    requests_total: int = Field(description="Requests in the input file (0: not read yet).")
    requests_failed: int = Field(default=0, description="Requests the engine refused.")
    tokens: int = Field(default=0, description="Prompt plus completion tokens so far.")
    deadline: datetime | None = None
    projected_finish: datetime | None = Field(
        default=None, description="When the batch finishes at its observed rate."
    )
    outlook: Literal["on_track", "late", "passed", "finished", "unknown"] = Field(
        description="The projected finish against the deadline "
        "(gleaner.batch.deadline.deadline_outlook)."
    )
    margin_seconds: float | None = Field(
        default=None,
        description="Deadline minus projected finish, seconds: to spare (positive) or late "
        "(negative); for 'passed', minus the time since the deadline.",
    )
    deadline_sla: float | None = Field(
        default=None, alias="deadlineSLA", description="The SLA the deadline asks for now."
    )
    updated_at: datetime | None = Field(default=None, description="When progress was read.")


class JobView(DashModel):
    """One OfflineJob."""

    namespace: str
    name: str
    key: str = Field(description="namespace/name")
    phase: str
    message: str = ""
    node: str | None = None
    gpus: list[int] = Field(default_factory=list, description="GPU indices held.")
    planned_exit: bool = Field(
        default=False,
        description="The job's current placement is a planned exit "
        "(status.placement.plannedExit): it was placed for the quiet hours before a "
        "forecast peak, and goes back to the queue, progress kept, when its node no longer "
        "admits it over the next hour and no other node does.",
    )
    ran_on: str | None = Field(
        default=None, description="The node a finished (Succeeded or Failed) job last ran on."
    )
    ran_on_gpus: list[int] = Field(default_factory=list, description="Its GPU indices there.")
    gpu_count: int = Field(description="GPUs requested (spec.gpus).")
    sla: float
    priority: int = 0
    standalone_tokens_per_second: float | None = None
    predicted: Factors | None = None
    observed: float | None = Field(default=None, description="Last observed fraction.")
    observed_series: list[Point] = Field(default_factory=list)
    predicted_series: list[Point] = Field(
        default_factory=list,
        description="The prediction of each placement over its stay (a step line, same time "
        "axis as observedSeries).",
    )
    meets_sla: bool | None = Field(
        default=None,
        description="Observed (else predicted) does not miss the SLA (the SLA monitor's rule, "
        "with its tolerance); for a finished job, the mean of its last placement's windows.",
    )
    eviction_count: int = Field(default=0, description="SLA evictions so far.")
    move_count: int = Field(
        default=0,
        description="Moves off a node before a forecast peak so far, planned exits included "
        "(status.moveCount; not SLA evictions).",
    )
    evictions: list[JobEviction] = Field(
        default_factory=list,
        description="The job's last SLA evictions and moves, oldest first (a move has no report).",
    )
    excluded_nodes: list[str] = Field(default_factory=list)
    runner_ups: list[RunnerUp] = Field(default_factory=list)
    created_at: datetime | None = None
    decided_at: datetime | None = None
    batch: BatchView | None = Field(default=None, description="A batch job's progress.")


class ObservedView(DashModel):
    mean: float
    min: float
    last: float
    windows: int
    windows_missed: int
    window_seconds: float


class EvictionView(DashModel):
    """One SLA eviction report, with a stable id."""

    id: str = Field(description="'<namespace>.<configMap>' (stable, URL-safe).")
    namespace: str
    config_map: str
    job: str = Field(description="namespace/name of the job.")
    node: str
    gpus: list[int]
    gpu_uuids: list[str] = Field(default_factory=list, alias="gpuUUIDs")
    sla: float
    predicted: Factors
    observed: ObservedView
    reason: str
    time: datetime
    eviction_count: int
    outcome: Literal["requeued", "failed"]
    next_attempt_after: datetime | None = None
    excluded_nodes: list[str] = Field(default_factory=list)
    next_placement: str = ""


class PeriodFigures(DashModel):
    """The cluster series' means over the period they cover (the overview cards' headline,
    beside the current values, so the two never look like they disagree)."""

    start: datetime
    end: datetime
    points: int = Field(description="Points of the longest of the three series.")
    harvested_utilization: float | None = None
    offline_throughput: float | None = None
    sla_attainment: float | None = None


class ClusterSummary(DashModel):
    """Headline numbers: the current state, and ``period`` (the series' means)."""

    nodes: int = 0
    gpus: int = 0
    gpus_with_offline_job: int = 0
    mean_idle_fraction: float | None = None
    harvested_utilization: float | None = None
    offline_throughput: float | None = None
    sla_attainment: float | None = None
    sla_attainment_by_gpus: dict[int, float] = Field(
        default_factory=dict,
        description="SLA attainment of the running jobs of each size (GPUs) with a verdict, "
        "smallest first: what the pooled figure can hide.",
    )
    jobs: int = 0
    jobs_by_phase: dict[str, int] = Field(default_factory=dict)
    evictions: int = 0
    preemptions: int = 0
    reclamations: int = 0
    period: PeriodFigures | None = None


class ClusterSnapshot(DashModel):
    """The dashboard's view of a cluster (see the module docstring)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["ClusterSnapshot"] = "ClusterSnapshot"
    generated_at: datetime
    source: SourceKind
    title: str = ""
    summary: ClusterSummary = Field(default_factory=ClusterSummary)
    nodes: list[NodeView] = Field(default_factory=list)
    jobs: list[JobView] = Field(default_factory=list)
    evictions: list[EvictionView] = Field(default_factory=list)
    series: ClusterSeries = Field(default_factory=ClusterSeries)
    warnings: list[str] = Field(
        default_factory=list, description="Objects that could not be read, one line each."
    )

    def node(self, name: str) -> NodeView | None:
        return next((n for n in self.nodes if n.name == name), None)

    def job(self, namespace: str, name: str) -> JobView | None:
        return next((j for j in self.jobs if j.namespace == namespace and j.name == name), None)

    def eviction(self, report_id: str) -> EvictionView | None:
        return next((e for e in self.evictions if e.id == report_id), None)
