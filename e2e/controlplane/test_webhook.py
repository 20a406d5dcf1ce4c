"""The online-Pod admission webhook, called by the real kube-apiserver (docs/operator.md,
"Webhook"; docs/controlplane.md).

Each test starts the operator's webhook server (``gleaner.operator.webhook.WebhookServer``)
on 127.0.0.1 with a throw-away CA, and registers the chart's own
MutatingWebhookConfiguration (rendered by Helm, selectors and failurePolicy unchanged) with
``clientConfig`` pointed at that server and CA. Then Pods are created through the API
server:

- an opted-in Pod (pod label, or namespace label) comes back instrumented;
- a Pod that opted in nowhere comes back untouched, and so does an exempt one;
- an opted-in Pod that cannot be instrumented is refused with the webhook's reason. It is
  forced by an ``LD_PRELOAD`` taken from a ConfigMap (``valueFrom``): the webhook cannot
  prepend the shim to a value it does not see, so it refuses rather than drop it;
- an OfflineJob comes back with the operator's finalizer already set (other finalizers
  kept), with no operator running: the webhook put it there;
- with the webhook server stopped, opted-in Pods are refused (failurePolicy Fail) while Pods
  outside opted-in namespaces are still admitted, and so are OfflineJobs (failurePolicy
  Ignore), without the finalizer (the operator adds it then).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gleaner.api.contract import (
    ANNOTATION_INJECTED,
    ENV_ROLE,
    FINALIZER,
    LABEL_ROLE,
    ROLE_EXEMPT,
    ROLE_OFFLINE,
    ROLE_ONLINE,
    SHIM_PATH,
    SOCKET_DIR,
)
from gleaner.operator.webhook import MUTATE_PATH, WebhookServer
from gleaner.testing.controlplane import (
    ControlPlane,
    KubectlError,
    Pki,
    chart_webhook_configuration,
)
from gleaner.testing.fixtures import container_env
from gleaner.testing.kube import offlinejob_manifest
from gleaner.testing.net import free_port

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

CHART = Path(__file__).resolve().parents[2] / "helm" / "gleaner"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a serving certificate for IP 127.0.0.1 signed by it."""
    d = tmp_path_factory.mktemp("webhook-tls")
    Pki(d).loopback_server()
    return d


@dataclass
class Webhook:
    plane: ControlPlane
    server: WebhookServer
    name: str


def _pod(name: str, labels: dict[str, str] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai", **container}]},
    }


def create(plane: ControlPlane, namespace: str, pod: dict[str, Any], *extra: str) -> dict[str, Any]:
    out = plane.kubectl("create", "-n", namespace, "-o", "json", *extra, "-f", "-",
                        input=json.dumps(pod))  # fmt: skip
    created: dict[str, Any] = json.loads(out.stdout)
    return created


def instrumented(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("annotations") or {}).get(ANNOTATION_INJECTED) == ROLE_ONLINE


def _probe(plane: ControlPlane, namespace: str) -> dict[str, Any] | None:
    """A server-side dry run of an opted-in Pod (runs the webhooks; stores nothing); None
    when it is refused."""
    try:
        return create(
            plane, namespace, _pod("probe", {LABEL_ROLE: ROLE_ONLINE}), "--dry-run=server"
        )
    except KubectlError:
        return None


