"""How the chart gives each OfflineJob the operator's finalizer at creation
(``operator.finalizerAtAdmission``; docs/operator.md, "The finalizer at creation"): the
MutatingAdmissionPolicy and its binding, or the webhook's offlinejobs entry, never both.

Rendered offline, Helm's built-in capabilities list API groups and versions but no kinds, so
"auto" falls back to the webhook here; on an API server that serves MutatingAdmissionPolicy,
"auto" installs the policy (e2e/controlplane/test_finalizer_policy.py, which also runs the
policy's CEL on the real kube-apiserver).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import helm_python as helm
import pytest

from gleaner.api.contract import FINALIZER

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]
POLICY_KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}


def _of(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def _webhook_entries(manifests: list[Manifest]) -> list[str]:
    configs = _of(manifests, "MutatingWebhookConfiguration")
    return [e["name"] for config in configs for e in config["webhooks"]]


def _mechanism(manifests: list[Manifest]) -> str:
    """Which mechanism the rendered chart installs: policy, webhook or off."""
    policy = {m["kind"] for m in manifests} & POLICY_KINDS
    webhook = "offlinejobs.gleaner.dev" in _webhook_entries(manifests)
    assert not (policy and webhook), "both the policy and the webhook entry are rendered"
    if policy:
        assert policy == POLICY_KINDS, "the policy comes with its binding"
        return "policy"
    return "webhook" if webhook else "off"


def _values(mode: str | None, webhook: bool = True) -> dict[str, Any]:
    operator: dict[str, Any] = {"webhook": {"enabled": webhook}}
    if mode is not None:
        operator["finalizerAtAdmission"] = mode
    return {"operator": operator}


@pytest.mark.parametrize(
    ("mode", "webhook", "expected"),
    [
        # Offline, Helm's capabilities lack the MutatingAdmissionPolicy kind: auto = webhook.
        (None, True, "webhook"),
        ("auto", True, "webhook"),
        ("auto", False, "off"),
        ("policy", True, "policy"),
        ("policy", False, "policy"),
        ("webhook", True, "webhook"),
        ("webhook", False, "off"),
        ("off", True, "off"),
        ("off", False, "off"),
    ],
)
def test_the_switch_picks_one_mechanism_at_most(
    render: Render, mode: str | None, webhook: bool, expected: str
) -> None:
    manifests = render(_values(mode, webhook))
    assert _mechanism(manifests) == expected
    # The online-Pod entries follow the webhook switch alone.
    pods = {"pods.online.gleaner.dev", "namespaces.online.gleaner.dev"}
    assert pods <= set(_webhook_entries(manifests)) if webhook else not _webhook_entries(manifests)


def test_the_default_is_auto(chart: helm.Chart) -> None:
    assert chart.values["operator"]["finalizerAtAdmission"] == "auto"


def test_an_unknown_mechanism_is_refused(render: Render) -> None:
    with pytest.raises(helm.HelmValuesError, match="finalizerAtAdmission"):
        render(_values("sometimes"))


def test_the_policy_adds_the_finalizer_on_create_only_and_never_refuses(render: Render) -> None:
    manifests = render(_values("policy"))
    (policy,) = _of(manifests, "MutatingAdmissionPolicy")
    (binding,) = _of(manifests, "MutatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["name"] == "gleaner-offlinejob-finalizer"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    spec = policy["spec"]
    assert spec["matchConstraints"] == {
        "resourceRules": [
            {
                "operations": ["CREATE"],
                "apiGroups": ["gleaner.dev"],
                "apiVersions": ["*"],
                "resources": ["offlinejobs"],
                "scope": "Namespaced",
            }
        ]
    }
    assert spec["failurePolicy"] == "Ignore"
    assert "paramKind" not in spec
    (condition,) = spec["matchConditions"]
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "JSONPatch"
    # The operator's own constant, in the condition (idempotence) and in both patches.
    assert condition["expression"].count(f'"{FINALIZER}"') == 1
    assert mutation["jsonPatch"]["expression"].count(f'"{FINALIZER}"') == 2
    # Every namespace by default (the operator watches them all).
    assert "matchResources" not in binding["spec"]


def test_with_one_watched_namespace_only_its_jobs_get_the_finalizer(render: Render) -> None:
    values = _values("policy")
    values["operator"]["watchNamespace"] = "research"
    (binding,) = _of(render(values), "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "research"}}
    }


def test_the_policy_name_follows_the_release(render: Render) -> None:
    manifests = render(_values("policy"), name="batch")
    (policy,) = _of(manifests, "MutatingAdmissionPolicy")
    assert policy["metadata"]["name"] == "batch-gleaner-offlinejob-finalizer"
