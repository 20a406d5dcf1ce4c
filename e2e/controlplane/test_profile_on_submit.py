"""Profile on submit on the real control plane: profiling Pods, the fit, the ConfigMap, placement.

The ``gleaner operator`` process runs against the real API server (``tenant``,
docs/controlplane.md) as a ServiceAccount bound to exactly the chart's rules
(``OPERATOR_RULES``; any refused call fails the test), with a NodeTrace for a KWOK GPU
node. A job with ``profileFrom.auto: true`` and no ConfigMap gets profiling Pods, one at a
time, each built from its template and bound like an offline Pod; KWOK runs them. No
engine runs here, so the test plays the kubelet: once KWOK has a profiling Pod Running,
the test runs that Pod's own engine command on the fake ``vllm bench throughput``
(``gleaner.testing.vllm_bench``) and patches the Pod's status to terminated with the run's
JSON as the termination message, as the kubelet does with ``/dev/termination-log``. It
plays the node's agent too: after each run, a NodeTrace window covering it says the gate
was open 75% of the time, so the operator must fit tokens per offline GPU-second (the
runs' wall-clock rate / 0.75). The operator must fit, write the ConfigMap owned by the
job, mark it ``Profiled`` and then place the job normally. A failed run must say why and
be retried with backoff under a new attempt; a ConfigMap measured with an older image
must be measured again and replaced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import yaml

from gleaner.api import Profile
from gleaner.api.contract import LABEL_PROFILING_RUN
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    serve_refusing_nothing,
    wait_for,
)
from gleaner.testing.net import free_port
from gleaner.testing.tenant import Tenant
from gleaner.testing.vllm_bench import result_json

RUN_SECONDS = 20.0
"""How long each played run took, by its container's start and finish times."""
GATE_OPEN = 0.75
"""The share of each run's time its node's agent reports the gate open."""

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(240)]

MEASUREMENT = {
    "kvMinGiB": 0.5,
    "kvMaxGiB": 4.0,
    "baseGiB": 16.0,
    "runs": 3,
    "refine": 1,
    "inputLen": 128,
    "outputLen": 32,
    "numPrompts": 100,
}


@pytest.fixture
def operator(tenant: Tenant) -> Iterator[OperatorProcess]:
    yield from _operator(tenant, [])


POOL_TOLERATION = {"key": "gleaner.dev/profiling", "operator": "Exists", "effect": "NoSchedule"}


def pool_label(tenant: Tenant) -> dict[str, str]:
    return {"gleaner.dev/pool": f"profiling-{tenant.id}"}


@pytest.fixture
def pool_operator(tenant: Tenant) -> Iterator[OperatorProcess]:
    """An operator with a dedicated profiling node pool: a KWOK GPU node labelled as the
    pool, whose agent reports no online work."""
    ((key, value),) = pool_label(tenant).items()
    tenant.add_kwok_node(tenant.node("pool"), labels={key: value})
    tenant.apply_nodetrace(nodetrace_manifest(tenant.node("pool"), gpus=2, offline_enabled=1.0))
    args = [f"--profiling-node-selector={key}={value}"]
    args += [f"--profiling-tolerations={json.dumps([POOL_TOLERATION])}"]
    yield from _operator(tenant, args)


def _operator(tenant: Tenant, extra: list[str]) -> Iterator[OperatorProcess]:
    # The shared node's last report ended before any run can have started (each played run
    # started RUN_SECONDS before it ends): only the reports play_runs publishes cover runs.
    ended = datetime.now(UTC) - timedelta(seconds=RUN_SECONDS + 10)
    trace = nodetrace_manifest(tenant.node("gpu"), gpus=2, offline_enabled=0.9, end=ended)
    tenant.apply_nodetrace(trace)
    account = tenant.operator_account()
    args = [*FAST_OPERATOR_FLAGS, f"--peering={tenant.peering}", *extra]
    args += [f"--http-port={free_port()}", "--http-host=127.0.0.1"]
    yield from serve_refusing_nothing(OperatorProcess(account, args))


