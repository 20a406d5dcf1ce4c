"""spec.slaWindow: a duration with a documented default that pydantic and the CRD agree on."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from gleaner.api import DEFAULT_SLA_WINDOW, OfflineJob
from gleaner.api.schema_validation import validate_object

BASE: dict[str, Any] = {
    "apiVersion": "gleaner.dev/v1alpha1",
    "kind": "OfflineJob",
    "metadata": {"name": "batch", "namespace": "default"},
    "spec": {
        "template": {"spec": {"containers": [{"name": "w", "image": "vllm/vllm-openai"}]}},
        "throughputSLA": 0.5,
        "profile": {
            "standaloneTokensPerSecond": 2500,
            "requiredMemoryGiB": 20,
            "memoryCurve": [
                {"memoryGiB": 8, "tokensPerSecond": 900},
                {"memoryGiB": 20, "tokensPerSecond": 2500},
            ],
        },
    },
}


def _job(window: str | None) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    if window is not None:
        obj["spec"]["slaWindow"] = window
    return obj


def test_the_default_is_tens_of_minutes() -> None:
    spec = OfflineJob.model_validate(_job(None)).spec
    assert spec.sla_window == DEFAULT_SLA_WINDOW == "30m"
    assert spec.sla_window_seconds == 1800.0
    assert validate_object(_job(None)) == []


@pytest.mark.parametrize(
    ("text", "seconds"), [("1m", 60.0), ("90m", 5400.0), ("2h", 7200.0), ("1h30m", 5400.0)]
)
def test_minutes_and_hours_are_accepted_by_both(text: str, seconds: float) -> None:
    assert OfflineJob.model_validate(_job(text)).spec.sla_window_seconds == seconds
    assert validate_object(_job(text)) == []


@pytest.mark.parametrize("text", ["30s", "0m", "1.5h", "30", "1d", "h", "", "30m 1h"])
def test_other_forms_are_refused_by_both(text: str) -> None:
    with pytest.raises(ValidationError, match=r"sla_window|slaWindow"):
        OfflineJob.model_validate(_job(text))
    errors = validate_object(_job(text))
    assert errors and all(e.field == "spec.slaWindow" for e in errors)
