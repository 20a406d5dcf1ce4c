"""The Batch API on the real control plane, driven by the official ``openai`` client.

Real TokenReviews and SubjectAccessReviews: the callers are ServiceAccounts of a fresh
namespace with tokens from the TokenRequest API (``kubectl create token``); ``alice`` is
bound to a Role that may get, create and delete OfflineJobs there, ``bob`` to nothing. The
API runs in this process on the admin's credentials (the operator's in a cluster), the
batch's OfflineJob is created in the real API server (CRD, CEL and all), and its status
is patched as the operator would (the operator's own handling of a spec.batch job is
e2e/controlplane/test_batch_real.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from gleaner.api.contract import ANNOTATION_BATCH_API, LABEL_BATCH_API
from gleaner.clients.kube import SyncKubeClient
from gleaner.operator.batchapi.app import build_batch_app
from gleaner.operator.batchapi.files import FileStore
from gleaner.testing.controlplane import ControlPlane, apply
from gleaner.testing.dashboard import serving
from gleaner.testing.openai_engine import batch_api_spec

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

SPEC = batch_api_spec("meta-llama/Llama-3.1-8B-Instruct")
SELF_URL = "http://gleaner-operator.gleaner-system.svc:8081"


@pytest.fixture
def batch_api(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str, tmp_path: Path
) -> Iterator[str]:
    kube = SyncKubeClient.from_config(str(control_plane.admin_kubeconfig), in_cluster=False)
    app = build_batch_app(FileStore(tmp_path / "files", 1 << 20), kube, SELF_URL)
    try:
        with serving(app) as url:
            yield url
    finally:
        kube.close()


def token(plane: ControlPlane, account: str, namespace: str) -> str:
    return plane.kubectl("create", "token", account, "-n", namespace).stdout.strip()


def test_the_openai_client_runs_a_batch_backed_by_an_offlinejob_on_the_real_api_server(
    control_plane: ControlPlane, namespace: str, batch_api: str
) -> None:
    ns = namespace
    rbac = "rbac.authorization.k8s.io"
    apply(
        control_plane,
        *[
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": ns}}
            for n in ("alice", "bob")
        ],
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": {"name": "batch-user", "namespace": ns},
            "rules": [
                {
                    "apiGroups": ["gleaner.dev"],
                    "resources": ["offlinejobs"],
                    "verbs": ["get", "create", "delete"],
                }
            ],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-batch", "namespace": ns},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "batch-user"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "batch-api", "namespace": ns},
            "data": {"spec.yaml": yaml.safe_dump(SPEC)},
        },
    )  # fmt: skip
    alice = openai.OpenAI(
        base_url=f"{batch_api}/v1", api_key=token(control_plane, "alice", ns), max_retries=0
    )
    lines = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    uploaded = alice.files.create(file=("in.jsonl", lines), purpose="batch")
    assert alice.files.content(uploaded.id).content == lines

    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "validating"
    name = batch.id.replace("_", "-", 1)
    job = json.loads(
        control_plane.kubectl("get", "offlinejob", name, "-n", ns, "-o", "json").stdout
    )
    assert job["metadata"]["labels"][LABEL_BATCH_API] == "true"
    assert job["spec"]["batch"]["input"] == f"batch-api/{batch.id}/input.jsonl"
    assert job["spec"]["batch"]["deadline"]
    runner_url = job["metadata"]["annotations"][ANNOTATION_BATCH_API]
    assert runner_url == f"{SELF_URL}/gleaner/v1/namespaces/{ns}/batches/{batch.id}"

    status = {"status": {"phase": "Running", "batch": {"requestsTotal": 1, "requestsDone": 0}}}
    control_plane.kubectl(
        "patch", "offlinejob", name, "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    got = alice.batches.retrieve(batch.id)
    assert got.status == "in_progress" and got.request_counts is not None
    assert got.request_counts.total == 1
    assert [b.id for b in alice.batches.list()] == [batch.id]

    # The runner (the namespace's default ServiceAccount, with no rights on OfflineJobs)
    # fetches the input and uploads the results; alice downloads them.
    runner = {"Authorization": f"Bearer {token(control_plane, 'default', ns)}"}
    local = runner_url.replace(SELF_URL, batch_api)
    assert httpx.get(f"{local}/input", headers=runner).content == lines
    answer = b'{"id": "batch_req_a", "custom_id": "a", "response": {}, "error": null}\n'
    assert httpx.put(f"{local}/output", content=answer, headers=runner).status_code == 200
    output = alice.batches.retrieve(batch.id).output_file_id
    assert output is not None
    assert alice.files.content(output).content == answer

    # bob is authenticated but may not; no token and a forged one are not authenticated.
    bob = openai.OpenAI(
        base_url=f"{batch_api}/v1", api_key=token(control_plane, "bob", ns), max_retries=0
    )
    with pytest.raises(openai.PermissionDeniedError):
        bob.batches.retrieve(batch.id)
    with pytest.raises(openai.PermissionDeniedError):
        bob.files.create(file=("in.jsonl", lines), purpose="batch")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{batch_api}/v1", api_key="forged", max_retries=0).files.list()
    assert httpx.get(f"{batch_api}/v1/files").status_code == 401

    cancelled = alice.batches.cancel(batch.id)
    assert cancelled.status in ("cancelling", "cancelled")
    control_plane.kubectl(
        "wait", "--for=delete", f"offlinejob/{name}", "-n", ns, "--timeout=60s", check=False
    )
    assert alice.batches.retrieve(batch.id).status == "cancelled"
