"""OfflineJob (namespaced, short name ``oj``): an offline LLM inference job to harvest GPUs for.

Contract (docs/api.md, "OfflineJob"): ``spec`` says what to run (a Pod template),
how many GPUs in lockstep, the throughput SLA as a fraction of standalone throughput,
and the one-time profile measured on a monopolized GPU (inline, or in a ConfigMap
named by ``profileFrom``). ``status`` is written by the operator only.

Validation lives here once: pydantic validators for Python callers, and the same
rules as OpenAPI bounds plus CEL ``x-kubernetes-validations`` in the generated CRD,
so ``kubectl apply`` and ``OfflineJob.model_validate`` refuse the same objects with
messages that name the field.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from gleaner.api.common import Condition, CustomResource, KubeModel
from gleaner.api.units import parse_duration

MAX_GPUS_PER_JOB = 8
DEFAULT_RUNNER_IMAGE = "gleaner/gleaner:0.1.0"
"""The image spec.batch runs the batch runner from unless it names one (the Gleaner image)."""
MAX_EVICTION_RECORDS = 20
DEFAULT_SLA_WINDOW = "30m"
"""The default ``spec.slaWindow``: batch throughput is judged over tens of minutes."""
SLA_WINDOW_PATTERN = r"^([1-9][0-9]?h([1-9][0-9]?m)?|[1-9][0-9]{0,3}m)$"
"""Whole minutes or hours and minutes (``30m``, ``90m``, ``2h``, ``1h30m``): a grammar both
pydantic and the API server (OpenAPI ``pattern``) check, and a subset of
:func:`gleaner.api.units.parse_duration`'s."""


class MemoryPoint(KubeModel):
    """One point of the memory–throughput curve of one GPU shard."""

    memory_gi_b: float = Field(
        alias="memoryGiB", gt=0, description="GPU memory available to the job, GiB (per GPU)."
    )
    tokens_per_second: float = Field(
        ge=0, description="Throughput with that much memory, tokens/s (whole job)."
    )


