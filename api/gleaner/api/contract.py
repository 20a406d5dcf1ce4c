"""Kubernetes-level contract names: labels, annotations, the finalizer and the SLA records
the operator, the runtime agent, the dashboard and the CLI share.

Contract. Every name and format below is declared here once; every other module imports
it (docs/api.md, "Contract names", lists who writes and who reads each). Node-level names
(environment variables, socket and shim paths) live in :mod:`gleaner.protocol.node`, which
the vLLM hook can import; the ones the operator writes into Pods are re-exported here, never
redeclared.

- Offline Pods carry ``LABEL_JOB``, ``LABEL_ROLE`` = ``ROLE_OFFLINE``, ``LABEL_ATTEMPT`` and
  the annotation ``ANNOTATION_GPUS`` (comma-separated node GPU indices: written by
  :func:`gpus_annotation`, read only by :func:`parse_gpus_annotation`).
- Online Pods opt in with ``LABEL_ROLE`` = ``ROLE_ONLINE`` (``ONLINE_SELECTOR``) on the
  Pod or on its Namespace (then ``ROLE_EXEMPT`` on a Pod opts it out); the admission
  webhook instruments them and annotates them ``ANNOTATION_INJECTED``.
- OfflineJobs carry the finalizer ``FINALIZER`` and the annotation
  ``ANNOTATION_SLA_WINDOWS``: a :class:`SlaWindows` document, parsed only by
  :meth:`SlaWindows.parse`.
- Each SLA eviction is stored in a ConfigMap labelled ``LABEL_REPORT`` =
  ``REPORT_SLA_EVICTION`` and ``LABEL_JOB``, the :class:`EvictionReportDocument` as JSON
  under ``REPORT_KEY``; :meth:`EvictionReportDocument.parse` is its one reader.
- The operator's bias table is the ConfigMap ``BIAS_CONFIGMAP`` in its state namespace, its
  JSON under ``BIAS_KEY`` (``gleaner.scheduler.bias.from_configmap`` is its one reader).

Pure: pydantic and the standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
)

from gleaner.api.common import GROUP
from gleaner.protocol.node import (
    ENV_JOB,
    ENV_ROLE,
    ENV_SHIM_PATH,
    ENV_SOCKET,
    ROLE_OFFLINE,
    ROLE_ONLINE,
    SHIM_DIR,
    SHIM_PATH,
    SOCKET_DIR,
    SOCKET_PATH,
)

__all__ = [
    "ANNOTATION_BATCH_API",
    "ANNOTATION_GPUS",
    "ANNOTATION_INJECTED",
    "ANNOTATION_PLACEMENT",
    "ANNOTATION_PROFILE_FIT",
    "ANNOTATION_PROFILE_GPU_TIME",
    "ANNOTATION_PROFILE_IMAGE",
    "ANNOTATION_PROFILE_KV_GIB",
    "ANNOTATION_SLA_WINDOWS",
    "BIAS_CONFIGMAP",
    "BIAS_KEY",
    "ENV_GATE_LIBRARY",
    "ENV_JOB",
    "ENV_OPERATOR_BIND_DELAY",
    "ENV_ROLE",
    "ENV_SHIM_PATH",
    "ENV_SOCKET",
    "EVICTION_REPORT_SELECTOR",
    "FINALIZER",
    "KOPF_ANNOTATION_PREFIX",
    "KOPF_FINALIZER",
    "KUBELET_POD_RESOURCES_DIR",
    "KUBELET_POD_RESOURCES_SOCKET",
    "LABEL_ATTEMPT",
    "LABEL_BATCH_API",
    "LABEL_JOB",
    "LABEL_JOB_CLASS",
    "LABEL_PROFILE",
    "LABEL_PROFILING_POOL",
    "LABEL_PROFILING_RUN",
    "LABEL_REPORT",
    "LABEL_ROLE",
    "OFFLINE_SELECTOR",
    "ONLINE_SELECTOR",
    "REPORT_KEY",
    "REPORT_SLA_EVICTION",
    "REPORT_VERSION",
    "ROLE_EXEMPT",
    "ROLE_OFFLINE",
    "ROLE_ONLINE",
    "SHIM_DIR",
    "SHIM_PATH",
    "SOCKET_DIR",
    "SOCKET_PATH",
    "EvictionReportDocument",
    "ObservedSummaryDocument",
    "PredictedFactorsDocument",
    "SlaWindows",
    "eviction_report_data",
    "eviction_report_labels",
    "eviction_report_name",
    "gpus_annotation",
    "is_eviction_report",
    "job_selector",
    "parse_gpus_annotation",
    "rfc3339",
]

_PREFIX = f"{GROUP}/"

# --- Offline Pods (written by the operator; read by the operator and the runtime agent) ---
LABEL_JOB: Final = f"{_PREFIX}job"
"""The OfflineJob's name, on its Pods and on its eviction-report ConfigMaps."""
LABEL_ROLE: Final = f"{_PREFIX}role"
"""``ROLE_OFFLINE`` on every Pod the operator makes."""
LABEL_ATTEMPT: Final = f"{_PREFIX}attempt"
"""The attempt number (the job's eviction count when the Pod was made)."""
ANNOTATION_GPUS: Final = f"{_PREFIX}gpus"
"""Comma-separated node GPU indices the Pod holds."""
ANNOTATION_PLACEMENT: Final = f"{_PREFIX}placement"
"""The placement the Pod was made for, as JSON: ``placement`` (the job's
``status.placement``), ``why`` (the scheduler's reasons, for the ``Scheduled`` condition)
and ``generation`` (the job's ``metadata.generation`` the placement was decided for). The
operator records it in the job's status once the Pod exists; after a restart it reads it
back from here (docs/architecture.md, "Binding")."""
OFFLINE_SELECTOR: Final = f"{LABEL_ROLE}={ROLE_OFFLINE}"
"""Label selector of every offline Pod the operator made."""

