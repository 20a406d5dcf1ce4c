"""The chart's admission webhook: its selectors, policies (online Pods, OfflineJobs), Service and
certificate.

The selectors are what keep a webhook outage from blocking Pods that never opted in; the
real kube-apiserver applies this very configuration in e2e/controlplane/test_webhook.py.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gleaner.api.contract import LABEL_ROLE, ROLE_EXEMPT, ROLE_OFFLINE, ROLE_ONLINE
from gleaner.operator.webhook import MUTATE_PATH

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def _one(manifests: list[Manifest], kind: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def _kinds(manifests: list[Manifest]) -> set[str]:
    return {m["kind"] for m in manifests}


def _pod_entries(config: Manifest) -> list[Manifest]:
    return [e for e in config["webhooks"] if e["name"].endswith(".online.gleaner.dev")]


def _job_entry(config: Manifest) -> Manifest:
    (entry,) = [e for e in config["webhooks"] if e["name"] == "offlinejobs.gleaner.dev"]
    return dict(entry)


def test_two_entries_send_only_opted_in_pods_and_fail_closed(render: Render) -> None:
    config = _one(render(), "MutatingWebhookConfiguration")
    assert len(config["webhooks"]) == 3
    pods, namespaces = _pod_entries(config)
    for entry in (pods, namespaces):
        assert entry["failurePolicy"] == "Fail"
        assert entry["sideEffects"] == "None"
        assert entry["timeoutSeconds"] == 5
        assert entry["admissionReviewVersions"] == ["v1"]
        assert entry["reinvocationPolicy"] == "IfNeeded"
        assert entry["rules"] == [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        service = entry["clientConfig"]["service"]
        assert service == {
            "name": "gleaner-webhook",
            "namespace": "gleaner-system",
            "path": MUTATE_PATH,
            "port": 443,
        }
        # The operator's own namespace and the system ones are never sent.
        assert entry["namespaceSelector"]["matchExpressions"] == [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["gleaner-system", "kube-system", "kube-node-lease", "kube-public"],
            }
        ]
    assert pods["objectSelector"] == {"matchLabels": {LABEL_ROLE: ROLE_ONLINE}}
    assert "matchLabels" not in pods["namespaceSelector"]
    assert namespaces["namespaceSelector"]["matchLabels"] == {LABEL_ROLE: ROLE_ONLINE}
    # Online Pods go to the first entry only (one call per Pod); offline and exempt never.
    assert namespaces["objectSelector"] == {
        "matchExpressions": [
            {
                "key": LABEL_ROLE,
                "operator": "NotIn",
                "values": [ROLE_ONLINE, ROLE_OFFLINE, ROLE_EXEMPT],
            }
        ]
    }


def test_policy_and_timeout_follow_the_values(render: Render) -> None:
    values = {"operator": {"webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 3}}}
    entries = _pod_entries(_one(render(values), "MutatingWebhookConfiguration"))
    assert len(entries) == 2
    for entry in entries:
        assert entry["failurePolicy"] == "Ignore" and entry["timeoutSeconds"] == 3


def test_offline_jobs_get_the_finalizer_at_creation_and_are_never_blocked(
    render: Render,
) -> None:
    config = _one(render(), "MutatingWebhookConfiguration")
    job = _job_entry(config)
    assert job["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": ["gleaner.dev"],
            "apiVersions": ["*"],
            "resources": ["offlinejobs"],
            "scope": "Namespaced",
        }
    ]
    # Never blocks a job: the operator adds the finalizer itself when this call fails.
    assert job["failurePolicy"] == "Ignore"
    assert job["sideEffects"] == "None"
    assert job["admissionReviewVersions"] == ["v1"]
    assert job["timeoutSeconds"] == 2
    (pods, _) = _pod_entries(config)
    assert job["clientConfig"] == pods["clientConfig"]  # the same Service, path and CA
    # Every namespace by default (the operator watches them all), and no object selector.
    assert "namespaceSelector" not in job and "objectSelector" not in job
    # Fail-closed Pods do not change that, and the timeout stays short.
    values = {"operator": {"webhook": {"failurePolicy": "Fail", "timeoutSeconds": 30}}}
    job = _job_entry(_one(render(values), "MutatingWebhookConfiguration"))
    assert job["failurePolicy"] == "Ignore" and job["timeoutSeconds"] == 2
    shorter = {"operator": {"webhook": {"timeoutSeconds": 1}}}
    assert _job_entry(_one(render(shorter), "MutatingWebhookConfiguration"))["timeoutSeconds"] == 1


def test_with_one_watched_namespace_only_its_jobs_get_the_finalizer(render: Render) -> None:
    values = {"operator": {"watchNamespace": "research"}}
    job = _job_entry(_one(render(values), "MutatingWebhookConfiguration"))
    # A job elsewhere is never handled by this operator: a finalizer would block its deletion.
    assert job["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "research"}}


def test_self_signed_certificate_matches_the_ca_bundle_and_the_service(
    render: Render, tmp_path: Path
) -> None:
    manifests = render()
    secret = _one(manifests, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == "gleaner-webhook-tls"
    bundles = {
        e["clientConfig"]["caBundle"]
        for e in _one(manifests, "MutatingWebhookConfiguration")["webhooks"]
    }
    assert bundles == {secret["data"]["ca.crt"]}
    for key in ("ca.crt", "tls.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "DNS:gleaner-webhook.gleaner-system.svc" in text


def test_every_replica_serves_the_webhook_from_the_secret(render: Render) -> None:
    manifests = render()
    deploy = _one(manifests, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    cert_dir = args[args.index("--webhook-cert-dir") + 1]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == cert_dir)
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "gleaner-webhook-tls"
    port = next(p for p in container["ports"] if p["name"] == "webhook")
    assert str(port["containerPort"]) == args[args.index("--webhook-port") + 1] == "9443"
    service = next(
        m
        for m in manifests
        if m["kind"] == "Service" and m["metadata"]["name"] == "gleaner-webhook"
    )
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert (
        service["spec"]["selector"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


def test_cert_manager_issues_the_certificate_and_injects_the_ca(render: Render) -> None:
    cm: dict[str, Any] = {"enabled": True}
    manifests = render({"operator": {"webhook": {"certificate": {"certManager": cm}}}})
    assert "Secret" not in _kinds(manifests)
    certificate = _one(manifests, "Certificate")
    issuer = _one(manifests, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["secretName"] == "gleaner-webhook-tls"
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
    }
    assert "gleaner-webhook.gleaner-system.svc" in certificate["spec"]["dnsNames"]
    config = _one(manifests, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "gleaner-system/gleaner-webhook"
    }
    assert all("caBundle" not in e["clientConfig"] for e in config["webhooks"])

    cm.update(issuerName="corp-ca", issuerKind="ClusterIssuer")
    manifests = render({"operator": {"webhook": {"certificate": {"certManager": cm}}}})
    assert "Issuer" not in _kinds(manifests)
    ref = _one(manifests, "Certificate")["spec"]["issuerRef"]
    assert ref == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_webhook_off_renders_none_of_it(render: Render) -> None:
    manifests = render({"operator": {"webhook": {"enabled": False}}})
    assert not _kinds(manifests) & {"MutatingWebhookConfiguration", "Secret", "Certificate"}
    assert [m["metadata"]["name"] for m in manifests if m["kind"] == "Service"] == [
        "gleaner-operator"
    ]
    container = _one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in container["args"] if a.startswith("--webhook")]
