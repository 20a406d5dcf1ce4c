"""Every example in examples/ passes the CRD schema and pydantic; every invalid one fails both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gleaner.api import OfflineJob, Profile
from gleaner.api.schema_validation import validate_documents

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VALID = sorted(EXAMPLES.glob("*.yaml"))
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))

# file -> (field the CRD error names, pydantic error loc, CRD message text, pydantic message text)
EXPECTED_ERRORS = {
    "decreasing-memory-curve.yaml": (
        "spec.profile.memoryCurve",
        "spec.profile.memoryCurve",
        "tokensPerSecond must not decrease as memoryGiB increases",
        "memoryCurve[2].tokensPerSecond decreases (3900.0 < 4100.0)",
    ),
    "sla-out-of-range.yaml": (
        "spec.throughputSLA",
        "spec.throughputSLA",
        "spec.throughputSLA in body should be less than or equal to 1",
        "Input should be less than or equal to 1",
    ),
    "both-profile-sources.yaml": (
        "spec",
        "spec",
        "exactly one of spec.profile and spec.profileFrom must be set",
        "exactly one of spec.profile and spec.profileFrom must be set",
    ),
    "too-many-gpus.yaml": (
        "spec.gpus",
        "spec.gpus",
        "spec.gpus in body should be less than or equal to 8",
        "Input should be less than or equal to 8",
    ),
}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_there_are_enough_examples() -> None:
    jobs = [d for p in VALID for d in load(p) if d["kind"] == "OfflineJob"]
    assert len(jobs) >= 3
    assert {j["spec"].get("gpus", 1) for j in jobs} >= {1, 2}
    assert any("profileFrom" in j["spec"] for j in jobs)
    assert len(INVALID) >= 3
    assert {p.name for p in INVALID} == set(EXPECTED_ERRORS)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_example_is_valid_for_the_crd_and_pydantic(path: Path) -> None:
    docs = load(path)
    results = validate_documents([(path.name, d) for d in docs])
    assert [str(e) for r in results for e in r.errors] == []
    assert not any(r.skipped for r in results), "every document is checked"
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    for doc in docs:
        if doc["kind"] != "OfflineJob":
            continue
        job = OfflineJob.model_validate(doc)
        assert job.spec.template is not None
        assert job.spec.template["spec"]["containers"][0]["image"].startswith("vllm/vllm-openai:")
        requests = [
            c.get("resources", {}).get("requests", {})
            for c in job.spec.template["spec"]["containers"]
        ]
        assert not any("nvidia.com/gpu" in r for r in requests), "GPUs are Gleaner's to assign"
        ref = job.spec.profile_from
        if ref is not None and ref.auto and ref.name not in configmaps:
            # Profile on submit: the operator measures and writes it (docs/profiling.md).
            assert ref.measurement.base_gi_b > 0, "a real model has weights besides the KV cache"
            continue
        if job.spec.profile_from is not None:
            cm = configmaps[job.spec.profile_from.name]
            profile = Profile.model_validate(yaml.safe_load(cm["data"][job.spec.profile_from.key]))
        else:
            assert job.spec.profile is not None
            profile = job.spec.profile
        assert profile.memory_curve[-1].tokens_per_second <= profile.standalone_tokens_per_second


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example_is_refused_by_both_naming_the_field(path: Path) -> None:
    crd_field, pydantic_loc, crd_text, pydantic_text = EXPECTED_ERRORS[path.name]
    (doc,) = load(path)
    (result,) = validate_documents([(path.name, doc)])
    assert not result.valid
    assert [e.field for e in result.errors] == [crd_field]
    assert crd_text in str(result.errors[0])
    with pytest.raises(ValidationError) as err:
        OfflineJob.model_validate(doc)
    text = str(err.value)
    assert pydantic_text in text
    locs = {".".join(str(p) for p in e["loc"]) for e in err.value.errors()}
    assert pydantic_loc in locs or any(loc.startswith(pydantic_loc) for loc in locs), locs