# --- Online Pods (opt-in read by the admission webhook, docs/operator.md "Webhook") ---------
ONLINE_SELECTOR: Final = f"{LABEL_ROLE}={ROLE_ONLINE}"
"""On a Pod: it opts in to the online instrumentation, in any namespace. On a Namespace:
every Pod created there opts in, except offline Pods and Pods labelled ``ROLE_EXEMPT``."""
ROLE_EXEMPT: Final = "exempt"
"""``LABEL_ROLE`` value of a Pod in an opted-in Namespace that must not be instrumented."""
ANNOTATION_INJECTED: Final = f"{_PREFIX}injected"
"""Written by the webhook on every Pod it instrumented: the role it injected."""

# --- OfflineJobs ----------------------------------------------------------------------------
FINALIZER: Final = f"{_PREFIX}finalizer"
"""Finalizer the operator puts on OfflineJobs so deleting one first deletes its Pods."""
KOPF_FINALIZER: Final = f"kopf.{GROUP}/unused"
"""kopf's own finalizer name: not ``FINALIZER`` (kopf strips its name from objects no kopf
handler needs it on); no handler of the operator makes kopf add it."""
KOPF_ANNOTATION_PREFIX: Final = GROUP
"""Prefix of kopf's progress/diff-base annotations on the operator's objects."""
ANNOTATION_SLA_WINDOWS: Final = f"{_PREFIX}sla-windows"
"""The SLA monitor's observed windows of the current placement (:class:`SlaWindows`)."""
ANNOTATION_BATCH_API: Final = f"{_PREFIX}batch-api"
"""On an OfflineJob the Batch API created: the URL of its batch for the runner (remote
mode: the input is fetched from it, the results uploaded to it; docs/batch.md)."""
LABEL_BATCH_API: Final = f"{_PREFIX}batch-api"
"""``"true"`` on every OfflineJob the Batch API created."""
LABEL_JOB_CLASS: Final = f"{_PREFIX}job-class"
"""Optional user label of an OfflineJob: its class in the scheduler's queue order."""

# --- SLA eviction reports (written by the operator; read by the CLI and the dashboard) -----
LABEL_REPORT: Final = f"{_PREFIX}report"
REPORT_SLA_EVICTION: Final = "sla-eviction"
"""The value of ``LABEL_REPORT`` on an SLA eviction report."""
REPORT_KEY: Final = "report.json"
"""The ConfigMap data key holding the report's JSON."""
EVICTION_REPORT_SELECTOR: Final = f"{LABEL_REPORT}={REPORT_SLA_EVICTION}"
REPORT_VERSION: Final = 1
"""``version`` of the report documents this code writes."""

# --- The operator's learned prediction corrections (written by the operator) --------------
BIAS_CONFIGMAP: Final = "gleaner-bias"
"""The ConfigMap in the operator's state namespace that holds its bias table."""
BIAS_KEY: Final = "bias.json"
"""Its data key: the table's JSON (``gleaner.scheduler.bias.BiasTable.to_json``)."""

