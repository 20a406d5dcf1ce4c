"""Gleaner's Kubernetes API (group ``gleaner.dev``, version ``v1alpha1``) as pydantic models.

These models are the single source of truth: the CRD manifests in ``crds/`` are
generated from them (``python -m gleaner.api.crdgen``) and a test fails on drift.
They import nothing but pydantic, so every component (pure or shell) may use them.
``gleaner.api.kubeconfig`` (how a process finds the API server) imports the ``kubernetes``
client lazily, only when called.
"""

from gleaner.api.common import (
    API_VERSION,
    GROUP,
    VERSION,
    Condition,
    ConditionStatus,
    KubeModel,
    ObjectMeta,
    find_condition,
    set_condition,
)
from gleaner.api.nodetrace import (
    GpuInfo,
    GpuPair,
    GpuTrace,
    MemorySketch,
    MemoryState,
    NodeTrace,
    NodeTraceSpec,
    NodeTraceStatus,
    TraceSource,
    TraceWindow,
)
from gleaner.api.offlinejob import (
    ConditionType,
    ConfigMapProfileRef,
    EvictionRecord,
    GpuSelector,
    MemoryPoint,
    Observed,
    OfflineJob,
    OfflineJobSpec,
    OfflineJobStatus,
    Phase,
    Placement,
    Profile,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "ConfigMapProfileRef",
    "EvictionRecord",
    "GpuInfo",
    "GpuPair",
    "GpuSelector",
    "GpuTrace",
    "KubeModel",
    "MemoryPoint",
    "MemorySketch",
    "MemoryState",
    "NodeTrace",
    "NodeTraceSpec",
    "NodeTraceStatus",
    "ObjectMeta",
    "Observed",
    "OfflineJob",
    "OfflineJobSpec",
    "OfflineJobStatus",
    "Phase",
    "Placement",
    "Profile",
    "TraceSource",
    "TraceWindow",
    "find_condition",
    "set_condition",
]