def auto_job(name: str, namespace: str) -> dict[str, Any]:
    body = offlinejob_manifest(name, namespace=namespace, profile_from=f"{name}-profile")
    body["spec"]["profileFrom"].update({"auto": True, "measurement": dict(MEASUREMENT)})
    worker = body["spec"]["template"]["spec"]["containers"][0]
    worker["command"] = ["vllm", "serve", "--model=meta-llama/Llama-3.1-8B"]
    return body


def _status(tenant: Tenant, name: str) -> dict[str, Any]:
    job = tenant.api.get_job(name)
    return dict((job or {}).get("status") or {})


def _profiled(tenant: Tenant, name: str) -> dict[str, Any]:
    for cond in _status(tenant, name).get("conditions", []):
        if cond["type"] == "Profiled":
            return dict(cond)
    return {}


def _pod(tenant: Tenant, name: str) -> dict[str, Any] | None:
    import kubernetes

    try:
        pod = tenant.api.core.read_namespaced_pod(name, tenant.namespace)
    except kubernetes.client.ApiException:
        return None
    return dict(tenant.api.client.sanitize_for_serialization(pod))


def _running_pod(tenant: Tenant, name: str) -> dict[str, Any] | None:
    pod = _pod(tenant, name)
    return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _terminate(
    tenant: Tenant, pod: dict[str, Any], exit_code: int, message: str, finished: datetime
) -> None:
    """What the kubelet writes when the container exits: terminated state and message (the
    run started ``RUN_SECONDS`` before ``finished``)."""
    statuses = pod["status"].get("containerStatuses") or []
    assert statuses, pod["status"]  # KWOK reported the container running
    for cs in statuses:
        cs["ready"] = False
        cs["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "message": message,
                "startedAt": _iso(finished - timedelta(seconds=RUN_SECONDS)),
                "finishedAt": _iso(finished),
            }
        }
    phase = "Succeeded" if exit_code == 0 else "Failed"
    tenant.api.core.patch_namespaced_pod_status(
        pod["metadata"]["name"],
        tenant.namespace,
        {"status": {"phase": phase, "containerStatuses": statuses}},
    )


def play_runs(
    tenant: Tenant, job: str, attempt: int, logs: Callable[[], str], node: str = "gpu"
) -> int:
    """Play the kubelet for each profiling Pod of ``attempt`` until ``job`` is Profiled, and
    the agent of a shared node (``node`` "gpu"; the profiling pool's agent reports none)."""

    def next_pod_or_profiled(name: str) -> bool:
        return _pod(tenant, name) is not None or _profiled(tenant, job).get("status") == "True"

    runs = 0
    while True:
        name = f"{job}-profile-{attempt}-{runs}"
        pod = wait_for(partial(_running_pod, tenant, name), timeout=60, message=logs)
        assert pod["metadata"]["labels"][LABEL_PROFILING_RUN] == f"{attempt}-{runs}"
        assert pod["spec"]["nodeName"] == tenant.node(node)
        (container,) = pod["spec"]["containers"]
        assert container["command"][:3] == ["vllm", "bench", "throughput"]
        assert "--model=meta-llama/Llama-3.1-8B" in container["command"]
        # While a run is in progress, the job is Pending and Profiled=False says which.
        cond = wait_for(partial(_profiled, tenant, job), message=logs)
        assert cond["status"] == "False" and cond["reason"] == "Profiling"
        assert _status(tenant, job)["phase"] == "Pending"
        # The kubelet's part: the engine's JSON becomes the termination message.
        finished = datetime.now(UTC).replace(microsecond=0)
        _terminate(tenant, pod, 0, result_json(container["command"][1:]), finished)
        if node == "gpu":
            # The agent's part: its next report covers the run, gate open GATE_OPEN of it.
            window = nodetrace_manifest(
                tenant.node("gpu"),
                gpus=2,
                offline_enabled=GATE_OPEN,
                window_seconds=RUN_SECONDS + 10,
                end=finished + timedelta(seconds=2),
            )
            tenant.api.apply_nodetrace(window)
        runs += 1
        nxt = f"{job}-profile-{attempt}-{runs}"
        wait_for(partial(next_pod_or_profiled, nxt), timeout=60, message=logs)
        if _profiled(tenant, job).get("status") == "True":
            return runs