# --- Profiles (written by `gleaner profile`; docs/profiling.md) ---------------------------
LABEL_PROFILE: Final = f"{_PREFIX}profile"
"""On a profile ConfigMap: the model it was measured for (a label value)."""
LABEL_PROFILING_RUN: Final = f"{_PREFIX}profiling-run"
"""On a profiling Pod (profile on submit): ``<attempt>-<index>``; such Pods measure, they
never move the job's phase."""
LABEL_PROFILING_POOL: Final = f"{_PREFIX}profiling-pool"
"""On a profiling Pod placed on the dedicated profiling node pool: ``"true"`` (its GPU was
its own: its run is not corrected for shared GPU time)."""
ANNOTATION_PROFILE_KV_GIB: Final = f"{_PREFIX}profile-kv-gib"
"""On a profiling Pod: the KV-cache budget of its run, GiB per GPU."""
ANNOTATION_PROFILE_GPU_TIME: Final = f"{_PREFIX}profile-gpu-time"
"""On a profiling Pod run on a shared GPU: the agent's accounting of its run so far, JSON
(``wallSeconds`` covered by the node agent's reports, ``offlineSeconds`` of them with the
gate open, ``through`` = the end of the last report counted)."""
ANNOTATION_PROFILE_FIT: Final = f"{_PREFIX}profile-fit"
"""On a measured profile ConfigMap: goodness of fit and runs, JSON."""
ANNOTATION_PROFILE_IMAGE: Final = f"{_PREFIX}profile-image"
"""On a measured profile ConfigMap: the engine image it was measured with; a job with
``profileFrom.auto`` that runs another image has it measured again."""

# --- The kubelet's side of a node -------------------------------------------------------------
KUBELET_POD_RESOURCES_DIR: Final = "/var/lib/kubelet/pod-resources"
"""The kubelet's PodResources API directory; the agent mounts it read-only (docs/agent.md)."""
KUBELET_POD_RESOURCES_SOCKET: Final = f"{KUBELET_POD_RESOURCES_DIR}/kubelet.sock"
"""Its gRPC socket: which pod and container holds which device ids."""

# --- The agent's process environment ---------------------------------------------------------
ENV_GATE_LIBRARY: Final = "GLEANER_GATE_LIBRARY"
"""A path to the native compute gate library (``libgleaner_gate.so``) to load instead of the
one the installed package carries (docs/agent.md)."""

# --- The operator's process environment (test-only knobs) ----------------------------------
ENV_OPERATOR_BIND_DELAY: Final = "GLEANER_OPERATOR_BIND_DELAY"
"""Seconds the operator holds a placement's status write back after creating its Pod."""


def gpus_annotation(indices: Iterable[int]) -> str:
    """The value of ``ANNOTATION_GPUS`` for these node GPU indices."""
    return ",".join(str(i) for i in indices)


def parse_gpus_annotation(value: str | None) -> list[int] | None:
    """The node GPU indices in an ``ANNOTATION_GPUS`` value; None when it is absent, empty
    or malformed (a part that is not a non-negative decimal integer)."""
    parts = [part.strip() for part in (value or "").split(",") if part.strip()]
    if not parts or not all(part.isascii() and part.isdigit() for part in parts):
        return None
    return [int(part) for part in parts]


def job_selector(job_name: str) -> str:
    """Label selector of one job's offline Pods."""
    return f"{LABEL_JOB}={job_name},{OFFLINE_SELECTOR}"


def eviction_report_name(job_name: str, eviction_number: int) -> str:
    """Name of the ConfigMap holding a job's ``eviction_number``-th eviction report."""
    return f"{job_name}-{REPORT_SLA_EVICTION}-{eviction_number}"


def eviction_report_labels(job_name: str) -> dict[str, str]:
    """The labels of a job's eviction-report ConfigMap."""
    return {LABEL_REPORT: REPORT_SLA_EVICTION, LABEL_JOB: job_name}


def is_eviction_report(labels: Mapping[str, str] | None) -> bool:
    """Whether a ConfigMap's labels mark it as an SLA eviction report."""
    return (labels or {}).get(LABEL_REPORT) == REPORT_SLA_EVICTION


def eviction_report_data(report: Mapping[str, Any]) -> dict[str, str]:
    """The ConfigMap ``data`` of a report (its JSON form, keys sorted: stable bytes)."""
    return {REPORT_KEY: json.dumps(report, sort_keys=True)}


