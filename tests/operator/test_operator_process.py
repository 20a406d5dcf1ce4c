"""The real ``gleaner operator`` process against the real Kubernetes control plane.

Each test gets its share of the worker's control plane (``tenant``: a namespace, node names
and a kopf peering of its own; docs/controlplane.md), starts operator subprocesses
(KUBECONFIG pointing at the API server, kopf peering on) and drives them the way users,
agents and the kubelet would: by creating and patching objects through the ``kubernetes``
client. Pods bound to a node with a KWOK Node turn Running through KWOK; tests that assert
on the Scheduled phase publish NodeTraces for nodes without one (``kwok=False``), whose
Pods stay Pending as on a node whose kubelet has not started them yet.

One test stays on kmock's emulator, and says why: the real API server refuses its invalid
spec at admission (the CRD's CEL rules), so only an API server without them lets it reach
the operator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.api.contract import FINALIZER
from gleaner.api.nodetrace import gpu_uuid
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    KubeApi,
    KubeEmulator,
    KubeTarget,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    wait_for,
)
from gleaner.testing.net import free_port
from gleaner.testing.tenant import Tenant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class Cluster:
    """The operators of one test and helpers over its API server: the real control plane
    (``tenant``) or, where a test says why, kmock's emulator (``kube``)."""

    def __init__(self, target: KubeTarget, api: KubeApi, tenant: Tenant | None = None) -> None:
        self.target = target
        self.tenant = tenant
        self.api = api
        self.ns = api.namespace
        self.operators: list[OperatorProcess] = []
        self.port = free_port()

    @classmethod
    def real(cls, tenant: Tenant) -> Cluster:
        return cls(tenant, tenant.api, tenant)

    @classmethod
    def emulated(cls, kube: KubeEmulator) -> Cluster:
        return cls(kube, KubeApi(kube))

    @property
    def peering(self) -> str:
        return self.tenant.peering if self.tenant is not None else "gleaner"

    def node(self, name: str) -> str:
        return self.tenant.node(name) if self.tenant is not None else name

    def apply_nodetrace(self, manifest: dict[str, Any], *, kwok: bool = True) -> None:
        if self.tenant is not None:
            self.tenant.apply_nodetrace(manifest, kwok=kwok)
        else:
            self.api.apply_nodetrace(manifest)

    def start_operator(self, *extra: str, env: dict[str, str] | None = None) -> OperatorProcess:
        op = OperatorProcess(
            self.target,
            [
                *FAST_OPERATOR_FLAGS, f"--peering={self.peering}",
                f"--http-port={self.port}", "--http-host=127.0.0.1", *extra,
            ],
            env=env,
            log_name=f"operator-{len(self.operators)}.log",
        ).start()  # fmt: skip
        self.operators.append(op)
        return op

    def logs(self) -> str:
        return "\n".join(op.log()[-4000:] for op in self.operators)

    def job(self, name: str) -> dict[str, Any]:
        job = self.api.get_job(name)
        assert job is not None
        return job

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.job(name).get("status") or {})

    def wait_phase(self, name: str, *phases: str, timeout: float = 30) -> dict[str, Any]:
        return wait_for(
            lambda: s if (s := self.status(name)).get("phase") in phases else {},
            timeout=timeout,
            message=lambda: f"{name} not in {phases}: {self.status(name)}\n{self.logs()}",
        )

    def wait_valid(self, name: str) -> dict[str, Any]:
        """Wait until the operator validated ``name``; its status then."""

        def valid() -> dict[str, Any]:
            status = self.status(name)
            cond = _condition(status, "Valid")
            return status if cond is not None and cond["status"] == "True" else {}

        return wait_for(valid, message=lambda: f"{name}: {self.status(name)}\n{self.logs()}")

    def pods_of(self, job: str) -> list[Any]:
        return self.api.pods(selector=f"gleaner.dev/job={job}")

    def wait_pods(self, job: str) -> list[Any]:
        """The job's Pods once there are any (made before the placement is recorded)."""
        return wait_for(lambda: self.pods_of(job), message=self.logs)

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        status = self.status(name)
        cond = _condition(status, type_)
        if cond is None:
            raise AssertionError(f"{name} has no condition {type_}: {status}")
        return cond

    def events_for(self, name: str, reason: str) -> list[Any]:
        """``name``'s Events for ``reason`` in the order they were made: an API server lists
        them by name (random suffixes), and their resourceVersions (etcd revisions) give
        the order of their creation."""
        events = [
            e for e in self.api.events() if e.involved_object.name == name and e.reason == reason
        ]
        return sorted(events, key=lambda e: int(e.metadata.resource_version))


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in status.get("conditions", []):
        if cond["type"] == type_:
            return dict(cond)
    return None