def test_a_job_without_a_profile_is_profiled_then_placed(
    tenant: Tenant, operator: OperatorProcess
) -> None:
    tenant.api.create_job(auto_job("llama", tenant.namespace))

    def logs() -> str:
        return f"status: {_status(tenant, 'llama')}\n{operator.log()[-4000:]}"

    runs = play_runs(tenant, "llama", 0, logs)
    assert runs == 4  # 3 geometric budgets + 1 refinement

    cms = tenant.api.configmaps(tenant.namespace)
    (cm,) = [c for c in cms if c.metadata.name == "llama-profile"]
    job = tenant.api.get_job("llama")
    assert job is not None
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("OfflineJob", "llama", job["metadata"]["uid"])
    profile = Profile.model_validate(yaml.safe_load(cm.data["profile.yaml"]))
    assert len(profile.memory_curve) == 4
    assert profile.memory_curve[0].memory_gi_b == pytest.approx(16.5)
    assert profile.memory_curve[-1].memory_gi_b == pytest.approx(20.0)
    fit = json.loads(cm.metadata.annotations["gleaner.dev/profile-fit"])
    assert fit["runs"] == 4 and fit["runsWithoutGpuTime"] == 0
    assert fit["offlineShare"] == pytest.approx(GATE_OPEN)
    assert _profiled(tenant, "llama")["message"] == (
        "profile measured in 4 runs on a shared GPU, in tokens per offline GPU-second (the "
        f"gate was open 75% of the runs' time), stored in ConfigMap {tenant.namespace}/"
        "llama-profile"
    )
    # Each run's Pod holds what its node's agent reported, and the curve's last point is
    # the run at the largest budget (run 2), at its wall-clock rate / GATE_OPEN.
    last = _pod(tenant, "llama-profile-0-2")
    assert last is not None
    gpu_time = json.loads(last["metadata"]["annotations"]["gleaner.dev/profile-gpu-time"])
    assert gpu_time["offlineSeconds"] == pytest.approx(GATE_OPEN * gpu_time["wallSeconds"])
    wall = json.loads(result_json(last["spec"]["containers"][0]["command"][1:]))
    wall_rate = wall["output_tokens"] / wall["elapsed_time"]
    assert profile.standalone_tokens_per_second == pytest.approx(wall_rate / GATE_OPEN, rel=0.01)

    # Then normal placement: the job's own Pod, which KWOK runs.
    wait_for(lambda: _status(tenant, "llama").get("phase") == "Running", timeout=60, message=logs)
    assert _pod(tenant, "llama-0") is not None
    reasons = [e.reason for e in tenant.api.events() if e.involved_object.name == "llama"]
    assert reasons.count("Profiling") == 4 and "Profiled" in reasons and "Scheduled" in reasons


def test_a_failed_profiling_run_says_why_and_is_retried_with_backoff(
    tenant: Tenant, operator: OperatorProcess
) -> None:
    tenant.api.create_job(auto_job("mistral", tenant.namespace))

    def logs() -> str:
        return f"status: {_status(tenant, 'mistral')}\n{operator.log()[-4000:]}"

    pod = wait_for(lambda: _running_pod(tenant, "mistral-profile-0-0"), timeout=60, message=logs)
    message = "loading weights\ntorch.OutOfMemoryError: CUDA out of memory"
    _terminate(tenant, pod, 1, message, datetime.now(UTC))

    cond = wait_for(
        lambda: c if (c := _profiled(tenant, "mistral")).get("reason") == "ProfilingFailed" else {},
        timeout=60,
        message=logs,
    )
    assert cond["message"] == (
        "profiling run 0 at 0.5 GiB KV failed: Error (exit code 1): "
        "torch.OutOfMemoryError: CUDA out of memory"
    )
    status = _status(tenant, "mistral")
    assert status["profilingAttempts"] == 1
    assert status["nextAttemptAfter"]
    warnings = [
        e
        for e in tenant.api.events()
        if e.involved_object.name == "mistral" and e.reason == "ProfilingFailed"
    ]
    assert warnings and warnings[0].type == "Warning"
    # After the backoff (1 s with the test flags) the next attempt starts afresh.
    wait_for(lambda: _pod(tenant, "mistral-profile-1-0"), timeout=60, message=logs)
    assert _status(tenant, "mistral")["phase"] == "Pending"


