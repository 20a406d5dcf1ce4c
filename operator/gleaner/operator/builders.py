"""Pure builders: the Kubernetes objects the operator creates, from typed inputs.

Contract (docs/architecture.md, "Binding"; docs/api.md, "What the operator adds to the Pod";
every label, annotation, environment variable and path is a name of
``gleaner.api.contract``, declared there once):

``build_offline_pod(job, placement, attempt)`` returns the Pod manifest (a plain dict) for
one attempt of an OfflineJob on the GPUs the scheduler chose, from ``spec.template`` or, for
a ``spec.batch`` job, the engine-and-runner template of ``gleaner.batch.pod``:

- name ``<job>-<attempt>`` (attempt = the job's SLA evictions plus its moves), in the job's
  namespace, ``spec.nodeName`` = the placement's node (the default scheduler is bypassed: the
  GPUs are already held by online pods, so the offline Pod requests no ``nvidia.com/gpu``; any such
  request or limit in the template is removed);
- labels ``gleaner.dev/job``, ``gleaner.dev/role=offline``, ``gleaner.dev/attempt``;
  annotation ``gleaner.dev/gpus`` = comma-separated GPU indices, and
  ``gleaner.dev/placement`` = the placement as JSON (``placement_of_pod`` reads it back: the
  job's status records it after the Pod exists, ``handlers.binding``);
- an ownerReference to the OfflineJob (controller);
- in every container (and init container): ``NVIDIA_VISIBLE_DEVICES`` = the GPU UUIDs,
  ``LD_PRELOAD`` = the shim (prepended to the template's own LD_PRELOAD, if any),
  ``GLEANER_ROLE=offline``, ``GLEANER_SOCKET``, ``GLEANER_JOB=<ns>/<name>``, and read-only /
  read-write mounts of the two host paths (shim library, agent sockets): the instrumentation
  of ``gleaner.operator.injection``, which the admission webhook gives online Pods too;
- ``restartPolicy`` defaults to ``Never`` (the operator, not the kubelet, decides retries).

``build_eviction_report_configmap`` returns the ConfigMap that stores one SLA eviction report
(labels ``gleaner.dev/report=sla-eviction``, ``gleaner.dev/job``; key ``report.json``).
Nothing here does I/O; the builders are unit-tested without a cluster.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gleaner.api import API_VERSION, OfflineJob, Placement
from gleaner.api.contract import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT,
    ENV_JOB,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_ROLE,
    ROLE_OFFLINE,
    eviction_report_data,
    eviction_report_labels,
    eviction_report_name,
    gpus_annotation,
    parse_gpus_annotation,
)
from gleaner.batch.pod import template_of
from gleaner.operator.injection import (
    CONTAINER_KEYS,
    SHIM_VOLUME,
    SOCKET_VOLUME,
    inject_pod_spec,
    runtime_env,
)

__all__ = [
    "GPU_RESOURCE",
    "MAX_LABEL_VALUE",
    "SHIM_VOLUME",
    "SOCKET_VOLUME",
    "PodPlacement",
    "build_eviction_report_configmap",
    "build_offline_pod",
    "gpus_of_pod",
    "owner_reference",
    "placement_of_pod",
    "pod_name",
]

GPU_RESOURCE = "nvidia.com/gpu"

MAX_LABEL_VALUE = 63


def pod_name(job_name: str, attempt: int) -> str:
    """Deterministic Pod name: the same attempt always gets the same name (no duplicates)."""
    return f"{job_name}-{attempt}"


def owner_reference(job: OfflineJob) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": OfflineJob.KIND,
        "name": job.metadata.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _strip_gpu_resources(container: dict[str, Any]) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return
    for section in ("requests", "limits"):
        values = resources.get(section)
        if isinstance(values, dict):
            values.pop(GPU_RESOURCE, None)
            if not values:
                resources.pop(section)


def build_offline_pod(
    job: OfflineJob, placement: Placement, attempt: int, why: str = ""
) -> dict[str, Any]:
    """The Pod for ``attempt`` of ``job`` on ``placement`` (see the module docstring);
    ``why`` is the scheduler's short reason, kept with the placement."""
    name = job.metadata.name
    namespace = job.metadata.namespace or "default"
    template = copy.deepcopy(template_of(job))  # spec.template, or what spec.batch implies
    tmeta: dict[str, Any] = dict(template.get("metadata") or {})
    spec: dict[str, Any] = dict(template["spec"])

    labels = {str(k): str(v) for k, v in (tmeta.get("labels") or {}).items()}
    labels.update({LABEL_JOB: name, LABEL_ROLE: ROLE_OFFLINE, LABEL_ATTEMPT: str(attempt)})
    annotations = {str(k): str(v) for k, v in (tmeta.get("annotations") or {}).items()}
    annotations[ANNOTATION_GPUS] = gpus_annotation(placement.gpu_indices)
    annotations[ANNOTATION_PLACEMENT] = json.dumps(
        {"placement": placement.to_k8s(), "why": why, "generation": job.metadata.generation},
        separators=(",", ":"),
    )

    env = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(placement.gpu_uuids),
        **runtime_env(ROLE_OFFLINE),
        ENV_JOB: f"{namespace}/{name}",
    }
    # The same instrumentation the webhook gives online Pods (gleaner.operator.injection).
    spec = inject_pod_spec(spec, env)
    for key in CONTAINER_KEYS:
        for container in spec.get(key) or []:
            _strip_gpu_resources(container)
    spec["nodeName"] = placement.node
    spec.pop("nodeSelector", None)  # the placement already honoured gpuSelector
    spec.pop("schedulerName", None)
    spec.setdefault("restartPolicy", "Never")

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, attempt),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def build_eviction_report_configmap(
    job_name: str, namespace: str, eviction_number: int, report: dict[str, Any]
) -> dict[str, Any]:
    """The ConfigMap storing one eviction report (kept after the job is deleted: no owner)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": eviction_report_name(job_name, eviction_number),
            "namespace": namespace,
            "labels": eviction_report_labels(job_name),
        },
        "data": eviction_report_data(report),
    }


def gpus_of_pod(pod: dict[str, Any]) -> tuple[str, list[int]] | None:
    """(node, GPU indices) an offline Pod holds, read back from its spec and annotation."""
    node = (pod.get("spec") or {}).get("nodeName")
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GPUS)
    gpus = parse_gpus_annotation(str(raw)) if raw else None
    if not node or gpus is None:
        return None
    return str(node), gpus


@dataclass(frozen=True)
class PodPlacement:
    """What an offline Pod says of the placement it was made for (``ANNOTATION_PLACEMENT``,
    its ``LABEL_ATTEMPT`` and its controller's UID)."""

    placement: Placement
    why: str
    generation: int | None
    attempt: int
    job_uid: str | None


def placement_of_pod(pod: dict[str, Any]) -> PodPlacement | None:
    """The placement an offline Pod was made for; None when the Pod does not say (made by
    an operator that recorded the placement first) or says it unreadably."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(ANNOTATION_PLACEMENT)
    attempt = str((meta.get("labels") or {}).get(LABEL_ATTEMPT, ""))
    if not raw or not attempt.isdigit():
        return None
    try:
        doc = json.loads(str(raw))
        placement = Placement.model_validate(doc["placement"])
        generation = doc.get("generation")
        why = str(doc.get("why") or "")
    except (ValueError, TypeError, KeyError, ValidationError):
        return None
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return PodPlacement(
        placement=placement,
        why=why,
        generation=generation if isinstance(generation, int) else None,
        attempt=int(attempt),
        job_uid=str(owners[0].get("uid")) if owners else None,
    )
