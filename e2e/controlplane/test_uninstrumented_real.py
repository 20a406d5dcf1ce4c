"""An online service that did not opt in, on the real control plane: no offline job goes
on its GPU, and ``kubectl describe oj`` and the dashboard say why (docs/operator.md,
"Uninstrumented GPUs"; docs/agent.md, "Uninstrumented processes").

The pieces are the real ones but for the kubelet: an online service's Pod without the online
label (so the webhook never instruments it) pinned to the KWOK node ``gpu-b``, which KWOK
runs (a bare Pod: the harness's controller manager runs no Deployment controller);
a real ``gleaner agent`` process for ``gpu-b`` (nvidia backend, synthetic inventory, no
NVML, ``--process-match count`` as the chart runs it) that asks a fake kubelet
PodResources socket (``gleaner.testing.podresources``) which pods hold which GPUs — the
test answers as the kubelet would for that Pod: GPU 0 — and writes the
NodeTrace; the real ``gleaner operator`` process. A two-GPU job cannot go on ``gpu-b``
(Unschedulable, the reason naming the Pod in its condition and its ``FailedScheduling``
Event); a one-GPU job runs there on GPU 1, never GPU 0; the NodeTrace and the Node carry a
``GPUUninstrumented`` Event; the operator's dashboard API lists GPU 0's process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from gleaner.api.contract import LABEL_JOB
from gleaner.runtime_agent.podresources import ContainerDevices
from gleaner.runtime_agent.simulated import synthetic_inventory
from gleaner.testing.controlplane import (
    GPU_PRODUCT_LABEL,
    ControlPlane,
    apply,
    get_json,
    poll,
    running_operator_process,
)
from gleaner.testing.controlplane_plugin import GPU_NODES
from gleaner.testing.kube import offlinejob_manifest
from gleaner.testing.net import free_port
from gleaner.testing.podresources import FakePodResources
from gleaner.testing.processes import ManagedProcess

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None], what: str | Callable[[], str], timeout: float = 120
) -> T:
    return poll(check, what, timeout)


NODE = "gpu-b"
GPU_B_PRODUCT = next(n.product for n in GPU_NODES if n.name == NODE)
GPUS = 2
MEMORY_GIB = 80.0


def events(plane: ControlPlane, kind: str, name: str, namespace: str) -> list[dict[str, Any]]:
    found = get_json(
        plane, "events", "-n", namespace,
        f"--field-selector=involvedObject.kind={kind},involvedObject.name={name}",
    )  # fmt: skip
    return list((found or {}).get("items", []))


@pytest.fixture
def web(control_plane: ControlPlane, namespace: str) -> str:
    """The online service's Pod (one GPU, no opt-in) on gpu-b, run by KWOK; its name.

    A bare Pod shaped like a Deployment's replica: the harness's controller manager runs
    only the controllers in ``CONTROLLERS`` (docs/controlplane.md), no Deployment or
    ReplicaSet one, and nothing here depends on who created the Pod."""
    name = "web-7d9f8c6b5-x2x4q"
    apply(
        control_plane,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
            "spec": {
                "nodeName": NODE,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "server",
                        "image": "vllm/vllm-openai:latest",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ],
            },
        },
    )

    def running() -> str | None:
        pod = get_json(control_plane, "pod", name, "-n", namespace) or {}
        return name if pod.get("status", {}).get("phase") == "Running" else None

    return wait_for(running, lambda: "the web Pod never ran on gpu-b")


@pytest.fixture
def agent(
    control_plane: ControlPlane, gleaner_crds: list[str], web: str, namespace: str, tmp_path: Path
) -> Iterator[ManagedProcess]:
    """The real agent for gpu-b, its kubelet saying the web Pod holds GPU 0."""
    inventory = synthetic_inventory(NODE, GPUS, MEMORY_GIB)
    held = ContainerDevices(f"{namespace}/{web}", "server", "nvidia.com/gpu", (inventory[0].uuid,))
    socket_dir = tmp_path / "run"
    socket_dir.mkdir()
    with FakePodResources(tmp_path / "kubelet.sock", [held]):
        process = ManagedProcess(
            "gleaner-agent",
            [
                sys.executable, "-m", "gleaner.cli.main", "agent", "--backend", "nvidia",
                "--node", NODE, f"--gpus={GPUS}", f"--gpu-memory-gib={MEMORY_GIB}",
                "--no-nvml", "--process-match", "count",
                "--pod-resources-socket", str(tmp_path / "kubelet.sock"),
                "--socket-dir", str(socket_dir), "--report-interval", "1s",
                f"--metrics-port={free_port()}", "--metrics-host=127.0.0.1",
                "--kubeconfig", str(control_plane.admin_kubeconfig),
            ],
            tmp_path / "agent.log",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ).start()  # fmt: skip
        try:
            yield process
        finally:
            process.stop(grace=10)
            control_plane.kubectl("delete", "nt", NODE, "--wait=false", check=False)
            print(process.log()[-4000:])  # shown by pytest only when the test failed


@pytest.fixture
def operator(
    control_plane: ControlPlane, gleaner_crds: list[str], kopf_crds: list[str], tmp_path: Path
) -> Iterator[tuple[ManagedProcess, int]]:
    apply(
        control_plane,
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": "gleaner"},
        },
    )
    port = free_port()
    with running_operator_process(
        control_plane.admin_kubeconfig, tmp_path / "operator.log", http_port=port
    ) as process:
        yield process, port


def test_no_offline_job_goes_on_the_gpu_of_an_uninstrumented_deployment(
    control_plane: ControlPlane,
    namespace: str,
    web: str,
    agent: ManagedProcess,
    operator: tuple[ManagedProcess, int],
) -> None:
    op, port = operator
    who = f"pod {namespace}/{web}"
    reason = f"GPU 0 runs an uninstrumented process ({who})"

    def log() -> str:
        return "\n".join(["agent:", *agent.log_tail(20), "operator:", *op.log_tail(30)])

    def reported() -> dict[str, Any] | None:
        trace = get_json(control_plane, "nt", NODE) or {}
        gpus = trace.get("status", {}).get("perGPU") or []
        gpu0: dict[str, Any] = next((g for g in gpus if g.get("index") == 0), {})
        return trace if gpu0.get("uninstrumentedProcesses") else None

    trace = wait_for(reported, log)
    status = trace["status"]
    assert status["uninstrumentedGuard"] == "Enforced"
    (proc,) = status["perGPU"][0]["uninstrumentedProcesses"]
    assert proc == {"pid": 0, "pod": f"{namespace}/{web}", "reason": "unshimmed"}
    assert not status["perGPU"][1].get("uninstrumentedProcesses")

    # Both jobs may go to gpu-b only (its Node's product label): another test's NodeTrace
    # for gpu-a must not give them a way out.
    jobs = [
        offlinejob_manifest("pair", namespace=namespace, gpus=2, sla=0.05),
        offlinejob_manifest("single", namespace=namespace, gpus=1, sla=0.05),
    ]
    for manifest in jobs:
        manifest["spec"]["gpuSelector"] = {"nodeSelector": {GPU_PRODUCT_LABEL: GPU_B_PRODUCT}}
    apply(control_plane, *jobs)

    def job(name: str) -> dict[str, Any]:
        return get_json(control_plane, "oj", name, "-n", namespace) or {}

    def phase(name: str, want: str) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            if not op.alive():
                raise AssertionError(f"the operator exited ({op.state()}):\n{log()}")
            got = job(name)
            return got if got.get("status", {}).get("phase") == want else None

        return check

    # The pair fits only on gpu-b, and GPU 0 is not usable: Unschedulable, saying why.
    pair = wait_for(phase("pair", "Unschedulable"), lambda: f"{job('pair')}\n{log()}")
    assert reason in pair["status"]["message"], pair["status"]
    messages = [c.get("message", "") for c in pair["status"]["conditions"]]
    assert any(reason in m for m in messages), messages

    # The Event is posted just after the status write: wait for it rather than read once.
    def failed_scheduling() -> list[dict[str, Any]] | None:
        found = [e for e in events(control_plane, "OfflineJob", "pair", namespace)
                 if e["reason"] == "FailedScheduling"]  # fmt: skip
        return found or None

    failed = wait_for(failed_scheduling, log, timeout=60)
    assert reason in failed[-1]["message"]
    described = control_plane.kubectl("describe", "oj", "pair", "-n", namespace).stdout
    assert reason in described

    # One GPU: it runs on gpu-b's GPU 1, never GPU 0.
    single = wait_for(phase("single", "Running"), lambda: f"{job('single')}\n{log()}")
    placement = single["status"]["placement"]
    assert (placement["node"], placement["gpuIndices"]) == (NODE, [1])
    pods = get_json(control_plane, "pods", "-n", namespace, "-l", f"{LABEL_JOB}=single") or {}
    assert [p["spec"]["nodeName"] for p in pods["items"]] == [NODE]

    # The NodeTrace and the Node carry the Event.
    for kind in ("NodeTrace", "Node"):

        def posted(kind: str = kind) -> list[dict[str, Any]]:
            found = events(control_plane, kind, NODE, "default")
            return [e for e in found if e["reason"] == "GPUUninstrumented"]

        def missing(kind: str = kind) -> str:
            return f"no GPUUninstrumented Event on the {kind}"

        notes = wait_for(posted, missing)
        assert reason in notes[0]["message"] and notes[0]["type"] == "Warning"

    # The dashboard's data (the operator serves it) names the process on GPU 0.
    node = httpx.get(f"http://127.0.0.1:{port}/api/nodes/{NODE}", timeout=30).json()
    assert node["uninstrumentedGuard"] == "Enforced"
    gpu0 = next(g for g in node["gpus"] if g["index"] == 0)
    assert gpu0["uninstrumented"] == [f"{who} (unshimmed)"]
