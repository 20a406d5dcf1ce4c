"""NodeTrace (cluster-scoped, one per GPU node, named after the node): what the node's agent saw.

Contract (docs/api.md, "NodeTrace"): the status summarizes one window of the node's
online load in *seconds and counts* rather than ratios, so that two windows merge by
addition and the scheduler never rescans raw samples:

- per GPU: offline-enabled (timeslice) seconds, online-busy seconds, preemptions,
  reclamations, online requests;
- per GPU pair: busy-overlap and busy-union seconds (P_multi = overlap / union);
- ``memory``: a sparse *joint* histogram of harvestable memory. Each state is the
  vector of free GiB of every GPU (inventory order), floored to ``stepGiB``, with the
  seconds the node spent in it. Marginals give per-GPU distributions; the minimum
  over any GPU subset gives the tightest-GPU memory M(t) a multi-GPU job sees, so
  E[f(M)] is exact up to the quantization step (floor: never optimistic).

- per GPU, ``uninstrumentedProcesses``: the processes on it that no connected shim accounts
  for now (its offline gate is held closed), and ``uninstrumentedGuard``: whether the node
  enforces that hold or opted out (docs/agent.md, "Uninstrumented processes").

Only the node's agent writes it (or the simulator); the operator and scheduler read it.
``status.lastReportTime`` lets readers tell a stale trace from a live one.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import Field, computed_field, model_validator

from gleaner.api.common import Condition, CustomResource, KubeModel

MAX_GPUS_PER_NODE = 16
MAX_MEMORY_STATES = 4096
HOURS_PER_DAY = 24
MAX_HOUR_MEMORY_STATES = 128
"""Most states of one hour's memory sketch (the step coarsens to fit), so ``hours`` stays
small; nodes of more than 8 GPUs keep fewer (:func:`hour_memory_states`)."""
HOUR_MEMORY_NUMBERS = 1024
"""Most free-GiB numbers (states x GPUs) of one hour's memory sketch."""


