"""spec.batch on the real control plane: the API server takes and refuses it as the models
do (CEL included), and the operator's progress tick writes status.batch, the deadline SLA
and DeadlineMet through the real API, which ``kubectl get oj`` prints in its Requests
column.

The runner's ``GET /progress`` is stood in for by a function that answers with the counts
of a real progress store (``gleaner.batch.store``), at the URL built from the IP KWOK gave
the Pod: the runner's HTTP server is tested in tests/batch.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gleaner.batch.records import Result
from gleaner.batch.store import ProgressStore
from gleaner.clients.kube import Credentials, KubeClient
from gleaner.operator.config import OperatorConfig
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.batch import track_batch
from gleaner.operator.http import Health
from gleaner.operator.metrics import OperatorMetrics
from gleaner.testing.controlplane import ControlPlane
from gleaner.testing.kube import offlinejob_manifest

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]


def batch_job(name: str, namespace: str, **batch: Any) -> dict[str, Any]:
    manifest = offlinejob_manifest(name, namespace=namespace, sla=0.2, standalone=1000.0)
    del manifest["spec"]["template"]
    manifest["spec"]["batch"] = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "engineImage": "vllm/vllm-openai:v0.8.5",
        "claimName": "batch-data",
        "input": "in.jsonl",
        "output": "run",
        **batch,
    }
    return manifest


def apply(plane: ControlPlane, doc: dict[str, Any], check: bool = True) -> str:
    result = plane.kubectl("apply", "-f", "-", input=json.dumps(doc), check=check)
    return result.stdout + result.stderr


def test_the_api_server_takes_a_batch_job_and_refuses_template_and_batch_together(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str
) -> None:
    assert "created" in apply(control_plane, batch_job("ok", namespace))
    both = batch_job("both", namespace)
    both["spec"]["template"] = offlinejob_manifest("x")["spec"]["template"]
    out = apply(control_plane, both, check=False)
    assert "exactly one of spec.template and spec.batch must be set" in out, out
    neither = batch_job("neither", namespace)
    del neither["spec"]["batch"]
    out = apply(control_plane, neither, check=False)
    assert "exactly one of spec.template and spec.batch must be set" in out, out
    absolute = batch_job("absolute", namespace, input="/etc/passwd")
    out = apply(control_plane, absolute, check=False)
    assert "spec.batch.input" in out, out


def test_progress_and_deadline_reach_status_kubectl_and_metrics(
    control_plane: ControlPlane,
    gleaner_crds: list[str],
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deadline = datetime.now(UTC) + timedelta(hours=2)
    apply(control_plane, batch_job("sums", namespace, deadline=deadline.isoformat()))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sums-0", "namespace": namespace},
        "spec": {
            "nodeName": "gpu-b",
            "containers": [{"name": "batch-runner", "image": "gleaner/gleaner:0.1.0"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(pod))
    status = {"status": {"phase": "Running", "pods": ["sums-0"]}}
    control_plane.kubectl(
        "patch",
        "offlinejob",
        "sums",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    ip = ""
    give_up = time.monotonic() + 60
    while not ip and time.monotonic() < give_up:
        ip = control_plane.kubectl(
            "get", "pod", "sums-0", "-n", namespace, "-o", "jsonpath={.status.podIP}"
        ).stdout.strip()
        time.sleep(0.25)
    assert ip, "KWOK gave the Pod no IP within a minute"

    # The runner's own counts: 250 of 1000 requests answered, 1000 tokens each.
    with ProgressStore(tmp_path / "state") as store:
        store.set_total(1000)
        for i in range(250):
            usage = {"prompt_tokens": 400, "completion_tokens": 600}
            store.record(Result(f"r{i}", 200, {"usage": usage}))
        progress = asdict(store.progress)
    asked: list[str] = []

    async def read(url: str) -> Any:
        asked.append(url)
        return progress

    monkeypatch.setenv("KUBECONFIG", str(control_plane.admin_kubeconfig))

    async def tick() -> str:
        client = KubeClient(Credentials.load())
        ctx = OperatorContext(
            config=OperatorConfig(), client=client, metrics=metrics, health=Health()
        )
        try:
            body = await client.get(
                f"/apis/gleaner.dev/v1alpha1/namespaces/{namespace}/offlinejobs/sums"
            )
            assert body is not None
            return await track_batch(ctx, body, read)
        finally:
            await client.close()

    metrics = OperatorMetrics()
    assert asyncio.run(tick()) == "progress 250/1000"
    assert asked == [f"http://{ip}:8090/progress"]

    job = json.loads(
        control_plane.kubectl("get", "offlinejob", "sums", "-n", namespace, "-o", "json").stdout
    )
    batch = job["status"]["batch"]
    assert (batch["requestsDone"], batch["requestsTotal"], batch["tokens"]) == (250, 1000, 250_000)
    # 750k tokens in ~2 h at 1000 tok/s: ~0.104, under the job's own 0.2 (the floor).
    assert batch["deadlineSLA"] == pytest.approx(0.2)
    assert 0.1 < batch["requiredFraction"] < 0.11
    (cond,) = [c for c in job["status"]["conditions"] if c["type"] == "DeadlineMet"]
    assert (cond["status"], cond["reason"]) == ("True", "DeadlineReachable")
    printed = control_plane.kubectl("get", "oj", "sums", "-n", namespace).stdout
    header, row = printed.splitlines()[:2]
    # kubectl aligns the columns; empty ones (no node yet) would shift a split().
    at = header.index("REQUESTS")
    assert row[at:].split()[0] == "250/1000", printed
    labels = {"namespace": namespace, "job": "sums"}
    value = metrics.registry.get_sample_value
    assert value("gleaner_operator_job_batch_requests", {**labels, "state": "done"}) == 250
    assert value("gleaner_operator_job_batch_requests", {**labels, "state": "total"}) == 1000
    assert value("gleaner_operator_job_batch_deadline_timestamp_seconds", labels) == (
        pytest.approx(deadline.timestamp(), abs=1)
    )
