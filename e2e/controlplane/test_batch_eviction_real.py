"""A ``spec.batch`` job evicted mid-batch by the real operator finishes with every request
answered exactly once.

The ``gleaner operator`` process runs against the real API server (``tenant``,
docs/controlplane.md) as a ServiceAccount bound to exactly the chart's ``OPERATOR_RULES``
(any refused call fails the test), with the fast test flags (the SLA monitor judges each
1 s window: ``--max-sla-window=1s``, one missed window evicts). Two KWOK GPU nodes publish
NodeTraces as their agents would: ``a`` first, where the job is placed, then ``b``.

KWOK runs no containers, so the test plays the kubelet for the batch Pod's runner: once
KWOK has a Pod of the job Running, the test starts that Pod's own runner command
(``python -m gleaner.batch.runner`` with the Pod's arguments) as a process, with the Pod's
claim mount ``/data`` mapped to one directory that every attempt shares (the job's
PersistentVolumeClaim) and the engine, which would be the Pod's sidecar, played by the fake
OpenAI engine (``gleaner.testing.openai_engine``). Its ``GET /progress`` port is the Pod's
and is not reachable at KWOK's Pod IP, so ``status.batch`` stays empty here; the operator's
progress tick is tested in test_batch_real.py.

Mid-batch, node ``a``'s agent reports its offline time collapsed (a NodeTrace whose window
shows the GPUs given to online work): the SLA monitor sees the job miss its SLA and evicts
it, and deletes its Pod; the test, as the kubelet, stops that Pod's runner with SIGTERM
(then SIGKILL after a grace, as the kubelet does). The operator places the job again on
``b``; the test runs the new Pod's runner on the same claim, which continues from the
checkpoint; when it exits 0 the test reports the container terminated and the Pod
Succeeded. The job must be Succeeded with one eviction, and the output must hold every
request of the input exactly once with the engine's answer for it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gleaner.operator.rbac import OPERATOR_RULES
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    serve_refusing_nothing,
    wait_for,
)
from gleaner.testing.net import free_port
from gleaner.testing.openai_engine import FakeOpenAIEngine, expected_text
from gleaner.testing.processes import ManagedProcess
from gleaner.testing.tenant import Tenant

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(300)]

JOB = "nightly"
REQUESTS = 300
DATA = "/data"


@pytest.fixture
def operator(tenant: Tenant) -> Iterator[OperatorProcess]:
    tenant.apply_nodetrace(nodetrace_manifest(tenant.node("a"), gpus=2, offline_enabled=0.9))
    account = tenant.operator_account(OPERATOR_RULES)
    args = [*FAST_OPERATOR_FLAGS, f"--peering={tenant.peering}"]
    args += [f"--http-port={free_port()}", "--http-host=127.0.0.1"]
    yield from serve_refusing_nothing(OperatorProcess(account, args))


def batch_job(namespace: str) -> dict[str, Any]:
    manifest = offlinejob_manifest(JOB, namespace=namespace, sla=0.5, standalone=1000.0)
    del manifest["spec"]["template"]
    manifest["spec"]["batch"] = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "engineImage": "vllm/vllm-openai:v0.8.5",
        "claimName": "batch-data",
        "input": "in/requests.jsonl",
        "output": "run",
        "concurrency": 2,
    }
    return manifest


def request(i: int) -> dict[str, Any]:
    return {
        "custom_id": f"doc-{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": f"doc {i}"}]},
    }


def find_pod(tenant: Tenant, name: str) -> Any:
    """The job's Pod called ``name`` (a kubernetes client object), or None."""
    pods = tenant.api.pods(selector=f"gleaner.dev/job={JOB}")
    return next((p for p in pods if p.metadata.name == name), None)


def running_pod(tenant: Tenant, name: str) -> dict[str, Any] | None:
    got = find_pod(tenant, name)
    if got is None or got.status.phase != "Running" or got.metadata.deletion_timestamp:
        return None
    return dict(tenant.api.client.sanitize_for_serialization(got))


def pod_gone_or_going(tenant: Tenant, name: str) -> bool:
    got = find_pod(tenant, name)
    return got is None or got.metadata.deletion_timestamp is not None