class Profile(KubeModel):
    """The one-time profile of the job on a monopolized GPU set."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.memoryCurve.all(p, p.tokensPerSecond <= "
                    "self.standaloneTokensPerSecond * 1.05)",
                    "message": "memoryCurve: tokensPerSecond must not exceed "
                    "standaloneTokensPerSecond (5% measurement tolerance)",
                    "fieldPath": ".memoryCurve",
                },
                {
                    "rule": "self.memoryCurve.map(p, p.memoryGiB).isSorted()",
                    "message": "memoryCurve: points must be sorted by memoryGiB "
                    "(memory strictly increasing)",
                    "fieldPath": ".memoryCurve",
                },
                {
                    "rule": "size(self.memoryCurve) < 2 || self.memoryCurve.all(p, "
                    "self.memoryCurve.exists_one(q, q.memoryGiB == p.memoryGiB))",
                    "message": "memoryCurve: memoryGiB values must be distinct",
                    "fieldPath": ".memoryCurve",
                },
                {
                    "rule": "size(self.memoryCurve) < 2 || self.memoryCurve.all(p, "
                    "self.memoryCurve.all(q, !(q.memoryGiB > p.memoryGiB) || "
                    "q.tokensPerSecond >= p.tokensPerSecond))",
                    "message": "memoryCurve: tokensPerSecond must not decrease as "
                    "memoryGiB increases",
                    "fieldPath": ".memoryCurve",
                },
            ]
        }
    }

    standalone_tokens_per_second: float = Field(
        gt=0, description="Throughput on monopolized GPUs (Thrput_w,max), tokens/s."
    )
    required_memory_gi_b: float = Field(
        alias="requiredMemoryGiB",
        gt=0,
        description="Memory per GPU the job needs to run at full speed (M_req), GiB.",
    )
    memory_curve: list[MemoryPoint] = Field(
        min_length=2,
        max_length=64,
        description="Throughput against memory per GPU: memoryGiB strictly increasing, "
        "tokensPerSecond non-decreasing; at least two points.",
    )
    memory_deficit_coefficient: float = Field(
        default=0.0,
        ge=0,
        description="MAC_w: tokens/s lost per GiB of expected memory deficit "
        "(recomputation after KV-cache reclamation).",
    )

    @field_validator("memory_curve")
    @classmethod
    def _curve_is_monotone(cls, curve: list[MemoryPoint]) -> list[MemoryPoint]:
        for i, (a, b) in enumerate(itertools.pairwise(curve), start=1):
            if not b.memory_gi_b > a.memory_gi_b:
                raise ValueError(
                    f"memoryCurve[{i}].memoryGiB must be greater than memoryCurve[{i - 1}]"
                    f".memoryGiB ({b.memory_gi_b} <= {a.memory_gi_b}): memory must be "
                    "strictly increasing"
                )
            if b.tokens_per_second < a.tokens_per_second:
                raise ValueError(
                    f"memoryCurve[{i}].tokensPerSecond decreases ({b.tokens_per_second} < "
                    f"{a.tokens_per_second}): throughput must not decrease with more memory"
                )
        return curve

    @model_validator(mode="after")
    def _curve_within_standalone(self) -> Self:
        limit = self.standalone_tokens_per_second * 1.05
        for i, p in enumerate(self.memory_curve):
            if p.tokens_per_second > limit:
                raise ValueError(
                    f"memoryCurve[{i}].tokensPerSecond ({p.tokens_per_second}) exceeds "
                    f"standaloneTokensPerSecond ({self.standalone_tokens_per_second})"
                )
        return self


class ProfileMeasurement(KubeModel):
    """How the operator measures a profile on submit (docs/profiling.md, "Profile on submit").

    One profiling Pod per KV-cache budget, built from the job's template, runs the job's
    engine as ``<command> bench throughput --kv-cache-memory-bytes=...`` and writes the
    run's JSON to its termination message.
    """

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.kvMinGiB < self.kvMaxGiB",
                    "message": "kvMinGiB must be less than kvMaxGiB",
                }
            ]
        }
    }

    command: list[str] = Field(
        default_factory=lambda: ["vllm"],
        min_length=1,
        max_length=8,
        description="The engine's executable in the job's image (``bench throughput`` follows).",
    )
    kv_min_gi_b: float = Field(
        default=1.0, alias="kvMinGiB", gt=0, description="Smallest KV-cache budget, GiB per GPU."
    )
    kv_max_gi_b: float = Field(
        default=16.0, alias="kvMaxGiB", gt=0, description="Largest KV-cache budget, GiB per GPU."
    )
    base_gi_b: float = Field(
        default=0.0,
        alias="baseGiB",
        ge=0,
        description="The job's memory per GPU besides the KV cache (weights, activations), "
        "GiB: memoryGiB of a point is baseGiB + its KV budget.",
    )
    runs: int = Field(default=6, ge=2, le=32, description="Runs at geometric KV budgets.")
    refine: int = Field(
        default=2, ge=0, le=16, description="Extra runs where the measured curve bends most."
    )
    input_len: int = Field(default=512, ge=1, description="Prompt tokens per request.")
    output_len: int = Field(default=128, ge=1, description="Output tokens per request.")
    num_prompts: int = Field(default=1000, ge=1, description="Requests per run.")

    @model_validator(mode="after")
    def _kv_range(self) -> Self:
        if not self.kv_min_gi_b < self.kv_max_gi_b:
            raise ValueError("kvMinGiB must be less than kvMaxGiB")
        return self


class ConfigMapProfileRef(KubeModel):
    """A profile kept in a ConfigMap of the job's namespace."""

    name: str = Field(min_length=1, max_length=253, description="ConfigMap name.")
    key: str = Field(
        default="profile.yaml",
        min_length=1,
        max_length=253,
        description="Key whose value is the profile as YAML or JSON (the fields of spec.profile).",
    )
    auto: bool = Field(
        default=False,
        description="When the ConfigMap does not exist, the operator measures the profile "
        "(profiling Pods from the job's template) and writes it there, owned by the job.",
    )
    measurement: ProfileMeasurement = Field(
        default_factory=ProfileMeasurement,
        description="How the profile is measured when auto is true.",
    )