# ---------------------------------------------------------------------------------------
# The SLA-window annotation
# ---------------------------------------------------------------------------------------


class SlaWindows(BaseModel):
    """``ANNOTATION_SLA_WINDOWS``: the observed windows of one placement.

    JSON ``{"node": ..., "gpus": [...], "placedAt": <epoch>, "windows": [[<end epoch>,
    <fraction>], ...]}`` (compact). The placement fields let a reader discard a history
    recorded for another placement.
    """

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    node: str
    gpus: tuple[int, ...]
    placed_at: float = Field(alias="placedAt")
    windows: tuple[tuple[float, float], ...]

    @classmethod
    def parse(cls, annotation: str | None) -> SlaWindows | None:
        """The document in ``annotation``; None when it is absent or unreadable (a reader
        then starts a fresh history rather than failing)."""
        if not annotation:
            return None
        try:
            return cls.model_validate_json(annotation)
        except (ValidationError, ValueError):
            return None

    def dump(self) -> str:
        """The annotation's value (compact JSON, fractions as given)."""
        return json.dumps(
            {
                "node": self.node,
                "gpus": list(self.gpus),
                "placedAt": self.placed_at,
                "windows": [[end, frac] for end, frac in self.windows],
            },
            separators=(",", ":"),
        )


# ---------------------------------------------------------------------------------------
# The SLA eviction report
# ---------------------------------------------------------------------------------------


def rfc3339(t: float) -> str:
    """Seconds since the epoch as an RFC 3339 UTC string (``...Z``)."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


def _epoch(value: Any) -> Any:
    """An RFC 3339 string (or a number) as seconds since the epoch."""
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return value


class _ReportPart(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)


class PredictedFactorsDocument(_ReportPart):
    """``predicted``: the model's three factors for the placement and their product."""

    compute: float
    memory: float
    multi_gpu: float = Field(alias="multiGPU")
    throughput_fraction: float = Field(alias="throughputFraction")


class ObservedSummaryDocument(_ReportPart):
    """``observed``: a summary of the windows the eviction decision considered."""

    mean: float
    min: float
    last: float
    windows: int
    windows_missed: int = Field(alias="windowsMissed")
    window_seconds: float = Field(alias="windowSeconds")


class EvictionReportDocument(_ReportPart):
    """One SLA eviction report as stored under ``REPORT_KEY`` (camelCase JSON; times as
    RFC 3339 UTC strings, numbers accepted too). Unknown keys are ignored, so an older
    reader keeps reading newer reports."""

    version: int = REPORT_VERSION
    job: str
    """``<namespace>/<name>`` of the OfflineJob."""
    node: str
    gpus: list[int]
    gpu_uuids: list[str] = Field(default=[], alias="gpuUUIDs")
    sla: float
    predicted: PredictedFactorsDocument
    observed: ObservedSummaryDocument
    reason: str
    time: float
    """When the eviction was decided, seconds since the epoch."""
    eviction_count: int = Field(alias="evictionCount")
    outcome: str
    """``failed`` (the job gave up) or ``requeued``."""
    next_attempt_after: float | None = Field(default=None, alias="nextAttemptAfter")
    excluded_nodes: list[str] = Field(default=[], alias="excludedNodes")
    next_placement: str = Field(default="", alias="nextPlacement")
    """Human-readable: what happens to the job next (derived; readers may recompute it)."""

    @field_validator("time", "next_attempt_after", mode="before")
    @classmethod
    def _times(cls, value: Any) -> Any:
        return _epoch(value)

    @field_serializer("time")
    def _time_out(self, value: float) -> str:
        return rfc3339(value)

    @field_serializer("next_attempt_after")
    def _next_out(self, value: float | None) -> str | None:
        return None if value is None else rfc3339(value)

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    @classmethod
    def parse(cls, data: Mapping[str, Any] | str | bytes) -> EvictionReportDocument:
        """A report from its JSON text or decoded object; ValueError on bad input."""
        raw: Any = json.loads(data) if isinstance(data, str | bytes) else data
        if not isinstance(raw, Mapping):
            raise ValueError("an eviction report must be a JSON object")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(part) for part in err["loc"])
            raise ValueError(
                f"malformed eviction report: missing or bad field {where!r} ({err['msg']})"
            ) from exc

    def serialize(self) -> dict[str, Any]:
        """The JSON-ready object (camelCase keys, RFC 3339 times)."""
        return self.model_dump(by_alias=True)