def test_a_profile_measured_with_an_older_image_is_measured_again(
    tenant: Tenant, operator: OperatorProcess
) -> None:
    # The ConfigMap as the operator wrote it for an earlier image of the job's engine.
    old = {
        "standaloneTokensPerSecond": 100.0,
        "requiredMemoryGiB": 18.0,
        "memoryCurve": [
            {"memoryGiB": 17.0, "tokensPerSecond": 50.0},
            {"memoryGiB": 18.0, "tokensPerSecond": 100.0},
        ],
    }
    tenant.api.core.create_namespaced_config_map(
        tenant.namespace,
        {
            "metadata": {
                "name": "qwen-profile",
                "annotations": {"gleaner.dev/profile-image": "vllm/vllm-openai:v0.7.0"},
            },
            "data": {"profile.yaml": yaml.safe_dump(old)},
        },
    )
    tenant.api.create_job(auto_job("qwen", tenant.namespace))

    def logs() -> str:
        return f"status: {_status(tenant, 'qwen')}\n{operator.log()[-4000:]}"

    # Why it is measured again: the Profiled condition says so until the first run starts,
    # and the ProfileNeeded Event keeps it.
    def needed() -> list[str]:
        return [
            e.message
            for e in tenant.api.events()
            if e.involved_object.name == "qwen" and e.reason == "ProfileNeeded"
        ]

    [why] = wait_for(needed, timeout=60, message=logs)
    assert "was measured with image vllm/vllm-openai:v0.7.0" in why
    assert play_runs(tenant, "qwen", 0, logs) == 4

    cm = tenant.api.core.read_namespaced_config_map("qwen-profile", tenant.namespace)
    assert cm.metadata.annotations["gleaner.dev/profile-image"] == "vllm/vllm-openai:latest"
    assert cm.metadata.owner_references[0].name == "qwen"
    profile = Profile.model_validate(yaml.safe_load(cm.data["profile.yaml"]))
    assert profile.standalone_tokens_per_second > 100.0  # the new measurement, not the old
    wait_for(lambda: _status(tenant, "qwen").get("phase") == "Running", timeout=60, message=logs)


def test_on_a_dedicated_profiling_pool_runs_have_their_gpu_to_themselves(
    tenant: Tenant, pool_operator: OperatorProcess
) -> None:
    tenant.api.create_job(auto_job("phi", tenant.namespace))

    def logs() -> str:
        return f"status: {_status(tenant, 'phi')}\n{pool_operator.log()[-4000:]}"

    # Every run lands on the pool's node (the shared node has room too), with the pool's
    # selector and tolerations; no agent report is awaited.
    assert play_runs(tenant, "phi", 0, logs, node="pool") == 4
    first = _pod(tenant, "phi-profile-0-0")
    assert first is not None
    assert first["spec"]["nodeSelector"] == pool_label(tenant)
    assert POOL_TOLERATION in first["spec"]["tolerations"]
    assert first["metadata"]["labels"]["gleaner.dev/profiling-pool"] == "true"
    assert _profiled(tenant, "phi")["message"] == (
        "profile measured in 4 runs on the dedicated profiling node pool (a GPU of its own: "
        f"no correction), stored in ConfigMap {tenant.namespace}/phi-profile"
    )
    cm = tenant.api.core.read_namespaced_config_map("phi-profile", tenant.namespace)
    fit = json.loads(cm.metadata.annotations["gleaner.dev/profile-fit"])
    assert fit["monopolisedRuns"] == 4 and "offlineShare" not in fit
    # The runs count at their wall-clock rate.
    profile = Profile.model_validate(yaml.safe_load(cm.data["profile.yaml"]))
    last = _pod(tenant, "phi-profile-0-2")
    assert last is not None
    wall = json.loads(result_json(last["spec"]["containers"][0]["command"][1:]))
    wall_rate = wall["output_tokens"] / wall["elapsed_time"]
    assert profile.standalone_tokens_per_second == pytest.approx(wall_rate, rel=0.01)
    wait_for(lambda: _status(tenant, "phi").get("phase") == "Running", timeout=60, message=logs)