class GpuSelector(KubeModel):
    """Where the job may run, beyond what the performance model decides."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels that must all match."
    )
    products: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Allowed GPU product names (e.g. 'NVIDIA H100 80GB HBM3'); empty: any.",
    )


class BatchSpec(KubeModel):
    """A batch of OpenAI-format requests, run by Gleaner's resumable runner (docs/batch.md)."""

    model: str = Field(
        min_length=1, max_length=512, description="Model the engine serves (its --model)."
    )
    engine_image: str = Field(
        min_length=1,
        description="Image of the engine: vLLM's OpenAI server (vllm/vllm-openai or one "
        "built from it, with the Gleaner vLLM hook).",
    )
    engine_args: list[str] = Field(
        default_factory=list, max_length=64, description="Extra arguments for the engine."
    )
    runner_image: str = Field(
        default=DEFAULT_RUNNER_IMAGE,
        min_length=1,
        description="Image holding the batch runner (the Gleaner image).",
    )
    claim_name: str = Field(
        min_length=1,
        max_length=253,
        description="PersistentVolumeClaim holding the input and the output; it outlives "
        "the job's Pods, so a restarted attempt continues where the last one stopped.",
    )
    input: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[^/].*",
        description="Path of the batch input file (OpenAI batch JSONL) in the volume.",
    )
    output: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[^/].*",
        description="Directory in the volume for output.jsonl, errors.jsonl and the checkpoint.",
    )
    deadline: datetime | None = Field(
        default=None,
        description="When every request should be answered. Gleaner raises the job's "
        "throughput SLA as needed to meet it, and the DeadlineMet condition says when it "
        "no longer can.",
    )
    concurrency: int = Field(
        default=8, ge=1, le=1024, description="Requests the runner keeps in flight."
    )
    expected_tokens_per_request: int = Field(
        default=512,
        ge=1,
        description="Prompt plus completion tokens a request is expected to take, for the "
        "deadline estimate before the first answers arrive.",
    )


