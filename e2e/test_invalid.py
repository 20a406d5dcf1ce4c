"""Scenario 6: invalid OfflineJobs are refused with field-level messages; nothing else moves.

This scenario stays on kmock's emulator: a real API server refuses the invalid examples at
admission (the CRD's schema and CEL rules; e2e/controlplane/test_real_apiserver.py checks
that), so only an API server that does not enforce them lets them reach the operator, as
they would on a cluster whose CRD is older than the operator (or through a client that
skips validation). Each must end in phase Invalid with a
``Valid=False`` condition and an ``InvalidSpec`` Event whose message names the offending
field, get no Pod, and be counted as Invalid; a job whose ConfigMap profile does not exist
likewise. A valid job running meanwhile must be untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gleaner.testing.system import GleanerSystem, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VALID = "mistral-7b-ticket-triage"

# invalid example -> (job name, the field(s) its message must name)
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "both-profile-sources.yaml": ("bad-profile-sources", ("spec.profile", "spec.profileFrom")),
    "decreasing-memory-curve.yaml": ("bad-curve", ("spec.profile.memoryCurve",)),
    "sla-out-of-range.yaml": ("bad-sla", ("spec.throughputSLA",)),
    "too-many-gpus.yaml": ("bad-gpus", ("spec.gpus",)),
}
MISSING_PROFILE = "profile-configmap-missing"


def _missing_profile_job(examples: Path) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((examples / "mistral-7b-profile-configmap.yaml").read_text()))
    [job] = [d for d in docs if d["kind"] == "OfflineJob"]
    job["metadata"]["name"] = MISSING_PROFILE
    job["spec"]["profileFrom"] = {"name": "no-such-profile", "key": "profile.yaml"}
    return dict(job)


def _kept(status: dict[str, Any]) -> dict[str, Any]:
    return {k: status.get(k) for k in ("phase", "placement", "pods", "evictionCount")}


def test_invalid_jobs_are_refused_and_disturb_nothing(
    start_system: Callable[..., GleanerSystem], examples: Path
) -> None:
    system = start_system(emulated=True)
    system.apply_file(examples / "mistral-7b-profile-configmap.yaml")
    before = system.wait_phase(VALID, "Running")["status"]
    placements_before = system.operator_metric("gleaner_operator_placements_total")

    invalid_dir = examples / "invalid"
    assert sorted(p.name for p in invalid_dir.glob("*.yaml")) == sorted(EXPECTED)
    for file in sorted(EXPECTED):
        system.apply_file(invalid_dir / file)
    system.apply(_missing_profile_job(examples))
    expected = {name: fields for name, fields in EXPECTED.values()}
    expected[MISSING_PROFILE] = ("spec.profileFrom",)

    for name, fields in expected.items():
        job = system.wait_phase(name, "Invalid")
        status = job["status"]
        valid = {c["type"]: c for c in status["conditions"]}["Valid"]
        assert valid["status"] == "False"
        for field in fields:
            assert field in valid["message"], (name, field, valid["message"])
            assert field in status["message"], (name, field, status["message"])
        assert status.get("placement") is None
        assert system.pods("batch", name) == []
        events = system.wait_events(name, "InvalidSpec")
        assert events[0]["type"] == "Warning"
        assert fields[0] in events[0]["message"]

    poll(
        lambda: system.operator_metric("gleaner_operator_jobs", phase="Invalid") == len(expected),
        timeout=20,
        what="the operator counting the invalid jobs",
    )
    # Nothing else moved: the valid job keeps its placement and its one Pod, nothing was
    # bound, the operator is healthy.
    assert _kept(system.job(VALID)["status"]) == _kept(before)
    assert [p["metadata"]["name"] for p in system.pods("batch")] == [f"{VALID}-0"]
    assert system.operator_metric("gleaner_operator_placements_total") == placements_before
    assert system.operator_metric("gleaner_operator_jobs", phase="Running") == 1
    assert system.dashboard("/healthz")[0] == 200
    assert system.operator is not None and system.operator.alive()

    # The dashboard lists every invalid job as Invalid with the operator's message (which
    # names the field); jobs whose spec does not parse are also named in the warnings.
    unparsable = {name for name, _ in EXPECTED.values()}
    body = system.wait_dashboard(
        "/api/jobs?phase=Invalid",
        lambda body: sorted(j["name"] for j in body) == sorted({*unparsable, MISSING_PROFILE}),
        "every invalid job listed as Invalid",
    )
    messages = {j["name"]: j["message"] for j in body}
    assert "spec.profileFrom" in messages[MISSING_PROFILE]
    for name, fields in EXPECTED.values():
        assert any(field in messages[name] for field in fields), (name, messages[name])
    overview = system.wait_dashboard(
        "/api/cluster",
        lambda body: all(
            any(f"batch/{name}" in w for w in body["warnings"]) for name in unparsable
        ),
        "a warning naming each job whose spec does not parse",
    )
    assert overview["summary"]["jobsByPhase"].get("Running") == 1
