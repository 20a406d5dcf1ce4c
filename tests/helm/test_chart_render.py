"""Rendering the chart for default values and for every switch: lint, Kubernetes schemas, content.

Every scenario renders through Helm's Go SDK, lints without errors, and each rendered object
validates (strict: unknown fields refused) against the Kubernetes JSON schemas of the newest
release ``kubernetes-validate`` ships. Custom resources of CRDs Kubernetes does not know
(ServiceMonitor, PodMonitor, kopf peering) are checked structurally instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest

ROOT = Path(__file__).resolve().parents[2]

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "crds-off": {"crds": {"enabled": False}},
    "crds-keep-off": {"crds": {"keep": False}},
    "kopf-crds-off": {"crds": {"kopfPeering": False}},
    "service-monitor-on": {"prometheus": {"serviceMonitor": {"enabled": True}}},
    "grafana-on": {"grafana": {"dashboard": {"enabled": True, "namespace": "monitoring"}}},
    "agent-off": {"agent": {"enabled": False}},
    "rbac-off": {"rbac": {"create": False}},
    "single-namespace": {"operator": {"watchNamespace": "ml-batch", "replicaCount": 1}},
    "prometheus-url": {"operator": {"prometheusUrl": "http://prometheus.monitoring:9090"}},
    "pdb-on": {"operator": {"podDisruptionBudget": {"enabled": True}}},
    "custom-scheduling": {
        "agent": {
            # Maps merge with the defaults; null removes the default GPU label.
            "nodeSelector": {"gleaner.dev/harvest": "true", "nvidia.com/gpu.present": None},
            "tolerations": [
                {
                    "key": "dedicated",
                    "operator": "Equal",
                    "value": "inference",
                    "effect": "NoExecute",
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.product",
                                        "operator": "In",
                                        "values": ["NVIDIA-H100-80GB-HBM3"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "runtimeClassName": "nvidia",
            "priorityClassName": "system-node-critical",
        },
        "operator": {
            "tolerations": [{"key": "control", "operator": "Exists"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
        },
    },
    "image-pinned": {
        "image": {
            "registry": "registry.example.com",
            "tag": "1.2.3",
            "digest": "sha256:" + "a" * 64,
        },
        "imagePullSecrets": [{"name": "regcred"}],
    },
    "everything-off": {
        "crds": {"enabled": False},
        "rbac": {"create": False},
        "agent": {"enabled": False},
        "operator": {
            "replicaCount": 1,
            "peering": {"enabled": False},
            "serviceAccount": {"create": False, "name": "x"},
        },
        "prometheus": {"scrapeAnnotations": False},
    },
}

# Objects already validated (identical objects recur across scenarios; validation is slow).
_VALIDATED: set[str] = set()

# Kinds served by CRDs: kubernetes-validate knows none of them.
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "ClusterKopfPeering", "KopfPeering"}


def kinds(manifests: list[Manifest]) -> dict[str, list[Manifest]]:
    by_kind: dict[str, list[Manifest]] = {}
    for manifest in manifests:
        by_kind.setdefault(manifest["kind"], []).append(manifest)
    return by_kind


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_lint_has_no_errors(chart_dir: Path, scenario: str) -> None:
    report = helm.lint(chart_dir, SCENARIOS[scenario], kube_version="v1.30.0")
    errors = [m for m in report["messages"] if m["severity"] >= 3] + report["errors"]
    assert errors == []
    assert report["total_charts_linted"] == 1


def test_lint_reports_bad_values_as_errors(chart_dir: Path) -> None:
    report = helm.lint(chart_dir, {"operator": {"replicaCount": "two"}})
    errors = [m["error"] for m in report["messages"] if m["severity"] >= 3]
    assert any("/operator/replicaCount" in error for error in errors)


def test_chart_metadata(chart: helm.Chart) -> None:
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["name"] == "gleaner"
    assert metadata["kubeVersion"] == ">=1.27.0-0"
    assert chart.schema is not None
    assert chart.schema["$schema"] == "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_manifest_validates_against_kubernetes_schemas(render: Render, scenario: str) -> None:
    manifests = render(SCENARIOS[scenario])
    assert manifests
    version = kubernetes_validate.latest_version()
    crd_schemas = {
        m["spec"]["names"]["kind"]: m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for m in manifests
        if m["kind"] == "CustomResourceDefinition"
    }
    for manifest in manifests:
        where = f"{manifest['kind']}/{manifest['metadata']['name']}"
        if manifest["kind"] in CUSTOM_KINDS:
            assert manifest["apiVersion"] in {"monitoring.coreos.com/v1", "kopf.dev/v1"}, where
            if manifest["kind"] in crd_schemas:
                jsonschema.validate(manifest, crd_schemas[manifest["kind"]])
            continue
        digest = json.dumps(manifest, sort_keys=True)
        if digest in _VALIDATED:  # the same object rendered by another scenario
            continue
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the failure
            pytest.fail(f"{scenario}: {where} is invalid for Kubernetes {version}: {exc.message}")
        _VALIDATED.add(digest)


def test_kubernetes_validation_refuses_a_misspelled_field(render: Render) -> None:
    deploy = one(render(), "Deployment")
    deploy["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deploy, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_names_are_unique_and_namespaced_objects_land_in_the_release_namespace(
    render: Render, scenario: str
) -> None:
    manifests = render(SCENARIOS[scenario])
    keys = [(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in manifests]
    assert len(keys) == len(set(keys))
    cluster_scoped = {
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterKopfPeering",
        "MutatingWebhookConfiguration",
    }
    for kind, namespace, name in keys:
        if kind in cluster_scoped:
            assert namespace is None, f"{kind}/{name}"
        elif kind not in {"ServiceMonitor", "PodMonitor", "ConfigMap", "KopfPeering"}:
            assert namespace == "gleaner-system", f"{kind}/{name}"


def test_defaults_render_the_whole_installation(render: Render) -> None:
    by_kind = kinds(render())
    assert {k: len(v) for k, v in by_kind.items()} == {
        "CustomResourceDefinition": 5,
        "ClusterKopfPeering": 1,
        "ServiceAccount": 2,
        "ClusterRole": 2,
        "ClusterRoleBinding": 2,
        "Deployment": 1,
        "Service": 2,
        "DaemonSet": 1,
        "Secret": 1,
        "MutatingWebhookConfiguration": 1,
    }
    crd_names = {m["metadata"]["name"] for m in by_kind["CustomResourceDefinition"]}
    assert crd_names == {
        "offlinejobs.gleaner.dev",
        "nodetraces.gleaner.dev",
        "nodehistories.gleaner.dev",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }


def test_crds_carry_the_keep_policy_by_default_and_can_drop_it(render: Render) -> None:
    kept = [m for m in render() if m["kind"] == "CustomResourceDefinition"]
    assert all(m["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for m in kept)
    dropped = [
        m for m in render({"crds": {"keep": False}}) if m["kind"] == "CustomResourceDefinition"
    ]
    assert len(dropped) == len(kept)
    assert all(
        "helm.sh/resource-policy" not in m["metadata"].get("annotations", {}) for m in dropped
    )


def test_crds_off_renders_no_crd_and_kopf_switch_drops_only_kopf_crds(render: Render) -> None:
    assert not [
        m for m in render({"crds": {"enabled": False}}) if m["kind"] == "CustomResourceDefinition"
    ]
    names = {
        m["metadata"]["name"]
        for m in render({"crds": {"kopfPeering": False}})
        if m["kind"] == "CustomResourceDefinition"
    }
    assert names == {
        "offlinejobs.gleaner.dev",
        "nodetraces.gleaner.dev",
        "nodehistories.gleaner.dev",
    }


def test_rendered_crds_are_the_generated_files(render: Render, chart_dir: Path) -> None:
    import yaml

    rendered = {
        m["metadata"]["name"]: m for m in render() if m["kind"] == "CustomResourceDefinition"
    }
    sources = sorted((chart_dir / "files" / "crds").glob("*.yaml"))
    assert len(sources) == 3
    for source in sources:
        expected = yaml.safe_load(source.read_text())
        got = rendered[expected["metadata"]["name"]]
        assert got["spec"] == expected["spec"]
        assert got["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gleaner"


POLICY_ARGS = [
    "--risk-target", "0.95", "--planned-exit", "--record-delay", "5s", "--move-check-interval", "1h",
    "--move-min-stay", "4h", "--move-horizon", "5h", "--sla-violations", "3/5",
    "--sla-grace", "300s", "--eviction-backoff", "30s", "--eviction-backoff-max", "30m",
]  # fmt: skip
"""The admission, move and SLA-monitor flags the default values render."""


def test_operator_deployment_arguments_follow_the_values(render: Render) -> None:
    deploy = one(render(), "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert deploy["spec"]["replicas"] == 2
    assert container["args"] == [
        "operator",
        "--http-port",
        "8080",
        "--all-namespaces",
        "--webhook-port",
        "9443",
        "--webhook-cert-dir",
        "/etc/gleaner/webhook",
        *POLICY_ARGS,
    ]
    assert container["image"] == "docker.io/gleaner/gleaner:0.1.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "webhook", "containerPort": 9443, "protocol": "TCP"},
    ]

    custom = one(
        render(
            {
                "operator": {
                    "watchNamespace": "ml-batch",
                    "prometheusUrl": "http://prom:9090",
                    "httpPort": 9000,
                    "replicaCount": 3,
                    "extraArgs": ["--verbose"],
                    "livenessProbe": {"enabled": False},
                    "webhook": {"enabled": False},
                }
            }
        ),
        "Deployment",
    )
    container = custom["spec"]["template"]["spec"]["containers"][0]
    assert custom["spec"]["replicas"] == 3
    assert container["args"] == [
        "operator",
        "--http-port",
        "9000",
        "--namespace",
        "ml-batch",
        "--prometheus-url",
        "http://prom:9090",
        *POLICY_ARGS,
        "--verbose",
    ]
    assert "livenessProbe" not in container
    assert container["ports"][0]["containerPort"] == 9000


def test_service_exposes_dashboard_api_and_metrics_on_http(render: Render) -> None:
    manifests = render()
    service = one(manifests, "Service", "gleaner-operator")
    deploy = one(manifests, "Deployment")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    selector = service["spec"]["selector"]
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["metadata"]["annotations"]["prometheus.io/port"] == "8080"


def test_agent_daemonset_runs_on_gpu_nodes_with_its_contract_arguments(render: Render) -> None:
    daemonset = one(render(), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert container["args"][:6] == [
        "agent",
        "--backend",
        "nvidia",
        "--node",
        "$(NODE_NAME)",
        "--metrics-port",
    ]
    assert container["args"][6] == "9464"
    node_name = next(e for e in container["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/run/gleaner", "/var/lib/gleaner/lib"} <= mounts


def test_agent_daemonset_mounts_the_node_contract_paths(render: Render) -> None:
    from gleaner.protocol.node import SHIM_DIR, SOCKET_DIR

    pod = one(render(), "DaemonSet")["spec"]["template"]["spec"]
    host = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {SOCKET_DIR, SHIM_DIR} <= host & mounts


def test_agent_scheduling_is_configurable(render: Render) -> None:
    values = SCENARIOS["custom-scheduling"]
    pod = one(render(values), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gleaner.dev/harvest": "true"}
    merged = one(render({"agent": {"nodeSelector": {"pool": "a"}}}), "DaemonSet")
    assert merged["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.present": "true",
        "pool": "a",
    }
    assert pod["tolerations"] == values["agent"]["tolerations"]
    assert pod["affinity"] == values["agent"]["affinity"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    operator_pod = one(render(values), "Deployment")["spec"]["template"]["spec"]
    assert operator_pod["tolerations"] == values["operator"]["tolerations"]


def test_agent_off_removes_the_daemonset_and_its_rbac(render: Render) -> None:
    manifests = render({"agent": {"enabled": False}})
    names = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    assert not any(kind == "DaemonSet" for kind, _ in names)
    assert ("ClusterRole", "gleaner-agent") not in names
    assert ("ServiceAccount", "gleaner-agent") not in names
    assert ("ClusterRole", "gleaner-operator") in names


def test_kopf_peering_object_follows_the_watch_scope(render: Render) -> None:
    cluster = one(render(), "ClusterKopfPeering")
    assert cluster["metadata"]["name"] == "gleaner"
    assert cluster["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    namespaced = one(render({"operator": {"watchNamespace": "ml-batch"}}), "KopfPeering")
    assert namespaced["metadata"] == namespaced["metadata"] | {
        "name": "gleaner",
        "namespace": "ml-batch",
    }
    off = render({"operator": {"peering": {"enabled": False}, "replicaCount": 1}})
    assert not [m for m in off if m["kind"] in {"ClusterKopfPeering", "KopfPeering"}]
    args = one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--standalone" in args
    with pytest.raises(helm.HelmRenderError, match=r"set operator\.replicaCount to 1"):
        render({"operator": {"peering": {"enabled": False}}})


def test_service_monitor_switch_renders_monitors_for_operator_and_agents(render: Render) -> None:
    assert not [m for m in render() if m["kind"] in {"ServiceMonitor", "PodMonitor"}]
    manifests = render(
        {
            "prometheus": {
                "serviceMonitor": {
                    "enabled": True,
                    "labels": {"release": "kps"},
                    "namespace": "monitoring",
                }
            }
        }
    )
    service = one(manifests, "Service", "gleaner-operator")
    monitor = one(manifests, "ServiceMonitor")
    webhook = one(manifests, "Service", "gleaner-webhook")
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= webhook["metadata"]["labels"].items()
    )
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gleaner-system"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    pod_monitor = one(manifests, "PodMonitor")
    agent_labels = one(manifests, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= agent_labels.items()
    assert [e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    # The agent's per-job series carry a `job` label (the OfflineJob); without honorLabels
    # Prometheus renames it to exported_job and the operator's SLA query finds nothing.
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True


def test_image_reference_is_built_from_registry_repository_tag_and_digest(render: Render) -> None:
    manifests = render(SCENARIOS["image-pinned"])
    for kind in ("Deployment", "DaemonSet"):
        pod = one(manifests, kind)["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == (
            "registry.example.com/gleaner/gleaner:1.2.3@sha256:" + "a" * 64
        )
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_existing_service_account_must_be_named(render: Render) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"operator\.serviceAccount\.name is required"):
        render({"operator": {"serviceAccount": {"create": False}}})
    pod = one(
        render({"operator": {"serviceAccount": {"create": False, "name": "mine"}}}), "Deployment"
    )
    assert pod["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


def test_long_release_names_keep_resource_names_valid(render: Render) -> None:
    manifests = render(name="a" * 53)
    for manifest in manifests:
        assert len(manifest["metadata"]["name"]) <= 63


def test_notes_explain_the_first_job_and_the_dashboard(notes: Callable[..., str]) -> None:
    text = notes()
    examples = re.findall(r"kubectl apply -f (examples/\S+)", text)
    assert examples
    assert all((ROOT / example).is_file() for example in examples)
    assert "kubectl -n gleaner-system port-forward svc/gleaner-operator 8080:8080" in text
    assert "crds.enabled=false" not in text
    assert "kubectl apply -f crds/" in notes({"crds": {"enabled": False}})
