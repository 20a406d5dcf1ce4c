"""The API models accept good objects, refuse bad ones with field-naming messages, round-trip."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gleaner.api import Condition, ConditionStatus, OfflineJob, Phase, set_condition


def job_dict(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "w", "image": "vllm/vllm-openai:v0.9"}]}},
        "gpus": 1,
        "throughputSLA": 0.5,
        "profile": {
            "standaloneTokensPerSecond": 2500.0,
            "requiredMemoryGiB": 20.0,
            "memoryCurve": [
                {"memoryGiB": 8.0, "tokensPerSecond": 900.0},
                {"memoryGiB": 20.0, "tokensPerSecond": 2500.0},
            ],
            "memoryDeficitCoefficient": 40.0,
        },
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "OfflineJob",
        "metadata": {"name": "batch", "namespace": "default"},
        "spec": spec,
    }


def test_valid_job_round_trips() -> None:
    job = OfflineJob.model_validate(job_dict())
    assert job.spec.throughput_sla == 0.5
    assert job.status.phase is Phase.PENDING
    again = OfflineJob.model_validate(job.to_k8s())
    assert again == job
    assert job.to_k8s()["spec"]["profile"]["memoryCurve"][0]["memoryGiB"] == 8.0


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"throughputSLA": 0.0}, "throughputSLA"),
        ({"throughputSLA": 1.5}, "throughputSLA"),
        ({"gpus": 9}, "gpus"),
        ({"gpus": 0}, "gpus"),
        ({"profile": None}, "exactly one of spec.profile and spec.profileFrom"),
        ({"template": {"spec": {"containers": []}}}, "template.spec.containers"),
    ],
)
def test_invalid_specs_name_the_field(override: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as err:
        OfflineJob.model_validate(job_dict(**override))
    assert needle in str(err.value)


def test_decreasing_curve_is_refused() -> None:
    bad = job_dict()
    bad["spec"]["profile"]["memoryCurve"] = [
        {"memoryGiB": 8.0, "tokensPerSecond": 2000.0},
        {"memoryGiB": 20.0, "tokensPerSecond": 1000.0},
    ]
    with pytest.raises(ValidationError, match=r"memoryCurve\[1\]\.tokensPerSecond decreases"):
        OfflineJob.model_validate(bad)


def test_set_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    first = Condition(type="Valid", status=ConditionStatus.TRUE, reason="Accepted")
    conds = set_condition([], first)
    later = Condition(type="Valid", status=ConditionStatus.TRUE, reason="Accepted", message="x")
    conds = set_condition(conds, later)
    assert len(conds) == 1
    assert conds[0].last_transition_time == first.last_transition_time
    assert conds[0].message == "x"