def _until(what: str, ready: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


@pytest.fixture
def webhook(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str, tls: Path
) -> Iterator[Webhook]:
    """The webhook server on 127.0.0.1 and the chart's configuration pointing at it, in
    force for ``namespace`` (waited for: the API server loads configurations a moment after
    they are created)."""
    port = free_port()
    server = WebhookServer(str(tls / "tls.crt"), str(tls / "tls.key"), "127.0.0.1", port).start()
    _until("the webhook server", lambda: server.started, 10.0)
    name = f"gleaner-webhook-test-{uuid.uuid4().hex[:6]}"
    url = f"https://127.0.0.1:{port}{MUTATE_PATH}"
    config = chart_webhook_configuration(CHART, name, url, (tls / "ca.crt").read_bytes())
    control_plane.kubectl("create", "-f", "-", input=json.dumps(config))
    try:
        _until(
            "the webhook configuration to take effect",
            lambda: (pod := _probe(control_plane, namespace)) is not None and instrumented(pod),
        )
        yield Webhook(control_plane, server, name)
    finally:
        server.stop()
        control_plane.kubectl("delete", "mutatingwebhookconfiguration", name, check=False)
        # The next test must not meet this configuration (its server is gone).
        _until(
            "the webhook configuration to be gone",
            lambda: (pod := _probe(control_plane, namespace)) is not None and not instrumented(pod),
        )


def test_an_opted_in_pod_is_instrumented_and_others_are_untouched(
    webhook: Webhook, namespace: str
) -> None:
    plane = webhook.plane
    pod = create(plane, namespace, _pod("online", {LABEL_ROLE: ROLE_ONLINE}))
    assert instrumented(pod)
    container = pod["spec"]["containers"][0]
    assert container_env(container)["LD_PRELOAD"] == SHIM_PATH
    assert container_env(container)[ENV_ROLE] == ROLE_ONLINE
    assert SOCKET_DIR in {m["mountPath"] for m in container["volumeMounts"]}
    assert {v["name"] for v in pod["spec"]["volumes"] if "hostPath" in v} == {
        "gleaner-shim",
        "gleaner-run",
    }
    # Stored as admitted: reading it back gives the instrumented Pod.
    stored = json.loads(plane.kubectl("get", "pod", "online", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["containers"][0]["env"] == container["env"]

    plain = create(plane, namespace, _pod("plain", {"app": "web"}))
    assert not instrumented(plain)
    assert "env" not in plain["spec"]["containers"][0]
    assert not [v for v in plain["spec"].get("volumes", []) if "hostPath" in v]


def test_a_namespace_label_opts_in_every_pod_but_exempt_ones(
    webhook: Webhook, namespace: str
) -> None:
    plane = webhook.plane
    plane.kubectl("label", "namespace", namespace, f"{LABEL_ROLE}={ROLE_ONLINE}")
    _until(
        "the namespace label to be seen",
        lambda: instrumented(create(plane, namespace, _pod("p", {"app": "x"}), "--dry-run=server")),
    )
    pod = create(plane, namespace, _pod("unlabelled"))
    assert instrumented(pod)
    assert container_env(pod["spec"]["containers"][0])[ENV_ROLE] == ROLE_ONLINE
    exempt = create(plane, namespace, _pod("exempt", {LABEL_ROLE: ROLE_EXEMPT}))
    assert not instrumented(exempt) and "env" not in exempt["spec"]["containers"][0]


def test_an_opted_in_pod_that_cannot_be_instrumented_is_refused(
    webhook: Webhook, namespace: str
) -> None:
    from_config = {"configMapKeyRef": {"name": "preload", "key": "libs"}}
    pod = _pod(
        "odd", {LABEL_ROLE: ROLE_ONLINE}, env=[{"name": "LD_PRELOAD", "valueFrom": from_config}]
    )
    with pytest.raises(KubectlError) as refused:
        create(webhook.plane, namespace, pod)
    message = refused.value.stderr
    assert "denied the request" in message
    assert "LD_PRELOAD from valueFrom" in message
    assert f"{LABEL_ROLE}={ROLE_EXEMPT}" in message
    missing = webhook.plane.kubectl("get", "pod", "odd", "-n", namespace, check=False)
    assert missing.returncode != 0


def test_with_the_webhook_down_only_opted_in_pods_are_refused(
    webhook: Webhook, namespace: str
) -> None:
    plane = webhook.plane
    webhook.server.stop()
    _until("the webhook to be down", lambda: _probe(plane, namespace) is None)
    with pytest.raises(KubectlError) as refused:
        create(plane, namespace, _pod("online", {LABEL_ROLE: ROLE_ONLINE}))
    assert "failed calling webhook" in refused.value.stderr
    # Not opted in: admitted as before, in this namespace and in a fresh one.
    assert not instrumented(create(plane, namespace, _pod("plain", {"app": "web"})))
    other = f"t-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", other)
    try:
        plane.wait_service_account(other)
        assert not instrumented(create(plane, other, _pod("plain", {"app": "web"})))
        offline = create(plane, other, _pod("offline", {LABEL_ROLE: ROLE_OFFLINE}))
        assert not instrumented(offline)
    finally:
        plane.kubectl("delete", "namespace", other, "--wait=false", check=False)


def create_job(plane: ControlPlane, namespace: str, name: str, *finalizers: str) -> dict[str, Any]:
    job = offlinejob_manifest(name, namespace=namespace)
    if finalizers:
        job["metadata"]["finalizers"] = list(finalizers)
    return create(plane, namespace, job)


def release(plane: ControlPlane, namespace: str, name: str) -> None:
    """Drop the job's finalizers and delete it (no operator runs here to do it), so that
    the namespace can go."""
    plane.kubectl("patch", "offlinejob", name, "-n", namespace, "--type=merge",
                  "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
    plane.kubectl("delete", "offlinejob", name, "-n", namespace, "--wait=false")


def test_an_offline_job_is_stored_with_the_finalizer(webhook: Webhook, namespace: str) -> None:
    plane = webhook.plane
    job = create_job(plane, namespace, "plain")
    try:
        assert job["metadata"]["finalizers"] == [FINALIZER]
        stored = json.loads(
            plane.kubectl("get", "offlinejob", "plain", "-n", namespace, "-o", "json").stdout
        )
        assert stored["metadata"]["finalizers"] == [FINALIZER]
    finally:
        release(plane, namespace, "plain")
    other = create_job(plane, namespace, "kept", "example.com/keep")
    try:
        assert other["metadata"]["finalizers"] == ["example.com/keep", FINALIZER]
    finally:
        release(plane, namespace, "kept")


def test_with_the_webhook_down_an_offline_job_is_still_created(
    webhook: Webhook, namespace: str
) -> None:
    plane = webhook.plane
    webhook.server.stop()
    _until("the webhook to be down", lambda: _probe(plane, namespace) is None)
    job = create_job(plane, namespace, "while-down")
    try:
        # Admitted without the finalizer (failurePolicy Ignore): the operator adds it later.
        assert FINALIZER not in (job["metadata"].get("finalizers") or [])
    finally:
        release(plane, namespace, "while-down")