def start_runner(pod: dict[str, Any], claim: Path, engine: FakeOpenAIEngine) -> ManagedProcess:
    """The kubelet's part: run the Pod's runner container, its claim mounted at ``claim``
    and its sidecar engine at ``engine``."""
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "gleaner.batch.runner"]
    args: list[str] = []
    given = iter(container["args"])
    for flag in given:
        value = next(given)
        if flag == "--engine-url":
            value = engine.url  # the sidecar, on the Pod's localhost
        elif flag == "--progress-port":
            value = str(free_port())  # the Pod's own port, on this machine
        elif value.startswith(DATA + "/"):
            value = str(claim / value[len(DATA) + 1 :])
        args += [flag, value]
    name = pod["metadata"]["name"]
    return ManagedProcess(
        name,
        [sys.executable, "-m", "gleaner.batch.runner", *args, "--checkpoint-every", "8"],
        claim.parent / f"{name}.log",
    ).start()


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_batch_evicted_mid_way_finishes_with_every_request_answered_once(
    tenant: Tenant, operator: OperatorProcess, tmp_path: Path
) -> None:
    claim = tmp_path / "claim"
    (claim / "in").mkdir(parents=True)
    requests = [request(i) for i in range(REQUESTS)]
    (claim / "in" / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    output = claim / "run" / "output.jsonl"
    tenant.api.create_job(batch_job(tenant.namespace))
    runners: list[ManagedProcess] = []

    def logs() -> str:
        job = tenant.api.get_job(JOB) or {}
        tails = "\n".join(f"--- {r.name}\n" + "\n".join(r.log_tail(10)) for r in runners)
        return f"status: {job.get('status')}\n{tails}\n{operator.log()[-4000:]}"

    def first_pod() -> dict[str, Any] | None:
        return running_pod(tenant, f"{JOB}-0")

    # Attempt 0, on a: a slow engine (2 requests in flight, 0.2 s each: 30 s for the batch).
    with FakeOpenAIEngine(delay=0.2) as slow:
        pod0 = wait_for(first_pod, timeout=90, message=logs)
        assert pod0["spec"]["nodeName"] == tenant.node("a")
        runners.append(start_runner(pod0, claim, slow))
        # Another node's agent starts reporting: somewhere to go after the eviction.
        tenant.apply_nodetrace(nodetrace_manifest(tenant.node("b"), gpus=2, offline_enabled=0.8))
        wait_for(lambda: len(lines(output)) >= 20 or None, timeout=90, message=logs)

        # a's agent reports its GPUs taken by online work: the job misses its SLA there.
        tenant.apply_nodetrace(nodetrace_manifest(tenant.node("a"), gpus=2, offline_enabled=0.05))
        wait_for(partial(pod_gone_or_going, tenant, f"{JOB}-0"), timeout=90, message=logs)
        code = runners[0].stop(grace=30)  # the kubelet: SIGTERM, SIGKILL after the grace
        assert code == 1, logs()  # stopped, not done
    done_first = len(lines(output))
    assert 20 <= done_first < REQUESTS, "the eviction must come mid-batch"

    def second_pod() -> dict[str, Any] | None:
        return running_pod(tenant, f"{JOB}-1")

    # Attempt 1, on b: the runner continues from the checkpoint on the same claim.
    with FakeOpenAIEngine() as fast:
        pod1 = wait_for(second_pod, timeout=90, message=logs)
        assert pod1["spec"]["nodeName"] == tenant.node("b")
        runners.append(start_runner(pod1, claim, fast))
        wait_for(lambda: runners[1].returncode() is not None or None, timeout=120, message=logs)
        assert runners[1].returncode() == 0, logs()
        resent = sum(fast.served.values())
    # It sent only what had no answer (and at most what was in flight when a's was stopped).
    assert REQUESTS - done_first <= resent <= REQUESTS - done_first + 2

    # The kubelet reports the runner's exit; the engine sidecar is stopped with it.
    tenant.api.core.patch_namespaced_pod_status(
        f"{JOB}-1",
        tenant.namespace,
        {"status": {"phase": "Succeeded"}},
    )

    def succeeded() -> dict[str, Any] | None:
        job = tenant.api.get_job(JOB) or {}
        return job if (job.get("status") or {}).get("phase") == "Succeeded" else None

    job = wait_for(succeeded, timeout=90, message=logs)
    status = job["status"]
    assert status["evictionCount"] == 1
    assert status["evictions"][0]["node"] == tenant.node("a")
    assert status["evictions"][0]["type"] == "SLAEviction"

    answered = lines(output)
    ids = [a["custom_id"] for a in answered]
    assert sorted(ids) == sorted(r["custom_id"] for r in requests)  # each exactly once
    by_id = {r["custom_id"]: r["body"] for r in requests}
    for a in answered:
        content = a["response"]["body"]["choices"][0]["message"]["content"]
        assert content == expected_text(by_id[a["custom_id"]])
    assert lines(claim / "run" / "errors.jsonl") == []
    checkpoint = json.loads((claim / "run" / "checkpoint.json").read_text())["progress"]
    assert checkpoint["complete"] is True
    assert checkpoint["starts"] == 2
