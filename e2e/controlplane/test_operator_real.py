"""The real ``gleaner operator`` process on the real control plane, with the chart's RBAC.

tests/operator/test_operator_process.py drives the operator against kmock, which grants
every call. Here the operator authenticates as a ServiceAccount bound to a ClusterRole made
of exactly ``gleaner.operator.rbac.OPERATOR_RULES`` (what the Helm chart installs), with
kopf's peering CRDs and peering object from the chart, and a Pod it binds to a KWOK GPU node
is run by KWOK instead of being patched by the test: the job is placed, bound, Running with
its Ready condition, and deleting it deletes its Pod. The operator's log must hold no
refused call.

It found a bug that kmock hid: the operator handed kopf its watch timeout as a float, kopf
sent ``timeoutSeconds=60.0`` (300.0 by default), and a real API server answers every such
watch with 400 (``strconv.ParseInt``), so the operator stopped at its first watch.
``test_the_api_server_refuses_a_fractional_timeout`` pins the server's side;
``gleaner.operator.main`` now passes an integer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from gleaner.operator.rbac import OPERATOR_RULES
from gleaner.testing.controlplane import (
    ControlPlane,
    apply,
    apply_nodetrace,
    get_json,
    running_operator_process,
)
from gleaner.testing.controlplane import poll as wait_for
from gleaner.testing.kube import (
    nodetrace_manifest,
    offlinejob_manifest,
    refused_lines,
)
from gleaner.testing.processes import ManagedProcess

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

T = TypeVar("T")

ACCOUNT_NAMESPACE = "gleaner-system"
ACCOUNT = "gleaner-operator"


def operator_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount, bound to exactly OPERATOR_RULES."""
    apply(
        plane,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ACCOUNT_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": ACCOUNT},
            "rules": [dict(rule) for rule in OPERATOR_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": ACCOUNT},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": ACCOUNT,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE}
            ],
        },
    )
    token = plane.kubectl(
        "create", "token", ACCOUNT, "-n", ACCOUNT_NAMESPACE, "--duration=2h"
    ).stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {
                    "server": plane.server,
                    "certificate-authority": str(plane.pki.path("ca.crt")),
                },
            }
        ],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": "test", "user": ACCOUNT}}],
        "current-context": ACCOUNT,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def operator(
    control_plane: ControlPlane, gleaner_crds: list[str], kopf_crds: list[str], tmp_path: Path
) -> Iterator[ManagedProcess]:
    apply(
        control_plane,
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": "gleaner"},
        },
    )
    kubeconfig = operator_kubeconfig(control_plane, tmp_path / "operator.kubeconfig")
    with running_operator_process(kubeconfig, tmp_path / "operator.log") as process:
        yield process


def test_the_api_server_refuses_a_fractional_timeout(control_plane: ControlPlane) -> None:
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?timeoutSeconds="
    refused = control_plane.kubectl("get", "--raw", path + "60.0", check=False)
    assert refused.returncode != 0
    assert 'strconv.ParseInt: parsing "60.0": invalid syntax' in refused.stderr, refused.stderr
    assert control_plane.kubectl("get", "--raw", path + "60").returncode == 0


def test_the_operator_binds_a_job_that_kwok_runs_and_deletes_it_with_chart_rbac(
    control_plane: ControlPlane, namespace: str, operator: ManagedProcess
) -> None:
    # NodeTraces are cluster-scoped: an earlier test on this plane (an e2e system's agents)
    # may have left one that would out-score gpu-a. This test is about gpu-a alone.
    control_plane.kubectl("delete", "nt", "--all", "--wait=true")
    trace = nodetrace_manifest("gpu-a", gpus=8, offline_enabled=0.9)
    apply_nodetrace(control_plane, trace)
    apply(control_plane, offlinejob_manifest("llama", namespace=namespace, sla=0.5))

    def job() -> dict[str, Any]:
        return get_json(control_plane, "oj", "llama", "-n", namespace) or {}

    def log() -> str:
        return f"job: {job().get('status')}\n" + "\n".join(operator.log_tail(40))

    def running() -> dict[str, Any] | None:
        if not operator.alive():
            raise AssertionError(f"the operator exited ({operator.state()}):\n{log()}")
        got = job()
        return got if got.get("status", {}).get("phase") == "Running" else None

    running_job = wait_for(running, log)
    placement = running_job["status"]["placement"]
    assert placement["node"] == "gpu-a"
    conditions = {c["type"]: c["status"] for c in running_job["status"]["conditions"]}
    assert conditions["Ready"] == "True"

    pods = get_json(control_plane, "pods", "-n", namespace, "-l", "gleaner.dev/job=llama")
    assert pods is not None
    (pod,) = pods["items"]
    assert pod["metadata"]["name"] == "llama-0"
    assert pod["spec"]["nodeName"] == "gpu-a"
    assert pod["status"]["phase"] == "Running"  # KWOK ran it: nobody patched its status
    (gpu,) = placement["gpuIndices"]
    assert pod["metadata"]["annotations"]["gleaner.dev/gpus"] == str(gpu)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == trace["status"]["gpus"][gpu]["uuid"]  # the NodeTrace's
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "OfflineJob",
        "llama",
        running_job["metadata"]["uid"],
    )

    control_plane.kubectl("delete", "oj", "llama", "-n", namespace, "--wait=false")

    def deleted() -> bool:
        pods = get_json(control_plane, "pods", "-n", namespace, "-l", "gleaner.dev/job=llama")
        return not job() and pods is not None and pods["items"] == []

    wait_for(deleted, log)
    refused = refused_lines(operator.log())
    assert refused == [], "\n".join(refused)