@pytest.fixture
def cluster(tenant: Tenant) -> Iterator[Cluster]:
    c = Cluster.real(tenant)
    try:
        yield c
    finally:
        for op in c.operators:
            op.stop()
        print(c.logs())  # shown by pytest only when the test failed


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[Cluster]:
    with KubeEmulator(tmp_path) as kube:
        c = Cluster.emulated(kube)
        try:
            yield c
        finally:
            for op in c.operators:
                op.stop()
            print(c.logs())  # shown by pytest only when the test failed


def _env(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env}


def test_apply_binds_a_pod_that_follows_the_contract(cluster: Cluster) -> None:
    node_a = cluster.node("node-a")
    cluster.apply_nodetrace(nodetrace_manifest(node_a, gpus=2, offline_enabled=0.9))
    cluster.start_operator()
    cluster.api.create_job(offlinejob_manifest("llama", namespace=cluster.ns, sla=0.5))

    # KWOK runs the Pod as soon as it is bound: the job may be Running already.
    status = cluster.wait_phase("llama", "Scheduled", "Running")
    pods = cluster.wait_pods("llama")
    assert [p.metadata.name for p in pods] == ["llama-0"]
    pod = pods[0]
    gpu = int(pod.metadata.annotations["gleaner.dev/gpus"])
    assert pod.spec.node_name == node_a == status["placement"]["node"]
    assert status["placement"]["gpuIndices"] == [gpu]
    assert pod.metadata.labels["gleaner.dev/role"] == "offline"
    assert pod.metadata.labels["gleaner.dev/attempt"] == "0"
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid) == (
        "OfflineJob",
        "llama",
        cluster.job("llama")["metadata"]["uid"],
    )
    env = _env(pod)
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(node_a, gpu)
    assert env["LD_PRELOAD"] == "/var/lib/gleaner/lib/libgleaner_shim.so"
    assert env["GLEANER_JOB"] == f"{cluster.ns}/llama"
    assert "nvidia.com/gpu" not in str(pod.spec.containers[0].resources)
    assert status["placement"]["throughputFraction"] == pytest.approx(0.9)
    assert cluster.condition("llama", "Scheduled")["status"] == "True"
    # The Event is posted after the status write and the Pod: wait for it, do not race it.
    wait_for(lambda: cluster.events_for("llama", "Scheduled"), timeout=60, message=cluster.logs)

    # KWOK runs it (no test patches that), then it completes (KWOK completes no Pod on
    # demand: the test writes the phase, as the kubelet would): the job follows.
    cluster.wait_phase("llama", "Running")
    assert cluster.condition("llama", "Ready")["status"] == "True"
    cluster.api.set_pod_phase("llama-0", "Succeeded")
    cluster.wait_phase("llama", "Succeeded")

    # The operator's own HTTP server.
    base = f"http://127.0.0.1:{cluster.port}"
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
        assert json.load(resp) == {"status": "ok"}
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert "gleaner_operator_placements_total 1.0" in metrics
    assert "gleaner_operator_scheduling_latency_seconds_count" in metrics


