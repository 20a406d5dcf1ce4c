"""The chart's MutatingAdmissionPolicy for OfflineJobs' finalizer, evaluated by the real
kube-apiserver (docs/operator.md, "The finalizer at creation"; docs/controlplane.md).

Each test registers the chart's own policy and binding (rendered by Helm with
``operator.finalizerAtAdmission: policy``, CEL unchanged) and creates OfflineJobs through
the API server, with no operator and no webhook running: whatever finalizer a job is stored
with, the API server put there.

- a new job is stored with the operator's finalizer; a job's other finalizers are kept (the
  operator's goes last), and a job that already names it does not get it twice;
- with ``operator.watchNamespace``, only jobs of that namespace get it: a job elsewhere is
  stored without it (nobody would remove it);
- once the policy is deleted, jobs are stored as they are sent.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.api.contract import FINALIZER
from gleaner.testing.controlplane import ControlPlane, KubectlError, chart_finalizer_policy
from gleaner.testing.kube import offlinejob_manifest

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

CHART = Path(__file__).resolve().parents[2] / "helm" / "gleaner"
KEEP = "example.com/keep"


def create_job(plane: ControlPlane, namespace: str, name: str, *finalizers: str) -> dict[str, Any]:
    """Create the job and return it as the API server stored it."""
    job = offlinejob_manifest(name, namespace=namespace)
    if finalizers:
        job["metadata"]["finalizers"] = list(finalizers)
    plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    stored: dict[str, Any] = json.loads(
        plane.kubectl("get", "offlinejob", name, "-n", namespace, "-o", "json").stdout
    )
    return stored


def release(plane: ControlPlane, namespace: str, name: str) -> None:
    """Drop the job's finalizers and delete it (no operator runs here to do it)."""
    plane.kubectl("patch", "offlinejob", name, "-n", namespace, "--type=merge",
                  "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
    plane.kubectl("delete", "offlinejob", name, "-n", namespace, "--wait=false")


def probe_finalizers(plane: ControlPlane, namespace: str) -> list[str] | None:
    """The finalizers a new job in ``namespace`` would be stored with (a server-side dry
    run: admission runs, nothing is stored); None when the API server cannot create one yet
    (a CRD Established a moment ago may not be served for a few seconds)."""
    job = offlinejob_manifest("probe", namespace=namespace)
    try:
        out = plane.kubectl("create", "-n", namespace, "--dry-run=server", "-o", "json",
                            "-f", "-", input=json.dumps(job))  # fmt: skip
    except KubectlError:
        return None
    return list(json.loads(out.stdout)["metadata"].get("finalizers") or [])


def until(what: str, ready: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


PolicyFactory = Callable[[dict[str, Any]], None]


@pytest.fixture
def install_policy(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str
) -> Iterator[PolicyFactory]:
    """Registers the chart's policy and binding rendered with the given values, waits until
    the API server applies them in ``namespace``, and removes them after the test (waiting
    until they no longer apply: the next test must not meet them)."""
    name = f"gleaner-finalizer-test-{uuid.uuid4().hex[:6]}"
    installed: list[str] = []

    def install(values: dict[str, Any]) -> None:
        docs = chart_finalizer_policy(CHART, name, values=values)
        control_plane.kubectl("create", "-f", "-", input="\n".join(json.dumps(d) for d in docs))
        installed.extend(f"{d['kind'].lower()}/{name}" for d in docs)
        until(
            "the policy to take effect",
            lambda: FINALIZER in (probe_finalizers(control_plane, namespace) or []),
        )

    try:
        yield install
    finally:
        if installed:
            control_plane.kubectl("delete", *installed, check=False)
            until("the policy to be gone", lambda: probe_finalizers(control_plane, namespace) == [])


def test_a_new_job_is_stored_with_the_finalizer_once_and_others_are_kept(
    control_plane: ControlPlane, install_policy: PolicyFactory, namespace: str
) -> None:
    plane = control_plane
    install_policy({})
    cases = {
        "plain": ((), [FINALIZER]),
        "kept": ((KEEP,), [KEEP, FINALIZER]),
        "already": ((FINALIZER, KEEP), [FINALIZER, KEEP]),
        "already-last": ((KEEP, FINALIZER), [KEEP, FINALIZER]),
    }
    for name, (sent, expected) in cases.items():
        stored = create_job(plane, namespace, name, *sent)
        try:
            assert stored["metadata"]["finalizers"] == expected, name
        finally:
            release(plane, namespace, name)


def test_with_a_watched_namespace_a_job_elsewhere_gets_no_finalizer(
    control_plane: ControlPlane, install_policy: PolicyFactory, namespace: str
) -> None:
    plane = control_plane
    install_policy({"operator": {"watchNamespace": namespace}})
    other = f"t-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", other)
    try:
        assert probe_finalizers(plane, other) == []
        elsewhere = create_job(plane, other, "elsewhere")
        try:
            assert FINALIZER not in (elsewhere["metadata"].get("finalizers") or [])
        finally:
            release(plane, other, "elsewhere")
        watched = create_job(plane, namespace, "watched", KEEP)
        try:
            assert watched["metadata"]["finalizers"] == [KEEP, FINALIZER]
        finally:
            release(plane, namespace, "watched")
    finally:
        plane.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_auto_installs_the_policy_on_this_api_server(control_plane: ControlPlane) -> None:
    # An install asks the API server's discovery for Helm's capabilities; this server
    # (Kubernetes 1.36) serves MutatingAdmissionPolicy, so "auto" picks the policy and leaves
    # the webhook's offlinejobs entry out. (Offline, Helm's built-in capabilities name no
    # kinds and "auto" falls back to the webhook: tests/helm/test_chart_finalizer.py.) A
    # server-side dry run: rendered as an install would be, nothing stored.
    import helm_python as helm

    with helm.Config(kubeconfig_path=control_plane.admin_kubeconfig, namespace="default") as cfg:
        # The session's CRDs are applied out of band (crds/), as a GitOps setup would.
        values = {"crds": {"enabled": False}}
        release = cfg.install(CHART, "glauto", values, dry_run="server", namespace="default")
    docs = [doc for doc in yaml.safe_load_all(release["manifest"]) if doc]
    kinds = [doc["kind"] for doc in docs]
    assert kinds.count("MutatingAdmissionPolicy") == 1
    assert kinds.count("MutatingAdmissionPolicyBinding") == 1
    (webhook,) = [doc for doc in docs if doc["kind"] == "MutatingWebhookConfiguration"]
    assert [entry["name"] for entry in webhook["webhooks"]] == [
        "pods.online.gleaner.dev",
        "namespaces.online.gleaner.dev",
    ]
