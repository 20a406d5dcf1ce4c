"""operator.batchApi: off by default; on, the operator serves the Batch API on its Service
with the extra RBAC rules (BATCH_API_RULES) and a volume for its files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import helm_python as helm
import pytest

from gleaner.operator.rbac import BATCH_API_RULES, OPERATOR_RULES

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def one(manifests: list[Manifest], kind: str, name: str = "gleaner-operator") -> Manifest:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def test_off_by_default_nothing_of_it_is_rendered(render: Render) -> None:
    manifests = render()
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert not any(a.startswith("--batch-api") for a in pod["containers"][0]["args"])
    assert "batch-api" not in {p["name"] for p in one(manifests, "Service")["spec"]["ports"]}
    assert one(manifests, "ClusterRole")["rules"] == [dict(r) for r in OPERATOR_RULES]


def test_on_it_gets_a_port_a_volume_and_exactly_the_batch_api_rules(render: Render) -> None:
    manifests = render({"operator": {"replicaCount": 1, "batchApi": {"enabled": True}}})
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    assert args[args.index("--batch-api-port") + 1] == "8081"
    assert args[args.index("--batch-api-url") + 1] == (
        "http://gleaner-operator.gleaner-system.svc:8081"
    )
    assert {"name": "batch-api", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "batch-api"]
    assert volume["emptyDir"] == {"sizeLimit": "10Gi"}
    ports = {p["name"]: p for p in one(manifests, "Service")["spec"]["ports"]}
    assert ports["batch-api"]["targetPort"] == "batch-api"
    rules = one(manifests, "ClusterRole")["rules"]
    assert rules == [dict(r) for r in [*OPERATOR_RULES, *BATCH_API_RULES]]


def test_replicas_share_files_only_through_a_claim(render: Render) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"operator\.batchApi\.storage\.claimName"):
        render({"operator": {"batchApi": {"enabled": True}}})
    manifests = render(
        {"operator": {"batchApi": {"enabled": True, "storage": {"claimName": "batch-files"}}}}
    )
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "batch-api"]
    assert volume["persistentVolumeClaim"] == {"claimName": "batch-files"}


def test_https_with_a_certificate_secret(render: Render) -> None:
    manifests = render(
        {
            "operator": {
                "replicaCount": 1,
                "batchApi": {"enabled": True, "tls": {"secretName": "batch-api-cert"}},
            }
        }
    )
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    cert_dir = args[args.index("--batch-api-cert-dir") + 1]
    assert args[args.index("--batch-api-url") + 1] == (
        "https://gleaner-operator.gleaner-system.svc:8081"
    )
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "batch-api-tls"]
    assert mount == {"name": "batch-api-tls", "mountPath": cert_dir, "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "batch-api-tls"]
    assert volume["secret"] == {"secretName": "batch-api-cert"}
    # without the Secret: plain HTTP, nothing of TLS rendered
    plain = render({"operator": {"replicaCount": 1, "batchApi": {"enabled": True}}})
    plain_pod = one(plain, "Deployment")["spec"]["template"]["spec"]
    assert "--batch-api-cert-dir" not in plain_pod["containers"][0]["args"]
    assert not [v for v in plain_pod["volumes"] if v["name"] == "batch-api-tls"]