def test_two_jobs_never_share_a_gpu(cluster: Cluster) -> None:
    # No KWOK Node: the Pods stay Pending, so the jobs stay Scheduled.
    trace = nodetrace_manifest(cluster.node("node-a"), gpus=2, offline_enabled=0.9)
    cluster.apply_nodetrace(trace, kwok=False)
    cluster.start_operator()
    for i in range(3):
        cluster.api.create_job(offlinejob_manifest(f"j{i}", namespace=cluster.ns, sla=0.5))
    wait_for(lambda: len(cluster.api.pods()) == 2, message=cluster.logs)
    held = sorted(p.metadata.annotations["gleaner.dev/gpus"] for p in cluster.api.pods())
    assert held == ["0", "1"]

    def phases() -> list[str]:
        return sorted(cluster.status(f"j{i}").get("phase", "") for i in range(3))

    # The third job's pass may finish after the second Pod appears (a loaded machine).
    wait_for(lambda: phases() == ["Scheduled", "Scheduled", "Unschedulable"], message=cluster.logs)
    assert len(cluster.api.pods()) == 2  # and no third Pod came with it


def test_invalid_spec_gets_invalid_with_a_message_and_no_retries(emulated: Cluster) -> None:
    """On kmock: a real API server refuses the decreasing memory curve at admission (the
    CRD's CEL rule, e2e/controlplane/test_real_apiserver.py), so the operator's own check,
    its Invalid phase and its no-retry rule are reachable only without that rule."""
    cluster = emulated
    cluster.api.apply_nodetrace(nodetrace_manifest("node-a", gpus=1))
    cluster.start_operator()
    cluster.api.create_job(offlinejob_manifest("bad", memory_curve=[(10, 900), (40, 400)]))
    cluster.api.create_job(offlinejob_manifest("nocm", profile_from="missing-profile"))

    status = cluster.wait_phase("bad", "Invalid")
    assert "spec.profile.memoryCurve" in status["message"]
    valid = cluster.condition("bad", "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidSpec")
    assert "tokensPerSecond decreases" in valid["message"]
    assert cluster.events_for("bad", "InvalidSpec")

    cluster.wait_phase("nocm", "Invalid")
    assert cluster.condition("nocm", "Valid")["message"] == (
        "spec.profileFrom.name: ConfigMap default/missing-profile not found"
    )
    assert cluster.pods_of("bad") == [] and cluster.pods_of("nocm") == []

    # Fixing the spec re-validates and the job gets placed.
    cluster.api.custom.patch_namespaced_custom_object(
        "gleaner.dev",
        "v1alpha1",
        "default",
        "offlinejobs",
        "bad",
        {"spec": {"profile": offlinejob_manifest("x")["spec"]["profile"]}},
    )
    cluster.wait_phase("bad", "Scheduled")
    # One InvalidSpec event: the invalid job was not retried in a loop.
    assert len(cluster.events_for("nocm", "InvalidSpec")) == 1


