"""The operator's real API calls are all granted by its declared RBAC rules (OPERATOR_RULES).

The Helm chart renders the operator's ClusterRole from ``gleaner.operator.rbac.OPERATOR_RULES``
(tests/helm checks that). This test closes the other side: it runs the real ``gleaner
operator`` against the kmock API emulator through a lifecycle that reaches every kind of
call the operator makes (start-up scans, watches, binding Pods, status patches, finalizers,
Events, Node labels, profile ConfigMaps, an SLA eviction with its report and Pod deletion,
a rescheduling, the job's deletion), records each (API group, resource, verb) the operator's
clients used, and fails on any that no rule grants: on a cluster that call would be a 403.

It stays on kmock on purpose: the emulator records every kind of access each client makes,
which a real API server does not hand a test on demand. The real server's side, the
operator bound to exactly these rules and refused nothing through a bind, run and delete,
is e2e/controlplane/test_operator_real.py.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.operator.rbac import OPERATOR_RULES
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    Access,
    KubeApi,
    KubeEmulator,
    OperatorProcess,
    nodetrace_manifest,
    offlinejob_manifest,
    ungranted,
    wait_for,
)
from gleaner.testing.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# The tests' own client (kubernetes' generated Python client); everything else is the
# operator: kopf's client ("kopf") and gleaner.clients.kube ("gleaner").
TEST_CLIENT = "OpenAPI-Generator"


def test_ungranted_spots_a_missing_verb_resource_or_group() -> None:
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create"]}]
    ok = Access("kopf", "", "pods", "create")
    wrong_verb = Access("kopf", "", "pods", "delete")
    subresource = Access("kopf", "", "pods/status", "get")
    wrong_group = Access("kopf", "apps", "pods", "get")
    assert ungranted([ok, wrong_verb, subresource, wrong_group], rules) == [
        wrong_verb,
        subresource,
        wrong_group,
    ]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeEmulator]:
    with KubeEmulator(tmp_path) as emulator:
        yield emulator


def test_the_emulator_records_each_kind_of_access_once_per_client(kube: KubeEmulator) -> None:
    def call(method: str, path: str, body: dict[str, Any] | None = None) -> None:
        request = urllib.request.Request(
            kube.url + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"User-Agent": "probe/1.0", "Content-Type": "application/merge-patch+json"},
        )
        with contextlib.suppress(urllib.error.HTTPError):
            urllib.request.urlopen(request, timeout=10).close()

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    call("GET", "/api")  # discovery: no RBAC rule needed, not recorded
    call("POST", "/api/v1/namespaces/default/configmaps", cm)
    call("GET", "/api/v1/namespaces/default/configmaps")
    call("GET", "/api/v1/namespaces/default/configmaps")
    call("GET", "/api/v1/namespaces/default/configmaps/c")
    call("PATCH", "/api/v1/namespaces/default/configmaps/c", {"data": {"k": "v"}})
    call("PUT", "/api/v1/namespaces/default/configmaps/c", cm)
    call("PATCH", "/apis/gleaner.dev/v1alpha1/namespaces/default/offlinejobs/j/status", {})
    call("DELETE", "/api/v1/namespaces/default/configmaps/c")
    call("GET", "/api/v1/namespaces?watch=true&timeoutSeconds=1")
    assert kube.accesses("probe") == [
        Access("probe", "", "configmaps", "create"),
        Access("probe", "", "configmaps", "list"),
        Access("probe", "", "configmaps", "get"),
        Access("probe", "", "configmaps", "patch"),
        Access("probe", "", "configmaps", "update"),
        Access("probe", "gleaner.dev", "offlinejobs/status", "patch"),
        Access("probe", "", "configmaps", "delete"),
        Access("probe", "", "namespaces", "watch"),
    ]
    assert kube.accesses("someone-else") == []


def test_every_call_of_the_operator_is_granted_by_its_rules(kube: KubeEmulator) -> None:
    api = KubeApi(kube)
    api.apply_node("node-a", {"pool": "batch"})
    api.apply_node("node-b", {"pool": "batch"})
    api.apply_nodetrace(nodetrace_manifest("node-a", gpus=1, offline_enabled=0.95))
    api.apply_nodetrace(nodetrace_manifest("node-b", gpus=1, offline_enabled=0.7))
    profile = yaml.safe_dump(offlinejob_manifest("x")["spec"]["profile"])
    api.core.create_namespaced_config_map(
        "default", {"metadata": {"name": "prof"}, "data": {"profile.yaml": profile}}
    )
    op = OperatorProcess(
        kube,
        [*FAST_OPERATOR_FLAGS, f"--http-port={free_port()}", "--http-host=127.0.0.1"],
        log_name="operator-rbac.log",
    ).start()
    try:

        def status(name: str) -> dict[str, Any]:
            job = api.get_job(name) or {}
            return dict(job.get("status") or {})

        def wait_phase(name: str, *phases: str) -> dict[str, Any]:
            return wait_for(
                lambda: s if (s := status(name)).get("phase") in phases else {},
                timeout=45,
                message=lambda: f"{name} not in {phases}: {status(name)}\n{op.log()[-4000:]}",
            )

        job = offlinejob_manifest("victim", sla=0.6, profile_from="prof")
        job["spec"]["gpuSelector"] = {"nodeSelector": {"pool": "batch"}}
        api.create_job(job)
        first = wait_phase("victim", "Scheduled")["placement"]["node"]
        # The operator records the placement before it creates the Pod: wait for the Pod
        # before playing the kubelet, or the status patch may find no Pod (404).
        wait_for(
            lambda: [p for p in api.pods() if p.metadata.name == "victim-0"],
            timeout=45,
            message=lambda: f"no Pod victim-0\n{op.log()[-4000:]}",
        )
        api.set_pod_phase("victim-0", "Running")
        wait_phase("victim", "Running")
        # Starved: SLA eviction (report ConfigMap, Pod deletion, Event), then elsewhere.
        api.apply_nodetrace(nodetrace_manifest(first, gpus=1, offline_enabled=0.05))
        wait_for(
            lambda: api.configmaps(selector="gleaner.dev/report=sla-eviction"),
            timeout=45,
            message=lambda: op.log()[-4000:],
        )
        wait_for(
            lambda: (
                status("victim").get("phase") == "Scheduled"
                and status("victim")["placement"]["node"] != first
            ),
            timeout=45,
            message=lambda: f"{status('victim')}\n{op.log()[-4000:]}",
        )
        api.delete_job("victim")
        wait_for(lambda: api.get_job("victim") is None, timeout=45, message=op.log)
    finally:
        op.stop()

    operator_calls = [a for a in kube.accesses() if a.client != TEST_CLIENT]
    called = {(a.api_group, a.resource, a.verb) for a in operator_calls}
    # The lifecycle reached the calls that matter (or the recording is broken).
    for needed in [
        ("gleaner.dev", "offlinejobs", "watch"),
        ("gleaner.dev", "offlinejobs/status", "patch"),
        ("gleaner.dev", "nodetraces", "watch"),
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "configmaps", "create"),
        ("", "events", "create"),
        ("", "nodes", "list"),
    ]:
        assert needed in called, (needed, sorted(called))
    assert ungranted(operator_calls, OPERATOR_RULES) == [], sorted(called)