def hour_memory_states(gpus: int) -> int:
    """Most states of one hour's memory sketch on a node of ``gpus`` GPUs: 128 up to 8
    GPUs, 64 for 16."""
    return min(MAX_HOUR_MEMORY_STATES, max(1, HOUR_MEMORY_NUMBERS // max(1, gpus)))


class TraceSource(StrEnum):
    AGENT = "agent"
    SIMULATED = "simulated"
    FILE = "file"
    PROMETHEUS = "prometheus"


class GpuInfo(KubeModel):
    """One GPU of the node's inventory."""

    index: int = Field(ge=0, lt=MAX_GPUS_PER_NODE, description="GPU index on the node.")
    uuid: str = Field(min_length=1, description="GPU UUID (GPU-xxxxxxxx-...).")
    product: str = Field(default="", description="GPU product name.")
    memory_gi_b: float = Field(alias="memoryGiB", gt=0, description="Total GPU memory, GiB.")


@functools.lru_cache(maxsize=1 << 16)  # the cluster simulator asks again every step
def gpu_uuid(node: str, index: int) -> str:
    """The UUID of GPU ``index`` of ``node`` where no hardware gives one (simulated GPUs,
    test clusters): ``GPU-`` and the name-based (version 5) UUID of
    ``<index>.<node>.gleaner.dev``. The same node and index give the same UUID in the
    agent's simulated backend, the cluster simulator and the test harnesses."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{index}.{node}.gleaner.dev')}"


class TraceWindow(KubeModel):
    """The time window a NodeTrace summarizes."""

    start: datetime = Field(description="Start of the summarized window.")
    end: datetime = Field(description="End of the summarized window.")
    seconds: float = Field(gt=0, description="Seconds of samples in the window.")


class UninstrumentedGuard(StrEnum):
    """Whether the node's agent holds GPUs with uninstrumented processes closed."""

    ENFORCED = "Enforced"
    OPTED_OUT = "OptedOut"


class UninstrumentedProcess(KubeModel):
    """A process on a GPU that no connected Gleaner shim accounts for."""

    pid: int = Field(ge=0, description="Its pid (the node's pid namespace).")
    pod: str = Field(
        default="",
        description="namespace/name of its pod ('uid <uid>' when only the UID is known; "
        "empty when it is no pod's).",
    )
    reason: str = Field(
        default="unknown",
        description="unknown (no shim connected with its pid), silent (online shim sent "
        "nothing for too long), disconnected (online shim's connection closed) or unshimmed "
        "(the kubelet says the pod holds the GPU and no live online shim names it; pid 0).",
    )

    def describe(self) -> str:
        """``pod ns/name``, or ``pid N`` when the pod is not known."""
        return f"pod {self.pod}" if self.pod else f"pid {self.pid}"


class GpuTrace(KubeModel):
    """What one GPU did over the window, in seconds and counts (windows merge by addition)."""

    index: int = Field(ge=0, lt=MAX_GPUS_PER_NODE, description="GPU index on the node.")
    offline_enabled_seconds: float = Field(
        ge=0, description="Seconds offline channels were enabled (timeslices for offline work)."
    )
    online_busy_seconds: float = Field(ge=0, description="Seconds the online workload was busy.")
    preemptions: int = Field(default=0, ge=0, description="Offline preemptions (gate closes).")
    online_requests: int = Field(default=0, ge=0, description="Online requests seen.")
    max_preemptions_per_request: int = Field(
        default=0, ge=0, description="Most preemptions any one online request caused."
    )
    reclamations: int = Field(default=0, ge=0, description="Memory reclamation events.")
    reclaimed_bytes: int = Field(default=0, ge=0, description="Bytes reclaimed from offline.")
    offline_job: str | None = Field(
        default=None, description="namespace/name of the offline job on this GPU, if any."
    )
    uninstrumented_processes: list[UninstrumentedProcess] | None = Field(
        default=None,
        max_length=64,
        description="Processes on this GPU no connected shim accounts for, at the report "
        "(its offline gate is held closed unless the node opted out).",
    )


class GpuPair(KubeModel):
    """Online busy-time overlap of two GPUs of the node (P_multi = overlap / union)."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.gpuA < self.gpuB",
                    "message": "gpuA must be less than gpuB",
                    "fieldPath": ".gpuA",
                },
                {
                    "rule": "self.overlapSeconds <= self.unionSeconds + 0.000001",
                    "message": "overlapSeconds cannot exceed unionSeconds",
                    "fieldPath": ".overlapSeconds",
                },
            ]
        }
    }

    gpu_a: int = Field(ge=0, lt=MAX_GPUS_PER_NODE, description="The lower GPU index.")
    gpu_b: int = Field(ge=0, lt=MAX_GPUS_PER_NODE, description="The higher GPU index.")
    overlap_seconds: float = Field(ge=0, description="Seconds both GPUs were busy online.")
    union_seconds: float = Field(ge=0, description="Seconds at least one was busy online.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.gpu_a >= self.gpu_b:
            raise ValueError(f"gpuA ({self.gpu_a}) must be less than gpuB ({self.gpu_b})")
        if self.overlap_seconds > self.union_seconds + 1e-6:
            raise ValueError("overlapSeconds cannot exceed unionSeconds")
        return self


class MemoryState(KubeModel):
    """One state of the joint harvestable-memory histogram."""

    free_gi_b: list[float] = Field(
        alias="freeGiB",
        max_length=MAX_GPUS_PER_NODE,
        description="Harvestable GiB per GPU (inventory order), floored to stepGiB.",
    )
    seconds: float = Field(gt=0, description="Seconds spent in this state.")


class MemorySketch(KubeModel):
    """Sparse joint histogram of harvestable memory over the node's GPUs."""

    step_gi_b: float = Field(
        alias="stepGiB", gt=0, description="Quantization step; the error bound of E[f(M)]."
    )
    states: list[MemoryState] = Field(
        default_factory=list,
        max_length=MAX_MEMORY_STATES,
        description="The states seen and the seconds spent in each.",
    )


class HourSummary(KubeModel):
    """One hour of the day (UTC) of the node's history: the same seconds and counts as the
    status's window, summed over the days observed (older days weigh less)."""

    hour: int = Field(ge=0, lt=HOURS_PER_DAY, description="Hour of the day, UTC (0-23).")
    window: TraceWindow = Field(
        description="Seconds of that hour observed (after down-weighting older days); start "
        "and end span the days folded in."
    )
    per_gpu: list[GpuTrace] = Field(
        default_factory=list,
        alias="perGPU",
        max_length=MAX_GPUS_PER_NODE,
        description="Per-GPU seconds and counts in that hour.",
    )
    pairs: list[GpuPair] = Field(
        default_factory=list,
        max_length=120,
        description="Per GPU pair (gpuA < gpuB): online busy overlap and union seconds.",
    )
    memory: MemorySketch | None = Field(
        default=None,
        description=f"Harvestable-memory joint histogram in that hour (at most "
        f"{MAX_HOUR_MEMORY_STATES} states, {HOUR_MEMORY_NUMBERS} // GPUs on nodes of more "
        "than 8 GPUs; half that in weekendHours).",
    )
    days: int | None = Field(
        default=None,
        ge=1,
        description="Days folded into this entry (weekendHours: weekend days; the scheduler "
        "uses a weekend hour once it holds enough of them).",
    )


class NodeTraceSpec(KubeModel):
    """Which node the trace describes (the object is named after it, too)."""

    node_name: str = Field(default="", description="The node this trace describes.")


class NodeTraceStatus(KubeModel):
    """The node's GPUs and what they did over the last window; written by its agent."""

    model_config = KubeModel.model_config | {"extra": "ignore"}

    source: TraceSource = Field(default=TraceSource.AGENT, description="Who produced the trace.")
    agent_version: str = Field(default="", description="Version of the reporting agent.")
    last_report_time: datetime | None = Field(
        default=None, description="When the agent last reported; old means stale."
    )
    gpus: list[GpuInfo] = Field(
        default_factory=list, max_length=MAX_GPUS_PER_NODE, description="GPU inventory."
    )
    window: TraceWindow | None = Field(default=None, description="The summarized window.")
    per_gpu: list[GpuTrace] = Field(
        default_factory=list,
        alias="perGPU",
        max_length=MAX_GPUS_PER_NODE,
        description="Per-GPU seconds and counts over the window.",
    )
    pairs: list[GpuPair] = Field(
        default_factory=list,
        max_length=120,
        description="Per GPU pair (gpuA < gpuB): online busy overlap and union seconds.",
    )
    memory: MemorySketch | None = Field(
        default=None, description="Harvestable-memory distribution (joint histogram)."
    )
    idle_fraction: float | None = Field(
        default=None, ge=0, le=1, description="Mean offline-usable fraction over the node's GPUs."
    )
    harvestable_memory_p10_gi_b: float | None = Field(
        default=None,
        alias="harvestableMemoryP10GiB",
        ge=0,
        description="10th percentile of the node's per-GPU harvestable memory, GiB.",
    )
    hours: list[HourSummary] | None = Field(
        default=None,
        max_length=HOURS_PER_DAY,
        description="Where agents before NodeHistory kept the node's history by hour of the "
        "day; today's agents move it to the node's NodeHistory and clear it here.",
    )
    offline_jobs: int = Field(default=0, ge=0, description="Offline jobs running on the node.")
    uninstrumented_guard: UninstrumentedGuard | None = Field(
        default=None,
        description="Enforced: GPUs with uninstrumented processes are held closed; OptedOut: "
        "the node opted out (they are reported only). Unset: the agent does not check.",
    )
    conditions: list[Condition] = Field(default_factory=list, description="Agent conditions.")

    def uninstrumented_gpus(self) -> dict[int, UninstrumentedProcess]:
        """GPU index → its first uninstrumented process, for GPUs the scheduler must avoid
        (none when the node opted out)."""
        if self.uninstrumented_guard == UninstrumentedGuard.OPTED_OUT:
            return {}
        return {g.index: g.uninstrumented_processes[0] for g in self.per_gpu
                if g.uninstrumented_processes}  # fmt: skip

    @computed_field(  # type: ignore[prop-decorator]
        alias="gpuCount", description="Number of GPUs in the inventory (derived from gpus)."
    )
    @property
    def gpu_count(self) -> int:
        """Derived, written with the status so ``kubectl get nt`` can show it."""
        return len(self.gpus)


def without_hours(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A NodeTrace as the API server returns it, less ``status.hours`` (and the
    ``weekendHours`` a reader joined from the node's NodeHistory), for the readers that do
    not forecast: validating 24 hours costs many times the rest of the status (docs/
    benchmarks.md, "Hours of the day")."""
    status = obj.get("status")
    if not isinstance(status, Mapping) or not ("hours" in status or "weekendHours" in status):
        return dict(obj)
    dropped = ("hours", "weekendHours")
    return {**obj, "status": {k: v for k, v in status.items() if k not in dropped}}


class NodeTrace(CustomResource):
    """What one GPU node's agent saw: GPU inventory and a window of online load."""

    KIND: ClassVar[str] = "NodeTrace"
    PLURAL: ClassVar[str] = "nodetraces"

    kind: str = "NodeTrace"
    spec: NodeTraceSpec = Field(default_factory=NodeTraceSpec)
    status: NodeTraceStatus = Field(default_factory=NodeTraceStatus)


class NodeHistoryStatus(KubeModel):
    """The node's history by hour of the day, and the GPU inventory it was recorded on."""

    model_config = KubeModel.model_config | {"extra": "ignore"}

    gpus: list[GpuInfo] = Field(
        default_factory=list,
        max_length=MAX_GPUS_PER_NODE,
        description="GPU inventory of the node when the hours were written.",
    )
    hours: list[HourSummary] | None = Field(
        default=None,
        max_length=HOURS_PER_DAY,
        description="The node's history by hour of the day (UTC), at most one entry per hour; "
        "the scheduler forecasts the hours a job will run from it. Written when an hour "
        "completes; kept across agent restarts.",
    )
    weekend_hours: list[HourSummary] | None = Field(
        default=None,
        max_length=HOURS_PER_DAY,
        description="The node's history by hour of the day (UTC) on Saturdays and Sundays "
        "only, at most one entry per hour, each with the weekend days folded into it; the "
        "scheduler forecasts a weekend hour from it once it holds enough days, else from hours.",
    )


class NodeHistory(CustomResource):
    """One GPU node's history by hour of the day, kept by its agent (named after the node).

    Apart from the NodeTrace so that the reports every 15 s, which every NodeTrace watcher
    receives whole, do not carry the hours, which change once an hour."""

    KIND: ClassVar[str] = "NodeHistory"
    PLURAL: ClassVar[str] = "nodehistories"

    kind: str = "NodeHistory"
    spec: NodeTraceSpec = Field(default_factory=NodeTraceSpec)
    status: NodeHistoryStatus = Field(default_factory=NodeHistoryStatus)
