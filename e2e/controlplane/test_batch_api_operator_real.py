"""The real ``gleaner operator`` process serving the Batch API on the real control plane.

The operator runs as a ServiceAccount bound to exactly ``OPERATOR_RULES`` plus
``BATCH_API_RULES`` (what the chart grants with ``operator.batchApi.enabled``), with the
``--batch-api-*`` flags. A user's ServiceAccount submits a batch with the official
``openai`` client; the operator's own kopf handlers place its OfflineJob on a KWOK GPU
node and create its Pod, whose runner is in remote mode with the batch's URL; cancelling
deletes the job and its Pod, and the batch reads ``cancelled``. The operator's log must
hold no refused call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import openai
import pytest
import yaml

from gleaner.operator.rbac import BATCH_API_RULES, OPERATOR_RULES
from gleaner.testing.controlplane import (
    ControlPlane,
    apply,
    apply_nodetrace,
    get_json,
    running_operator_process,
)
from gleaner.testing.controlplane import poll as wait_for
from gleaner.testing.kube import nodetrace_manifest, refused_lines
from gleaner.testing.net import free_port
from gleaner.testing.openai_engine import batch_api_spec
from gleaner.testing.processes import ManagedProcess

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

T = TypeVar("T")
ACCOUNT_NAMESPACE = "gleaner-system"
ACCOUNT = "gleaner-operator-batch-api"
RBAC = "rbac.authorization.k8s.io"
SPEC = batch_api_spec("meta-llama/Llama-3.1-8B-Instruct")


def role_binding(name: str, role: str, account: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding" if role == ACCOUNT else "RoleBinding",
        "metadata": {"name": name} | ({} if role == ACCOUNT else {"namespace": namespace}),
        "roleRef": {
            "apiGroup": RBAC,
            "kind": "ClusterRole" if role == ACCOUNT else "Role",
            "name": role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


@pytest.fixture
def batch_api(
    control_plane: ControlPlane, gleaner_crds: list[str], tmp_path: Path
) -> Iterator[tuple[str, ManagedProcess]]:
    apply(
        control_plane,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ACCOUNT_NAMESPACE}},
    )
    apply(
        control_plane,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE},
        },
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": ACCOUNT},
            "rules": [dict(rule) for rule in [*OPERATOR_RULES, *BATCH_API_RULES]],
        },
        role_binding(ACCOUNT, ACCOUNT, ACCOUNT, ACCOUNT_NAMESPACE),
    )
    kubeconfig = control_plane.token_kubeconfig(
        ACCOUNT, ACCOUNT_NAMESPACE, tmp_path / "operator.kubeconfig"
    )
    port = free_port()
    with running_operator_process(
        kubeconfig,
        tmp_path / "operator.log",
        "--standalone",
        f"--batch-api-port={port}",
        f"--batch-api-dir={tmp_path / 'files'}",
        f"--batch-api-url=http://gleaner-operator.{ACCOUNT_NAMESPACE}.svc:{port}",
    ) as process:
        yield f"http://127.0.0.1:{port}", process


def test_a_batch_submitted_with_openai_is_placed_by_the_operator_and_cancelled(
    control_plane: ControlPlane, namespace: str, batch_api: tuple[str, ManagedProcess]
) -> None:
    url, operator = batch_api
    apply_nodetrace(control_plane, nodetrace_manifest("gpu-a", gpus=8, offline_enabled=0.9))
    apply(
        control_plane,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "alice", "namespace": namespace},
        },
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "Role",
            "metadata": {"name": "batch-user", "namespace": namespace},
            "rules": [
                {"apiGroups": ["gleaner.dev"], "resources": ["offlinejobs"],
                 "verbs": ["get", "create", "delete"]}
            ],
        },
        role_binding("alice", "batch-user", "alice", namespace),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "batch-api", "namespace": namespace},
            "data": {"spec.yaml": yaml.safe_dump(SPEC)},
        },
    )  # fmt: skip
    token = control_plane.kubectl("create", "token", "alice", "-n", namespace).stdout.strip()
    alice = openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=2)

    def log() -> str:
        return "\n".join(operator.log_tail(40))

    def listening() -> bool:
        try:
            alice.files.list()
        except openai.APIConnectionError:
            return False
        return True

    wait_for(listening, log, timeout=60)
    lines = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    uploaded = alice.files.create(file=("in.jsonl", lines), purpose="batch")
    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    name = batch.id.replace("_", "-", 1)

    def pod() -> dict[str, Any] | None:
        if not operator.alive():
            raise AssertionError(f"the operator exited ({operator.state()}):\n{log()}")
        pods = get_json(control_plane, "pods", "-n", namespace, "-l", f"gleaner.dev/job={name}")
        return pods["items"][0] if pods and pods["items"] else None

    made = wait_for(pod, log)
    (runner,) = made["spec"]["containers"]
    args = runner["args"]
    assert args[args.index("--remote") + 1] == (
        f"http://gleaner-operator.{ACCOUNT_NAMESPACE}.svc:{url.rsplit(':', 1)[1]}"
        f"/gleaner/v1/namespaces/{namespace}/batches/{batch.id}"
    )
    assert args[args.index("--input") + 1] == f"/data/batch-api/{batch.id}/input.jsonl"
    assert alice.batches.retrieve(batch.id).status in ("in_progress", "validating")

    alice.batches.cancel(batch.id)

    def gone() -> bool:
        return get_json(control_plane, "oj", name, "-n", namespace) is None and pod() is None

    wait_for(gone, log)
    assert alice.batches.retrieve(batch.id).status == "cancelled"
    refused = refused_lines(operator.log())
    assert refused == [], "\n".join(refused)
