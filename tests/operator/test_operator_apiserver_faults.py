"""The real ``gleaner operator`` survives what a real API server does to its clients.

On the worker's real control plane (docs/controlplane.md), with KWOK running the Pods:

- kube-apiserver stops and starts again on the same etcd (an upgrade, a crash): every
  connection drops, then a fresh watch cache answers. A job created the moment the server
  is back is placed, the job placed before keeps its one Pod, and the operator lives on.
- the same, with etcd's history compacted while the server was down: the operator's next
  watch, from a resourceVersion older than the compaction, ends in ``410 Gone`` (the test
  shows the server answering exactly that to such a watch); kopf lists again, and nothing is
  lost or bound twice.

These tests restart the API server that the worker's other tests share; tests on one
control plane run one after another, and each waits until the server is ready again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gleaner.api import GROUP, VERSION
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    wait_for,
)
from gleaner.testing.net import free_port
from gleaner.testing.tenant import Tenant

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def operator(tenant: Tenant) -> Iterator[OperatorProcess]:
    op = OperatorProcess(
        tenant,
        [
            *FAST_OPERATOR_FLAGS, f"--peering={tenant.peering}",
            f"--http-port={free_port()}", "--http-host=127.0.0.1",
        ],
    ).start()  # fmt: skip
    try:
        yield op
    finally:
        op.stop()
        print(op.log()[-6000:])  # shown by pytest only when the test failed


def _phase(tenant: Tenant, name: str) -> str:
    job = tenant.api.get_job(name) or {}
    return str((job.get("status") or {}).get("phase", ""))


def _run_job(tenant: Tenant, operator: OperatorProcess, name: str) -> None:
    """Create ``name`` and wait until KWOK runs its Pod and the job is Running."""
    tenant.api.create_job(offlinejob_manifest(name, namespace=tenant.namespace))
    wait_for(
        lambda: _phase(tenant, name) == "Running",
        timeout=60,
        message=lambda: f"{name}: {tenant.api.get_job(name)}\n{operator.log()[-4000:]}",
    )


def _pods(tenant: Tenant) -> dict[str, tuple[str, str]]:
    """Every Pod of the tenant that is not being deleted: name -> (job, GPU annotation)."""
    return {
        p.metadata.name: (
            p.metadata.labels["gleaner.dev/job"],
            p.metadata.annotations["gleaner.dev/gpus"],
        )
        for p in tenant.api.pods()
        if p.metadata.deletion_timestamp is None
    }


def _check_one_pod_each(tenant: Tenant, jobs: list[str]) -> None:
    pods = _pods(tenant)
    assert sorted(pods) == sorted(f"{job}-0" for job in jobs), pods
    gpus = [gpu for _job, gpu in pods.values()]
    assert len(set(gpus)) == len(gpus), pods  # no GPU held twice
    for job in jobs:
        status = (tenant.api.get_job(job) or {})["status"]
        assert status["phase"] == "Running", status
        assert status["pods"] == [f"{job}-0"], status


def test_an_apiserver_restart_loses_nothing(tenant: Tenant, operator: OperatorProcess) -> None:
    tenant.apply_nodetrace(nodetrace_manifest(tenant.node("node-a"), gpus=4))
    _run_job(tenant, operator, "before")

    tenant.plane.restart_apiserver()

    # Created while the operator may still be reconnecting its watches.
    _run_job(tenant, operator, "after")
    assert operator.alive(), operator.log()[-4000:]
    _check_one_pod_each(tenant, ["before", "after"])


def test_a_410_gone_after_etcd_compaction_loses_nothing(
    tenant: Tenant, operator: OperatorProcess
) -> None:
    plane = tenant.plane
    tenant.apply_nodetrace(nodetrace_manifest(tenant.node("node-a"), gpus=4))
    _run_job(tenant, operator, "before")
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{tenant.namespace}/offlinejobs"
    listed: dict[str, Any] = json.loads(plane.kubectl("get", "--raw", path).stdout)
    seen = int(listed["metadata"]["resourceVersion"])  # no older than the operator's

    plane.stop_apiserver()
    # Writes outside the API server's keys move etcd's revision on; compaction then drops
    # every revision the operator's watches could resume from.
    plane.bump_etcd_revision(3)
    compacted = plane.compact_etcd()
    assert compacted > seen
    plane.start_apiserver()

    # What the operator's watch met: a watch from that version ends in 410 Gone.
    watch = plane.kubectl(
        "get", "--raw", f"{path}?watch=true&resourceVersion={seen}&timeoutSeconds=2",
        check=False,
    )  # fmt: skip
    (event,) = [json.loads(line) for line in watch.stdout.splitlines() if line.strip()]
    assert event["type"] == "ERROR", event
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired"), event
    assert event["object"]["message"].startswith(f"too old resource version: {seen} "), event

    _run_job(tenant, operator, "after")
    assert operator.alive(), operator.log()[-4000:]
    _check_one_pod_each(tenant, ["before", "after"])
