"""Validation of stored OfflineJobs: messages name the field; profileFrom is resolved."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gleaner.operator.validation import InvalidJob, ValidJob, validate_job
from gleaner.testing.kube import offlinejob_manifest


def _msg(body: dict[str, Any], cm: dict[str, Any] | None = None) -> str:
    verdict = validate_job(body, cm)
    assert isinstance(verdict, InvalidJob), verdict
    return verdict.message


def test_a_valid_inline_profile() -> None:
    verdict = validate_job(offlinejob_manifest("a"))
    assert isinstance(verdict, ValidJob)
    assert verdict.profile.standalone_tokens_per_second == 1000


def test_decreasing_memory_curve_names_the_field() -> None:
    body = offlinejob_manifest("a", memory_curve=[(10, 800), (40, 500)])
    msg = _msg(body)
    assert msg.startswith("spec.profile.memoryCurve")
    assert "memoryCurve[1].tokensPerSecond decreases" in msg


def test_out_of_range_sla_names_the_field() -> None:
    body = offlinejob_manifest("a", sla=1.5)
    assert _msg(body).startswith("spec.throughputSLA:")


def test_long_names_cannot_be_label_values() -> None:
    assert _msg(offlinejob_manifest("x" * 64)).startswith("metadata.name:")


def test_missing_profile_configmap() -> None:
    body = offlinejob_manifest("a", namespace="team", profile_from="profiles")
    assert _msg(body) == "spec.profileFrom.name: ConfigMap team/profiles not found"


def test_missing_key_in_configmap() -> None:
    body = offlinejob_manifest("a", profile_from="profiles")
    msg = _msg(body, {"data": {"other.yaml": "x: 1"}})
    assert msg == (
        "spec.profileFrom.key: ConfigMap default/profiles has no key 'profile.yaml' "
        "(keys: other.yaml)"
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_profile_from_configmap(as_json: bool) -> None:
    profile = offlinejob_manifest("a")["spec"]["profile"]
    text = __import__("json").dumps(profile) if as_json else yaml.safe_dump(profile)
    body = offlinejob_manifest("a", profile_from="profiles")
    verdict = validate_job(body, {"data": {"profile.yaml": text}})
    assert isinstance(verdict, ValidJob)
    assert verdict.profile.required_memory_gi_b == 40


def test_bad_profile_in_configmap_names_configmap_and_field() -> None:
    profile = offlinejob_manifest("a")["spec"]["profile"]
    profile["requiredMemoryGiB"] = -1
    body = offlinejob_manifest("a", profile_from="profiles")
    msg = _msg(body, {"data": {"profile.yaml": yaml.safe_dump(profile)}})
    assert msg.startswith(
        "spec.profileFrom: ConfigMap default/profiles key 'profile.yaml': requiredMemoryGiB:"
    )


def test_unparsable_configmap_profile() -> None:
    body = offlinejob_manifest("a", profile_from="profiles")
    assert _msg(body, {"data": {"profile.yaml": "- 1\n- 2\n"}}) == (
        "spec.profileFrom.key: ConfigMap default/profiles key 'profile.yaml' must hold a "
        "mapping with the fields of spec.profile"
    )
    assert _msg(body, {"data": {"profile.yaml": "a: [1,"}}).startswith(
        "spec.profileFrom.key: ConfigMap default/profiles key 'profile.yaml' is not valid YAML: "
    )
    assert _msg(body, {"data": {"profile.yaml": '{"a": 1,'}}).startswith(
        "spec.profileFrom.key: ConfigMap default/profiles key 'profile.yaml' is not valid JSON: "
    )
