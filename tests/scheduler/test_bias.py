"""Closing the loop: the bias table learns observed/predicted and the scheduler listens."""

from __future__ import annotations

import numpy as np
import pytest

from gleaner.perfmodel import ModelConfig, predict
from gleaner.scheduler import (
    BiasConfig,
    BiasTable,
    ClusterState,
    JobRequest,
    SchedulerConfig,
    schedule,
)
from gleaner.testing.scheduling import simple_profile, synthetic_node

PROFILE = simple_profile()
TRUE_RATIO = 0.8  # the synthetic "slow" node delivers 20% less than the model predicts


def test_ewma_converges_on_a_node_twenty_percent_below_the_model() -> None:
    node = synthetic_node("slow", [0.25, 0.25], [[0, 1]])
    raw = predict(PROFILE, 0.5, node, [0, 1], ModelConfig()).throughput_fraction
    truth = TRUE_RATIO * raw
    rng = np.random.default_rng(7)
    table = BiasTable()
    errors = []
    for _ in range(15):
        observed = truth * (1 + rng.normal(0, 0.02))  # measurement noise, 2%
        assert table.observe("slow", "llm", observed, raw)
        errors.append(abs(table.corrected("slow", "llm", raw) - truth) / truth)
    assert errors[0] > 0.1  # one observation is not enough
    assert max(errors[-5:]) < 0.03  # within a few percent after ten
    assert table.entry("slow").observations == 15
    # The class-specific entry takes over only after min_observations.
    assert table.factor("slow", "other-class") == table.factor("slow")


def test_bounded_and_robust() -> None:
    cfg = BiasConfig(alpha=0.5, min_ratio=0.5, max_ratio=1.1)
    table = BiasTable(cfg)
    table.observe("n", "", observed=100.0, predicted=0.5)  # wild outlier: clamped
    assert table.factor("n") == pytest.approx(0.5 * 1.0 + 0.5 * 1.1)
    for _ in range(50):
        table.observe("n", "", observed=0.0, predicted=0.5)
    assert table.factor("n") >= 0.5
    assert not table.observe("n", "", observed=0.3, predicted=0.0)  # no information
    with pytest.raises(ValueError):
        BiasConfig(min_ratio=1.2)


def test_class_entry_overrides_after_enough_observations() -> None:
    table = BiasTable(BiasConfig(alpha=1.0, min_observations=2))
    table.observe("n", "a", 0.6, 1.0)
    table.observe("n", "b", 1.0, 1.0)
    assert table.factor("n", "a") == 1.0  # one observation of class a: node level (b last)
    table.observe("n", "a", 0.6, 1.0)
    assert table.factor("n", "a") == pytest.approx(0.6)
    restored = BiasTable.from_json(table.to_json(), table.config)
    assert restored.factor("n", "a") == table.factor("n", "a") and len(restored) == len(table)


def test_scheduler_stops_placing_an_sla_the_node_cannot_meet() -> None:
    nodes = {
        "slow": synthetic_node("slow", [0.28, 0.28], [[0, 1]]),  # model 0.72, truth 0.576
        "steady": synthetic_node("steady", [0.15, 0.15], [[0, 1]]),  # model 0.85, truth 0.85
    }
    job = JobRequest("ns/j", PROFILE, 2, 0.7, job_class="llm")
    table = BiasTable()
    best_fit = SchedulerConfig(sla_margin=0.0)  # least surplus decides, no margin preferred
    first = schedule([job], ClusterState(nodes, bias=table), best_fit).placements[0]
    assert first.node == "slow"  # best fit by the uncorrected model (least surplus)
    raw = first.prediction.throughput_fraction
    for _ in range(10):
        table.observe("slow", "llm", TRUE_RATIO * raw, raw)
    again = schedule([job], ClusterState(nodes, bias=table), best_fit).placements[0]
    assert again.node == "steady"
    assert again.throughput_fraction >= job.sla
    # A job the slow node can still serve after correction keeps going there.
    easy = JobRequest("ns/easy", PROFILE, 2, 0.5, job_class="llm")
    assert schedule([easy], ClusterState(nodes, bias=table), best_fit).placements[0].node == "slow"
