"""Shared CLI inputs: ConfigMap profiles resolve with the operator's rules and messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click
import pytest

from gleaner.api import Profile
from gleaner.cli.inputs import parse_time, profile_from_configmap

PROFILE = {
    "standaloneTokensPerSecond": 1000.0,
    "requiredMemoryGiB": 10.0,
    "memoryCurve": [
        {"memoryGiB": 4.0, "tokensPerSecond": 300.0},
        {"memoryGiB": 10.0, "tokensPerSecond": 1000.0},
    ],
}


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "OfflineJob",
        "metadata": {"name": "j", "namespace": "team"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "w", "image": "img"}]}},
            "throughputSLA": 0.5,
            "profileFrom": {"name": "prof", "key": "p.yaml"},
        },
    }


def _cm(data: dict[str, str]) -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": {"name": "prof", "namespace": "team"}, "data": data}


def test_profile_from_configmap_resolves_yaml_and_json() -> None:
    got = profile_from_configmap(_job(), _cm({"p.yaml": json.dumps(PROFILE)}))
    assert isinstance(got, Profile)
    assert got.required_memory_gi_b == 10.0


@pytest.mark.parametrize(
    ("configmap", "needle"),
    [
        (None, "spec.profileFrom.name: ConfigMap team/prof not found"),
        (_cm({"other": "x"}), "ConfigMap team/prof has no key 'p.yaml' (keys: other)"),
        (_cm({"p.yaml": "a: [1"}), "key 'p.yaml' is not valid YAML"),
        (
            _cm({"p.yaml": json.dumps({**PROFILE, "requiredMemoryGiB": -1})}),
            "requiredMemoryGiB",
        ),
    ],
)
def test_profile_from_configmap_explains_what_is_wrong(
    configmap: dict[str, Any] | None, needle: str
) -> None:
    got = profile_from_configmap(_job(), configmap)
    assert isinstance(got, str)
    assert needle in got


def test_parse_time_accepts_epoch_and_iso_and_refuses_junk() -> None:
    assert parse_time("0") == datetime(1970, 1, 1, tzinfo=UTC)
    assert parse_time("2026-01-01T00:00:00") == datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(click.ClickException, match="--at must be an ISO time"):
        parse_time("yesterday")