def test_jobs_waiting_for_their_profile_configmap_converge_without_edits(
    cluster: Cluster,
) -> None:
    trace = nodetrace_manifest(cluster.node("node-a"), gpus=1, offline_enabled=0.5)
    cluster.apply_nodetrace(trace, kwok=False)
    cluster.start_operator()
    ns = cluster.ns
    profile = yaml.safe_dump(offlinejob_manifest("x")["spec"]["profile"])
    core = cluster.api.core

    def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "data": data}

    def valid_message(name: str) -> str:
        return str(cluster.condition(name, "Valid")["message"])

    cluster.api.create_job(offlinejob_manifest("later", namespace=ns, profile_from="prof"))
    status = cluster.wait_phase("later", "Invalid")
    assert status["message"] == f"spec.profileFrom.name: ConfigMap {ns}/prof not found"

    # The ConfigMap appears, but its profile is not YAML: still Invalid, the message says why.
    core.create_namespaced_config_map(ns, configmap("prof", {"profile.yaml": "a: [1,"}))
    wait_for(
        lambda: "is not valid YAML" in valid_message("later"),
        message=lambda: f"{cluster.status('later')}\n{cluster.logs()}",
    )
    assert valid_message("later").startswith(
        f"spec.profileFrom.key: ConfigMap {ns}/prof key 'profile.yaml' is not valid YAML: "
    )
    # ... then under the wrong key.
    # (a merge patch, as kubectl edit would send: null deletes a key)
    core.patch_namespaced_config_map(
        "prof", ns, {"data": {"profile.yaml": None, "p.yaml": profile}}
    )
    wait_for(
        lambda: "has no key" in valid_message("later"),
        message=lambda: f"{cluster.status('later')}\n{cluster.logs()}",
    )
    assert valid_message("later") == (
        f"spec.profileFrom.key: ConfigMap {ns}/prof has no key 'profile.yaml' (keys: p.yaml)"
    )
    # Fixed: the job is placed, nobody touched it.
    core.patch_namespaced_config_map("prof", ns, {"data": {"profile.yaml": profile}})
    cluster.wait_phase("later", "Scheduled")
    assert cluster.condition("later", "Valid")["status"] == "True"
    assert cluster.job("later")["metadata"]["generation"] == 1

    # A job waiting for a GPU loses its ConfigMap: Invalid at once, not a pass loop.
    # Its ConfigMap first: created after the job, it could come after the job's first
    # validation (a distinct InvalidSpec Event of its own, which the count below excludes).
    core.create_namespaced_config_map(ns, configmap("prof2", {"profile.yaml": profile}))
    cluster.api.create_job(offlinejob_manifest("waiter", namespace=ns, profile_from="prof2"))
    cluster.wait_phase("waiter", "Unschedulable")
    core.delete_namespaced_config_map("prof2", ns)
    status = cluster.wait_phase("waiter", "Invalid")
    assert status["message"] == f"spec.profileFrom.name: ConfigMap {ns}/prof2 not found"

    # Unrelated ConfigMaps re-validate nobody, and nothing was retried in a loop: one
    # InvalidSpec Event per distinct problem.
    for i in range(5):
        core.create_namespaced_config_map(ns, configmap(f"other-{i}", {"k": "v"}))
    time.sleep(2)
    assert f"{ns}/other-" not in cluster.logs()
    assert [e.message.split(":")[0] for e in cluster.events_for("later", "InvalidSpec")] == [
        "spec.profileFrom.name",
        "spec.profileFrom.key",
        "spec.profileFrom.key",
    ]
    assert len(cluster.events_for("waiter", "InvalidSpec")) == 1
    assert cluster.status("waiter")["phase"] == "Invalid"


