"""The shared test fixtures build what they say, through the API's own models."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gleaner.testing.fixtures import container_env, make_placement, make_queued_job

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_placement_predicts_its_factors_product_unless_told_otherwise() -> None:
    p = make_placement("gpu-node-7", [2, 3], compute=0.8, memory=0.9, multi_gpu=0.5, decided_at=AT)
    assert (p.node, p.gpu_indices, p.gpu_uuids) == ("gpu-node-7", [2, 3], [])
    assert p.throughput_fraction == pytest.approx(0.36)
    assert make_placement(compute=0.8, fraction=0.4, decided_at=AT).throughput_fraction == 0.4
    # Built through the model: its bounds hold.
    with pytest.raises(ValidationError):
        make_placement(compute=1.5, decided_at=AT)


def test_a_queued_job_carries_its_manifests_inline_profile() -> None:
    queued = make_queued_job("llama", namespace="team-a", gpus=2, standalone=2000.0)
    assert queued.key == "team-a/llama"
    assert queued.job.spec.gpus == 2
    assert queued.profile.standalone_tokens_per_second == 2000.0
    with pytest.raises(AssertionError):
        make_queued_job("from-configmap", profile_from="profiles")


def test_a_container_env_reads_values_and_leaves_references_empty() -> None:
    container = {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]
    }
    assert container_env(container) == {"A": "1", "TOKEN": ""}
    assert container_env({"name": "bare"}) == {}