class OfflineJobSpec(KubeModel):
    """What to run, on how many GPUs, at which throughput SLA, with which profile."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.profile) != has(self.profileFrom)",
                    "message": "exactly one of spec.profile and spec.profileFrom must be set",
                },
                {
                    "rule": "has(self.template) != has(self.batch)",
                    "message": "exactly one of spec.template and spec.batch must be set",
                },
            ]
        }
    }

    template: dict[str, Any] | None = Field(
        default=None,
        description="Pod template (PodTemplateSpec) of the offline inference worker. "
        "The operator creates the job's Pods from it (one per attempt) and injects the "
        "binding: nodeName, NVIDIA_VISIBLE_DEVICES, the shim and its sockets. "
        "Exactly one of template and batch.",
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "required": ["spec"],
            "properties": {
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "required": ["containers"],
                    "properties": {
                        "containers": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                                "required": ["name", "image"],
                                "properties": {
                                    "name": {"type": "string", "minLength": 1},
                                    "image": {"type": "string", "minLength": 1},
                                },
                            },
                        }
                    },
                },
            },
        },
    )
    gpus: int = Field(
        default=1, ge=1, le=MAX_GPUS_PER_JOB, description="GPUs per job, run in lockstep (1-8)."
    )
    throughput_sla: float = Field(
        alias="throughputSLA",
        gt=0,
        le=1,
        description="Required fraction (0, 1] of the job's standalone throughput.",
    )
    sla_window: str = Field(
        default=DEFAULT_SLA_WINDOW,
        alias="slaWindow",
        pattern=SLA_WINDOW_PATTERN,
        max_length=8,
        description="The span the throughput SLA is judged over, in whole minutes or hours "
        f"(e.g. 30m, 90m, 1h30m; default {DEFAULT_SLA_WINDOW}): a window meets the SLA when "
        "the job's mean throughput fraction over it does (docs/api.md).",
    )
    batch: BatchSpec | None = Field(
        default=None,
        description="Instead of a template: a batch of OpenAI-format requests that Gleaner "
        "runs with its engine and resumable runner (docs/batch.md).",
    )
    profile: Profile | None = Field(default=None, description="The one-time profile, inline.")
    profile_from: ConfigMapProfileRef | None = Field(
        default=None, description="The one-time profile, from a ConfigMap (instead of profile)."
    )
    gpu_selector: GpuSelector | None = Field(
        default=None, description="Node labels and GPU products the job may use."
    )
    priority: int = Field(
        default=0,
        ge=-1000,
        le=1000,
        description="Higher is placed first among jobs of the same size.",
    )
    max_evictions: int = Field(
        default=3,
        ge=0,
        le=100,
        description="SLA evictions before the job gives up as Failed.",
    )

    @model_validator(mode="before")
    @classmethod
    def _template_or_batch(cls, data: Any) -> Any:
        # Checked before the fields, so a spec that gives neither is told so first (the
        # field errors of a spec with nothing to run are beside the point).
        if isinstance(data, dict):
            given = [k for k in ("template", "batch") if data.get(k) is not None]
            if len(given) != 1:
                raise ValueError("exactly one of spec.template and spec.batch must be set")
        return data

    @property
    def sla_window_seconds(self) -> float:
        """``slaWindow`` in seconds."""
        return parse_duration(self.sla_window)

    @field_validator("template")
    @classmethod
    def _template_has_containers(cls, template: dict[str, Any] | None) -> dict[str, Any] | None:
        if template is None:
            return None
        spec = template.get("spec")
        if not isinstance(spec, dict):
            raise ValueError("template.spec is required (a PodSpec)")
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError("template.spec.containers must list at least one container")
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name") or not c.get("image"):
                raise ValueError(f"template.spec.containers[{i}] needs a name and an image")
        return template

    @model_validator(mode="after")
    def _one_profile_source(self) -> Self:
        if (self.profile is None) == (self.profile_from is None):
            raise ValueError("exactly one of spec.profile and spec.profileFrom must be set")
        return self


class Phase(StrEnum):
    """The OfflineJob phase machine (docs/api.md draws it)."""

    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    EVICTED = "Evicted"
    UNSCHEDULABLE = "Unschedulable"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class ConditionType(StrEnum):
    """Condition types an OfflineJob carries."""

    VALID = "Valid"
    SCHEDULED = "Scheduled"
    READY = "Ready"
    SLA_MET = "SLAMet"
    DEADLINE_MET = "DeadlineMet"
    PROFILED = "Profiled"


class Placement(KubeModel):
    """Where the job runs and what the model predicted for that place."""

    node: str = Field(description="Node name.")
    gpu_indices: list[int] = Field(description="GPU indices on the node.")
    gpu_uuids: list[str] = Field(
        default_factory=list, alias="gpuUUIDs", description="GPU UUIDs (NVIDIA_VISIBLE_DEVICES)."
    )
    compute: float = Field(ge=0, le=1, description="Predicted P_compute.")
    memory: float = Field(ge=0, le=1, description="Predicted P_memory.")
    multi_gpu: float = Field(alias="multiGPU", ge=0, le=1, description="Predicted P_multi.")
    throughput_fraction: float = Field(
        ge=0, le=1, description="Predicted product (fraction of standalone throughput)."
    )
    predicted_tokens_per_second: float | None = Field(
        default=None, ge=0, description="throughputFraction x standaloneTokensPerSecond."
    )
    decided_at: datetime = Field(description="When the scheduler decided this placement.")
    planned_exit: bool = Field(
        default=False,
        description="Placed by the planned exit's shorter admission pass (a large job no "
        "node admitted over the admission horizon): the job leaves this node for the queue, "
        "progress kept, when the node no longer admits it over the next hour and no other "
        "node does.",
    )


class Observed(KubeModel):
    """Throughput seen by the SLA monitor."""

    throughput_fraction: float = Field(ge=0, description="Observed fraction over the window.")
    window_seconds: float = Field(gt=0, description="Length of the window.")
    tokens_per_second: float | None = Field(
        default=None, ge=0, description="Observed throughput, tokens/s."
    )
    updated_at: datetime | None = Field(default=None, description="When it was last measured.")


class LeaveType(StrEnum):
    """How a job left a placement (``status.evictions[].type``)."""

    SLA_EVICTION = "SLAEviction"
    """The SLA monitor evicted it: counted toward maxEvictions, with a full report."""
    MOVE = "Move"
    """Moved off its node before a forecast peak, placed again at once."""
    PLANNED_EXIT = "PlannedExit"
    """Left by its planned exit for the queue, its progress kept."""


class EvictionRecord(KubeModel):
    """One SLA eviction or move, as kept in status (an eviction's full report is a separate
    object)."""

    time: datetime = Field(description="When the job was evicted.")
    node: str = Field(description="The node it was evicted from.")
    gpu_indices: list[int] = Field(default_factory=list, description="The GPUs it held there.")
    reason: str = Field(description="Why it was evicted, human-readable.")
    sla: float = Field(gt=0, le=1, description="The job's throughputSLA at the time.")
    predicted_throughput_fraction: float = Field(
        ge=0, le=1, description="What the model predicted for that placement."
    )
    observed_throughput_fraction: float = Field(
        ge=0, description="What the SLA monitor observed before evicting."
    )
    report: str | None = Field(
        default=None, description="Name of the ConfigMap that holds the full eviction report."
    )
    type: LeaveType = Field(
        default=LeaveType.SLA_EVICTION,
        description="SLAEviction: the SLA monitor evicted the job; Move: moved before a "
        "forecast peak; PlannedExit: left by its planned exit for the queue. Records written "
        "before this field existed read as SLAEviction.",
    )


class BatchProgress(KubeModel):
    """How far a spec.batch job is, and what its deadline asks (written by the operator)."""

    requests_total: int = Field(default=0, ge=0, description="Requests in the input file.")
    requests_done: int = Field(
        default=0, ge=0, description="Requests answered (output or error file)."
    )
    requests_failed: int = Field(
        default=0, ge=0, description="Requests the engine refused (error file)."
    )
    tokens: int = Field(default=0, ge=0, description="Prompt plus completion tokens so far.")
    summary: str = Field(default="", description="requestsDone/requestsTotal, for kubectl.")
    deadline_sla: float | None = Field(
        default=None,
        alias="deadlineSLA",
        gt=0,
        le=1,
        description="The throughput SLA the deadline asks for now (never lowered while the "
        "job runs); the job is placed and monitored at the larger of it and throughputSLA.",
    )
    required_fraction: float | None = Field(
        default=None,
        ge=0,
        description="Remaining tokens over the remaining standalone capacity before the "
        "deadline (above 1: the deadline cannot be met).",
    )
    projected_finish: datetime | None = Field(
        default=None, description="When the batch finishes at the observed rate."
    )
    updated_at: datetime | None = Field(default=None, description="When progress was read.")


class OfflineJobStatus(KubeModel):
    """What the operator decided and observed; written by the operator only."""

    model_config = KubeModel.model_config | {"extra": "ignore"}

    phase: Phase = Field(default=Phase.PENDING, description="Where the job is in its lifecycle.")
    message: str = Field(default="", description="Human-readable summary of the phase.")
    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation the status was computed for."
    )
    placement: Placement | None = Field(
        default=None, description="The current placement; absent while not placed."
    )
    observed: Observed | None = Field(
        default=None, description="Throughput the SLA monitor observed for the current placement."
    )
    evictions: list[EvictionRecord] = Field(
        default_factory=list,
        max_length=MAX_EVICTION_RECORDS,
        description=f"The last {MAX_EVICTION_RECORDS} SLA evictions and moves before a "
        "forecast peak, oldest first.",
    )
    eviction_count: int = Field(default=0, ge=0, description="Total SLA evictions so far.")
    move_count: int = Field(
        default=0,
        ge=0,
        description="Moves off a node before a forecast peak so far (not counted as SLA "
        "evictions).",
    )
    profiling_attempts: int = Field(
        default=0,
        ge=0,
        description="Profile-on-submit attempts ended so far (failed, or replaced because "
        "the job's image changed).",
    )
    excluded_nodes: list[str] = Field(
        default_factory=list,
        description="Nodes the job missed its SLA on or was moved away from; not retried there.",
    )
    next_attempt_after: datetime | None = Field(
        default=None, description="Backoff: no placement attempt before this time."
    )
    pods: list[str] = Field(default_factory=list, description="Names of the job's Pods.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Valid, Scheduled, Ready, SLAMet, Profiled (a job profiled on submit) "
        "and, for a batch with a deadline, DeadlineMet (docs/api.md).",
    )
    batch: BatchProgress | None = Field(
        default=None, description="Progress of a spec.batch job (docs/batch.md)."
    )

    @property
    def attempt(self) -> int:
        """The number of the job's next (or current) Pod: one per placement after an SLA
        eviction or a move."""
        return self.eviction_count + self.move_count


class OfflineJob(CustomResource):
    """An offline LLM inference job that runs on the idle capacity of online GPUs."""

    KIND: ClassVar[str] = "OfflineJob"
    PLURAL: ClassVar[str] = "offlinejobs"

    kind: str = "OfflineJob"
    spec: OfflineJobSpec
    status: OfflineJobStatus = Field(default_factory=OfflineJobStatus)

    @property
    def effective_throughput_sla(self) -> float:
        """The SLA the job is placed and monitored at: spec.throughputSLA, raised to what a
        batch deadline asks for (status.batch.deadlineSLA)."""
        deadline = self.status.batch.deadline_sla if self.status.batch else None
        return max(self.spec.throughput_sla, deadline or 0.0)
