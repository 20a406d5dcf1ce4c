"""Gleaner's resources and assumptions on the real Kubernetes control plane.

kmock (``gleaner.testing.kube``) enforces no CRD schema, no CEL, no RBAC and collects no
garbage; these tests hold the same manifests against upstream kube-apiserver,
kube-controller-manager and KWOK (``control_plane`` in conftest.py): the CRDs install,
the API server itself refuses every invalid example naming the field (CEL rules
included), kubectl prints the CRDs' columns, Pods bound to KWOK GPU nodes run, RBAC
refuses what is not granted, and deleting an owner deletes its Pods.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from gleaner.testing.controlplane import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    ControlPlane,
    apply_nodetrace,
    get_json,
    poll,
)
from gleaner.testing.kube import nodetrace_manifest

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None], what: str | Callable[[], str], timeout: float = 60.0
) -> T:
    return poll(check, what, timeout)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VALID = sorted(EXAMPLES.glob("*.yaml"))
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))

# file -> (the field the API server names, the text of its message); the same fields and
# messages as the offline schema check in tests/api/test_examples.py.
EXPECTED_ERRORS = {
    "decreasing-memory-curve.yaml": (
        "spec.profile.memoryCurve",
        "tokensPerSecond must not decrease as memoryGiB increases",
    ),
    "sla-out-of-range.yaml": (
        "spec.throughputSLA",
        "should be less than or equal to 1",
    ),
    "both-profile-sources.yaml": (
        "spec",
        "exactly one of spec.profile and spec.profileFrom must be set",
    ),
    "too-many-gpus.yaml": (
        "spec.gpus",
        "should be less than or equal to 8",
    ),
}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def in_namespace(docs: list[dict[str, Any]], namespace: str) -> str:
    """``docs`` moved to ``namespace``, as one JSON stream for ``kubectl -f -``."""
    for doc in docs:
        doc.setdefault("metadata", {})["namespace"] = namespace
    return "\n".join(json.dumps(doc) for doc in docs)


def table(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


def pod_manifest(name: str, node: str | None, **metadata: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "worker",
                "image": "vllm/vllm-openai:latest",
                "resources": {"limits": {GPU_RESOURCE: 1}},
            }
        ],
        # KWOK nodes carry no taints, but keep these Pods off anything else.
        "tolerations": [{"operator": "Exists"}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "spec": spec,
    }


# ---- CRDs --------------------------------------------------------------------------


def test_the_crds_install_and_are_served(
    control_plane: ControlPlane, gleaner_crds: list[str]
) -> None:
    assert gleaner_crds == [
        "nodehistories.gleaner.dev",
        "nodetraces.gleaner.dev",
        "offlinejobs.gleaner.dev",
    ]
    resources = control_plane.kubectl("api-resources", "--api-group=gleaner.dev").stdout
    rows = {row[0]: row for row in table(resources)[1:]}
    assert set(rows) == {"nodehistories", "nodetraces", "offlinejobs"}
    assert "nt" in rows["nodetraces"] and "oj" in rows["offlinejobs"]
    assert "nh" in rows["nodehistories"]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_the_api_server_accepts_every_valid_example(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str, path: Path
) -> None:
    result = control_plane.kubectl(
        "create", "--dry-run=server", "-f", "-", input=in_namespace(load(path), namespace),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_every_invalid_example_is_checked_here() -> None:
    assert {p.name for p in INVALID} == set(EXPECTED_ERRORS)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_the_api_server_refuses_every_invalid_example_naming_the_field(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str, path: Path
) -> None:
    field, message = EXPECTED_ERRORS[path.name]
    (doc,) = load(path)
    result = control_plane.kubectl(
        "create", "-f", "-", input=in_namespace([doc], namespace), check=False
    )
    assert result.returncode != 0
    name = doc["metadata"]["name"]
    # The API server names the object, then the field, then the rule's message.
    (line,) = [line for line in result.stderr.splitlines() if message in line]
    assert line.startswith(f'The OfflineJob "{name}" is invalid: {field}: Invalid value: '), line
    assert get_json(control_plane, "oj", name, "-n", namespace) is None, "nothing was stored"


# ---- printer columns ---------------------------------------------------------------


def test_kubectl_get_oj_wide_shows_the_printer_columns(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str
) -> None:
    (job,) = [d for d in load(EXAMPLES / "llama-3.1-8b-batch.yaml") if d["kind"] == "OfflineJob"]
    control_plane.kubectl("create", "-f", "-", input=in_namespace([job], namespace))
    name = job["metadata"]["name"]
    status = {
        "phase": "Running",
        "placement": {
            "node": "gpu-a",
            "gpuIndices": [0],
            "compute": 0.79,
            "memory": 0.9,
            "multiGPU": 1.0,
            "throughputFraction": 0.71,
            "decidedAt": "2026-01-01T00:00:00Z",
            "plannedExit": True,
        },
        "evictionCount": 0,
        "message": "placed",
    }
    patched = control_plane.kubectl(
        "patch", "oj", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), check=False,
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr

    header, *rows = table(control_plane.kubectl("get", "oj", "-n", namespace, "-o", "wide").stdout)
    assert header == [
        "NAME", "PHASE", "NODE", "GPUS", "SLA", "PREDICTED", "OBSERVED", "EVICTIONS",
        "REQUESTS", "AGE", "COMPUTE", "MEMORY", "MULTI-GPU", "PLANNED-EXIT", "REASON",
    ]  # fmt: skip
    (row,) = rows
    # OBSERVED (no observation yet) and REQUESTS (not a spec.batch job) are empty, so the row
    # has two words less than the header.
    assert row[:7] == [name, "Running", "gpu-a", "1", "0.5", "0.71", "0"], row
    # -o wide adds the predicted factors, the planned exit and the phase's reason.
    assert row[8:] == ["0.79", "0.9", "1", "true", "placed"], row
    plain = table(control_plane.kubectl("get", "oj", "-n", namespace).stdout)[0]
    assert plain[-1] == "AGE" and "COMPUTE" not in plain


def test_kubectl_get_nt_shows_the_printer_columns(
    control_plane: ControlPlane, gleaner_crds: list[str]
) -> None:
    trace = nodetrace_manifest("gpu-b", gpus=2, offline_enabled=0.75)
    trace["metadata"]["name"] = "gpu-b-columns"
    try:
        apply_nodetrace(control_plane, trace)
        header, *rows = table(control_plane.kubectl("get", "nt", "gpu-b-columns").stdout)
        assert header == [
            "NAME", "NODE", "GPUS", "IDLE", "MEM-P10", "OFFLINE-JOBS", "LAST-REPORT", "AGE",
        ]  # fmt: skip
        (row,) = rows
        assert row[:4] == ["gpu-b-columns", "gpu-b", "2", "0.75"], row
    finally:
        control_plane.kubectl("delete", "nt", "gpu-b-columns", check=False)


# ---- KWOK nodes, RBAC, garbage collection ------------------------------------------


def test_the_kwok_gpu_nodes_are_ready_with_gpu_capacity(control_plane: ControlPlane) -> None:
    node = get_json(control_plane, "node", "gpu-a")
    assert node is not None
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3"
    assert node["metadata"]["labels"]["gleaner.dev/pool"] == "a"
    assert node["status"]["capacity"][GPU_RESOURCE] == "8"
    assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert control_plane.node_ready("gpu-a") and control_plane.node_ready("gpu-b")


def test_a_pod_bound_to_a_kwok_gpu_node_turns_running(
    control_plane: ControlPlane, namespace: str
) -> None:
    pod = pod_manifest("bound", "gpu-a")
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))

    def running() -> dict[str, Any] | None:
        got = get_json(control_plane, "pod", "bound", "-n", namespace)
        return got if got and got["status"].get("phase") == "Running" else None

    status = wait_for(running, "Pod bound to gpu-a Running")["status"]
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "True"
    assert status["podIP"]


def test_rbac_refuses_a_service_account_what_no_role_grants(
    control_plane: ControlPlane, namespace: str
) -> None:
    subject = f"--as=system:serviceaccount:{namespace}:default"
    result = control_plane.kubectl("get", "pods", "-n", namespace, subject, check=False)
    assert result.returncode != 0
    assert "Forbidden" in result.stderr or "forbidden" in result.stderr, result.stderr

    control_plane.kubectl(
        "create", "role", "pod-reader", "-n", namespace, "--verb=get,list", "--resource=pods"
    )
    control_plane.kubectl(
        "create", "rolebinding", "pod-reader", "-n", namespace, "--role=pod-reader",
        f"--serviceaccount={namespace}:default",
    )  # fmt: skip
    control_plane.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps(pod_manifest("victim", None))
    )
    listed = control_plane.kubectl("get", "pods", "-n", namespace, subject).stdout
    assert [row[0] for row in table(listed)[1:]] == ["victim"]
    denied = control_plane.kubectl("delete", "pod", "victim", "-n", namespace, subject, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    assert get_json(control_plane, "pod", "victim", "-n", namespace) is not None


def test_deleting_an_owner_deletes_its_pods_through_owner_references(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl("create", "configmap", "owner", "-n", namespace)
    owner = get_json(control_plane, "configmap", "owner", "-n", namespace)
    assert owner is not None
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    owned = [
        pod_manifest("owned-bound", "gpu-b", ownerReferences=[reference]),
        pod_manifest("owned-pending", None, ownerReferences=[reference]),
    ]
    control_plane.kubectl("create", "configmap", "bystander", "-n", namespace)
    control_plane.kubectl(
        "create", "-n", namespace, "-f", "-",
        input="\n".join(json.dumps(p) for p in [*owned, pod_manifest("unowned", "gpu-b")]),
    )  # fmt: skip

    def phase(name: str) -> str | None:
        got = get_json(control_plane, "pod", name, "-n", namespace)
        return None if got is None else str(got["status"].get("phase"))

    wait_for(lambda: phase("owned-bound") == "Running", "owned-bound Running")
    control_plane.kubectl("delete", "configmap", "owner", "-n", namespace, "--wait=false")

    def gone() -> bool:
        return phase("owned-bound") is None and phase("owned-pending") is None

    wait_for(gone, "the owned Pods deleted by the garbage collector", timeout=120)
    assert phase("unowned") == "Running"
    assert get_json(control_plane, "configmap", "bystander", "-n", namespace) is not None