def test_unschedulable_says_why_and_is_retried_when_nodetraces_change(cluster: Cluster) -> None:
    busy = cluster.node("busy")
    cluster.apply_nodetrace(nodetrace_manifest(busy, gpus=2, offline_enabled=0.3), kwok=False)
    cluster.start_operator()
    cluster.api.create_job(offlinejob_manifest("picky", namespace=cluster.ns, sla=0.8))

    status = cluster.wait_phase("picky", "Unschedulable")
    cond = cluster.condition("picky", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"].startswith("0/1 nodes are available")
    assert status["message"] == cond["message"]
    assert "nextAttemptAfter" in status
    events = wait_for(lambda: cluster.events_for("picky", "FailedScheduling"))
    assert events[0].type == "Warning"

    # The node's online load drops (its agent reports a new window): the job fits now.
    cluster.apply_nodetrace(nodetrace_manifest(busy, gpus=2, offline_enabled=0.95), kwok=False)
    cluster.wait_phase("picky", "Scheduled")
    assert [p.spec.node_name for p in cluster.wait_pods("picky")] == [busy]


def test_gpu_selector_matches_node_labels_and_follows_relabelling(cluster: Cluster) -> None:
    assert cluster.tenant is not None
    node_a, node_b = cluster.node("node-a"), cluster.node("node-b")
    for name in (node_a, node_b):
        cluster.apply_nodetrace(nodetrace_manifest(name, gpus=1, offline_enabled=0.9), kwok=False)
    # Nodes as a kubelet registers them, which no KWOK runs: the Pods stay Pending.
    cluster.tenant.apply_node(node_a, {"pool": "a100"})
    cluster.tenant.apply_node(node_b, {"pool": "h100"})
    cluster.start_operator()

    pinned = offlinejob_manifest("pinned", namespace=cluster.ns)
    pinned["spec"]["gpuSelector"] = {"nodeSelector": {"pool": "h100"}}
    cluster.api.create_job(pinned)
    status = cluster.wait_phase("pinned", "Scheduled")
    assert status["placement"]["node"] == node_b

    nowhere = offlinejob_manifest("nowhere", namespace=cluster.ns)
    nowhere["spec"]["gpuSelector"] = {"nodeSelector": {"pool": "l4"}}
    cluster.api.create_job(nowhere)
    status = cluster.wait_phase("nowhere", "Unschedulable")
    assert status["message"] == "0/2 nodes are available: 2 didn't match gpuSelector node labels."
    assert cluster.condition("nowhere", "Scheduled")["message"] == status["message"]

    # An administrator relabels node-a (kubectl label --overwrite): the Node watch sees it
    # and the job is placed there.
    cluster.tenant.apply_node(node_a, {"pool": "l4"})
    status = cluster.wait_phase("nowhere", "Scheduled")
    assert status["placement"]["node"] == node_a
    assert [p.spec.node_name for p in cluster.wait_pods("nowhere")] == [node_a]


def test_sla_miss_evicts_reports_and_reschedules_elsewhere(cluster: Cluster) -> None:
    node_a, node_b = cluster.node("node-a"), cluster.node("node-b")
    cluster.apply_nodetrace(nodetrace_manifest(node_a, gpus=1, offline_enabled=0.95))
    cluster.apply_nodetrace(nodetrace_manifest(node_b, gpus=1, offline_enabled=0.7))
    cluster.start_operator()
    job = offlinejob_manifest("victim", namespace=cluster.ns, sla=0.6, max_evictions=3)
    cluster.api.create_job(job)

    # KWOK runs the Pod as soon as it is bound: the job may be Running already.
    first = cluster.wait_phase("victim", "Scheduled", "Running")["placement"]["node"]
    other = {node_a: node_b, node_b: node_a}[first]
    # The placement is recorded before the Pod is created: wait for the Pod first.
    cluster.wait_pods("victim")
    cluster.wait_phase("victim", "Running")

    # The agent of the job's node reports a window in which the job's GPU was starved.
    cluster.apply_nodetrace(nodetrace_manifest(first, gpus=1, offline_enabled=0.05))
    status = cluster.wait_phase("victim", "Evicted", "Scheduled")
    assert status["evictionCount"] == 1
    assert status["excludedNodes"] == [first]
    record = status["evictions"][0]
    assert record["node"] == first and record["observedThroughputFraction"] < 0.1
    assert record["report"] == "victim-sla-eviction-1"
    # The Event follows the status write (and the Pods' deletion): wait for it.
    wait_for(lambda: cluster.events_for("victim", "SLAViolation"), message=cluster.logs)

    reports = cluster.api.configmaps(selector="gleaner.dev/report=sla-eviction")
    assert [cm.metadata.name for cm in reports] == ["victim-sla-eviction-1"]
    report = json.loads(reports[0].data["report.json"])
    assert report["job"] == f"{cluster.ns}/victim" and report["node"] == first
    assert report["outcome"] == "requeued"

    # After the backoff it runs again, on the other node, as attempt 1 (KWOK runs it).
    status = cluster.wait_phase("victim", "Scheduled", "Running")
    assert status["placement"]["node"] == other
    # The evicted Pod goes once KWOK has finalized its deletion.
    pods = wait_for(
        lambda: (
            [p for p in cluster.pods_of("victim") if p.metadata.deletion_timestamp is None]
            if len(cluster.pods_of("victim")) == 1
            else []
        ),
        message=cluster.logs,
    )
    assert [(p.metadata.name, p.spec.node_name) for p in pods] == [("victim-1", other)]

    # `gleaner report evictions` reads the report back from the cluster.
    env = {**os.environ, "KUBECONFIG": str(cluster.target.kubeconfig)}
    for fmt in ("json", "csv", "markdown", "table"):
        out = subprocess.run(
            [sys.executable, "-m", "gleaner.cli.main", "report", "evictions", "--format", fmt],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert "victim" in out and first in out, (fmt, out)
    rows = json.loads(
        subprocess.run(
            [sys.executable, "-m", "gleaner.cli.main", "report", "evictions", "--format=json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert [(r["job"], r["node"], r["evictionCount"]) for r in rows] == [
        (f"{cluster.ns}/victim", first, 1)
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "gleaner.cli.main", "report", "evictions", "--since", "soon"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: --since")


def test_deleting_a_job_deletes_its_pods(cluster: Cluster) -> None:
    cluster.apply_nodetrace(nodetrace_manifest(cluster.node("node-a"), gpus=1))
    cluster.start_operator()
    cluster.api.create_job(offlinejob_manifest("doomed", namespace=cluster.ns))
    cluster.wait_pods("doomed")
    assert cluster.job("doomed")["metadata"]["finalizers"] == ["gleaner.dev/finalizer"]

    cluster.api.delete_job("doomed")
    wait_for(lambda: cluster.api.get_job("doomed") is None, message=cluster.logs)
    # The finalizer is removed only after the Pods were deleted: any Pod still listed is
    # terminating (the node agent, KWOK here, removes it a moment later).
    assert all(pod.metadata.deletion_timestamp for pod in cluster.pods_of("doomed"))
    wait_for(lambda: cluster.pods_of("doomed") == [], message=cluster.logs)


def test_restart_mid_binding_converges_without_duplicate_pods(cluster: Cluster) -> None:
    cluster.apply_nodetrace(nodetrace_manifest(cluster.node("node-a"), gpus=4))
    first = cluster.start_operator(env={"GLEANER_OPERATOR_BIND_DELAY": "120"})
    names = [f"r{i}" for i in range(4)]
    # r0's Pod is made at once and its status write is held back (the bind delay). The next
    # pass does not wait for it: it places r1-r3, which arrived meanwhile, on the GPUs r0
    # left (their status writes are held back too). Which jobs one pass sees depends on
    # timing, so the test sets the split up instead of hoping all four land in one pass.
    cluster.api.create_job(offlinejob_manifest("r0", namespace=cluster.ns))
    wait_for(lambda: len(cluster.pods_of("r0")) == 1, timeout=60, message=cluster.logs)
    for name in names[1:]:
        cluster.api.create_job(offlinejob_manifest(name, namespace=cluster.ns))
    wait_for(lambda: len(cluster.api.pods()) == 4, timeout=60, message=cluster.logs)
    made = {p.metadata.name: p for p in cluster.api.pods()}
    assert sorted(p.metadata.annotations["gleaner.dev/gpus"] for p in made.values()) == [
        "0",
        "1",
        "2",
        "3",
    ]
    assert all(FINALIZER in (cluster.job(n)["metadata"].get("finalizers") or []) for n in names)
    # Killed with four Pods made and no placement recorded.
    assert all(cluster.status(n).get("placement") is None for n in names)
    first.kill()

    cluster.start_operator()
    for name in names:
        status = cluster.wait_phase(name, "Scheduled", "Running", timeout=60)
        [pod] = cluster.pods_of(name)
        # The Pod made before the crash, adopted: not deleted, not made again.
        assert pod.metadata.uid == made[f"{name}-0"].metadata.uid
        assert status["pods"] == [f"{name}-0"]
        assert status["placement"]["node"] == pod.spec.node_name
        assert [int(pod.metadata.annotations["gleaner.dev/gpus"])] == status["placement"][
            "gpuIndices"
        ]
    assert len(cluster.api.pods()) == 4

    # And restarting once more changes nothing: the resumed jobs are seen, nothing is added.
    cluster.operators[-1].stop()
    third = cluster.start_operator()
    wait_for(lambda: third.log().count("resumed: unchanged") >= 4, timeout=60, message=third.log)
    assert sorted(p.metadata.name for p in cluster.api.pods()) == [f"{n}-0" for n in names]
    # The Pod and NodeTrace handlers run on every change (and, before the scheduling loop
    # kept the backoffs itself, a requeue timer ticked every second for each waiting job);
    # their successes are not logged (thousands a minute in a busy cluster), the
    # validations are.
    time.sleep(2.5)
    routine = ("Timer 'requeue'", "Handler 'follow'", "Handler 'nodetrace'")
    assert [line for line in third.log().splitlines() if any(r in line for r in routine)] == []


def test_two_replicas_one_active_and_the_standby_takes_over(cluster: Cluster) -> None:
    """The Helm chart's two replicas: one serves, the other stands by, then takes over.

    Both start with the default (random) peering priority; kopf pauses every replica of a
    tie, so with equal priorities nothing would ever be bound.
    """
    cluster.apply_nodetrace(nodetrace_manifest(cluster.node("node-a"), gpus=2))
    replicas = [cluster.start_operator(f"--http-port={free_port()}") for _ in range(2)]

    def peers() -> dict[str, Any]:
        peering = cluster.api.custom.get_cluster_custom_object(
            "kopf.dev", "v1", "clusterkopfpeerings", cluster.peering
        )
        return dict(peering.get("status") or {})

    # Both replicas have registered, with different priorities, before the first job.
    wait_for(lambda: len(peers()) == 2, timeout=40, message=cluster.logs)
    priorities = sorted(int(p["priority"]) for p in peers().values())
    assert priorities[0] != priorities[1]
    cluster.api.create_job(offlinejob_manifest("first", namespace=cluster.ns))
    wait_for(lambda: cluster.pods_of("first"), timeout=40, message=cluster.logs)
    assert not any("Pausing all operators, including self" in op.log() for op in replicas)

    # The highest priority is the active replica; stopping it hands over to the other.
    [active] = [op for op in replicas if f"priority {priorities[1]}" in op.log()]
    [standby] = [op for op in replicas if op is not active]
    active.stop()
    cluster.api.create_job(offlinejob_manifest("second", namespace=cluster.ns))
    # Takeover waits for the stopped replica's peering entry to go (5 s lifetime), then for
    # kopf to resume and re-list on the real API server: seconds when the machine is quiet,
    # but a run beside other suites once took over 40 s. This test is about who binds, not
    # how fast (exactly one Pod per job, no GPU held twice), so it waits longer.
    wait_for(lambda: cluster.pods_of("second"), timeout=90, message=cluster.logs)
    assert "Resuming operations" in standby.log()
    assert [p.metadata.name for p in cluster.pods_of("first")] == ["first-0"]
    assert [p.metadata.name for p in cluster.pods_of("second")] == ["second-0"]
    held = sorted(p.metadata.annotations["gleaner.dev/gpus"] for p in cluster.api.pods())
    assert held == ["0", "1"]


def test_namespaced_operator_serves_only_its_namespace(cluster: Cluster) -> None:
    assert cluster.tenant is not None
    team_a = cluster.tenant.add_namespace("team-a")
    other = cluster.ns
    c = cluster
    c.apply_nodetrace(nodetrace_manifest(c.node("node-a"), gpus=2), kwok=False)
    c.start_operator(f"--namespace={team_a}")
    c.api.create_job(offlinejob_manifest("mine", namespace=team_a))
    c.api.create_job(offlinejob_manifest("theirs", namespace=other))
    wait_for(lambda: c.api.pods(team_a), message=c.logs)
    assert [p.metadata.name for p in c.api.pods(team_a)] == ["mine-0"]
    # The Pod never runs here (no KWOK stage): the placement is recorded on its own.
    wait_for(
        lambda: (
            ((c.api.get_job("mine", team_a) or {}).get("status") or {}).get("phase") == "Scheduled"
        ),
        message=c.logs,
    )
    assert c.api.pods(other) == []
    assert "status" not in (c.api.get_job("theirs", other) or {})


def _phases_since(cluster: Cluster, name: str, version: str) -> list[str | None]:
    """The phase of every version of job ``name`` the API server stored after ``version``
    (a watch from that resourceVersion replays each write; etcd has not compacted them)."""
    import kubernetes

    seen: list[str | None] = []
    watch: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
    stream = watch.stream(
        cluster.api.custom.list_namespaced_custom_object,
        "gleaner.dev",
        "v1alpha1",
        cluster.ns,
        "offlinejobs",
        field_selector=f"metadata.name={name}",
        resource_version=version,
        timeout_seconds=2,
    )
    for event in stream:
        seen.append(((event["object"] or {}).get("status") or {}).get("phase"))
    return seen


def test_a_pod_that_runs_at_once_is_recorded_with_its_phase_in_one_status_write(
    cluster: Cluster,
) -> None:
    """The Pod is made first; the job's status records the placement once, together with
    Running (the record delay is long here, so only the Pod's phase can record it)."""
    cluster.apply_nodetrace(nodetrace_manifest(cluster.node("node-a"), gpus=2))
    cluster.start_operator("--record-delay=120s")
    created = cluster.api.create_job(offlinejob_manifest("quick", namespace=cluster.ns))
    status = cluster.wait_phase("quick", "Running", timeout=60)
    [pod] = cluster.pods_of("quick")
    assert status["pods"] == ["quick-0"] and status["placement"]["node"] == pod.spec.node_name
    for type_ in ("Scheduled", "Ready", "Valid"):
        assert cluster.condition("quick", type_)["status"] == "True"
    phases = _phases_since(cluster, "quick", created["metadata"]["resourceVersion"])
    assert "Scheduled" not in phases, phases
    assert phases.count("Running") == 1, phases


def test_a_pod_that_does_not_run_is_recorded_scheduled_after_the_record_delay(
    cluster: Cluster,
) -> None:
    cluster.apply_nodetrace(nodetrace_manifest(cluster.node("node-a"), gpus=2), kwok=False)
    cluster.start_operator("--record-delay=1s")
    cluster.api.create_job(offlinejob_manifest("slow", namespace=cluster.ns))
    [pod] = cluster.wait_pods("slow")
    status = cluster.wait_phase("slow", "Scheduled", timeout=30)
    assert status["pods"] == ["slow-0"]
    assert status["placement"]["node"] == pod.spec.node_name
    assert [int(pod.metadata.annotations["gleaner.dev/gpus"])] == status["placement"]["gpuIndices"]


def test_the_job_says_why_this_node_and_why_not_the_other(cluster: Cluster) -> None:
    good, poor = cluster.node("node-a"), cluster.node("node-b")
    cluster.apply_nodetrace(nodetrace_manifest(good, gpus=2, offline_enabled=0.9))
    cluster.apply_nodetrace(nodetrace_manifest(poor, gpus=2, offline_enabled=0.6))
    cluster.start_operator()
    cluster.api.create_job(offlinejob_manifest("why", namespace=cluster.ns, sla=0.7))

    status = cluster.wait_phase("why", "Scheduled", "Running")
    assert status["placement"]["node"] == good
    message = cluster.condition("why", "Scheduled")["message"]
    assert message.startswith(f"placed on {good} GPUs ")
    assert "compute 0.90 x memory" in message and " x bias 1.00 = 0.90" in message
    why_not = f"{poor}: predicted 0.60 < SLA 0.70"
    assert f"next best {why_not}" in message
    # The Event follows the status write that wait_phase saw.
    wait_for(lambda: cluster.events_for("why", "NotChosen"), message=cluster.logs)
    (event,) = cluster.events_for("why", "NotChosen")
    assert event.message.startswith(why_not) and event.message in message
