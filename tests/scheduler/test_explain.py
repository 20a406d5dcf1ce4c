"""One explanation path: placements, explain_nodes and explain_set answer in one wording,
with the bias that chose a set; SchedulingSnapshot and decide are the one entry."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from gleaner.perfmodel import predict
from gleaner.perfmodel.admission import pairs_admissible, reaches_sla
from gleaner.scheduler import (
    BiasTable,
    JobRequest,
    SchedulingSnapshot,
    decide,
    explain_nodes,
    explain_set,
)
from gleaner.testing.scheduling import simple_profile, synthetic_node

PROFILE = simple_profile()


def _biased(node: str, ratio: float) -> BiasTable:
    bias = BiasTable()
    for _ in range(30):
        bias.observe(node, "", observed=ratio * 0.7, predicted=0.7)
    return bias


def test_a_placement_explains_itself_with_the_bias_that_chose_it() -> None:
    nodes = {"n": synthetic_node("n", [0.2], [])}  # model: 0.8
    job = JobRequest("ns/a", PROFILE, 1, 0.6)
    (placed,) = decide(SchedulingSnapshot([job], nodes, bias=_biased("n", 0.9))).placements
    ex = placed.explanation
    assert ex is not None and ex.feasible and ex.node == "n" and ex.gpus == (0,)
    assert ex.bias == pytest.approx(placed.bias) and ex.bias < 1.0
    assert ex.throughput_fraction == pytest.approx(placed.throughput_fraction)
    # The recorded reasons are those of the corrected product, naming the bias.
    assert placed.reasons[0] == f"predicted {placed.throughput_fraction:.2f} >= SLA 0.60 " + (
        f"(bias {placed.bias:.2f})"
    )
    assert placed.prediction.reasons[0] == placed.reasons[0]
    assert [r.name for r in ex.rules] == [
        "NodeUsable",
        "NodeExcluded",
        "GPUSelector",
        "GPUFree",
        "Instrumented",
        "PairOverlap",
        "MemoryFit",
        "ThroughputSLA",
    ]
    assert ex.message == f"placed on n GPUs 0: predicted {placed.throughput_fraction:.2f} " + (
        "of standalone throughput"
    )


def test_explain_nodes_words_each_node_as_the_scheduler_does() -> None:
    nodes = {
        "good": synthetic_node("good", [0.2, 0.2], [[0, 1]]),
        "split": synthetic_node("split", [0.2, 0.2], []),  # never busy together
        "slow": synthetic_node("slow", [0.7, 0.7], [[0, 1]]),
        "full": synthetic_node("full", [0.2, 0.2], [[0, 1]]),
        "barred": synthetic_node("barred", [0.1, 0.1], [[0, 1]]),
    }
    job = JobRequest("ns/a", PROFILE, 2, 0.5, excluded_nodes=frozenset({"barred"}))
    snap = SchedulingSnapshot([job], nodes, occupied={"full": {1: "ns/b"}})
    by = {e.node: e for e in explain_nodes(snap, job, skip=["good"])}
    assert set(by) == {"split", "slow", "full", "barred"}
    assert by["barred"].why == "job missed its SLA there before"
    assert by["full"].why == "fewer than 2 free GPUs" and not by["full"].gpus
    assert by["slow"].gpus == (0, 1) and "< SLA 0.50 (compute 0.30)" in by["slow"].why
    # No aligned pair: the best unaligned set is judged, and the pair rule names the pair.
    assert by["split"].gpus == (0, 1)
    assert "GPU pair 0-1: busy overlap" in by["split"].why and "(admission)" in by["split"].why
    (good,) = explain_nodes(snap, job, skip=["split", "slow", "full", "barred"])
    assert good.feasible and good.score is not None
    assert good.lost_to(("other", 0.95)).startswith("predicted 0.80 < 0.95 on other (")


def test_explain_set_agrees_with_decide_and_with_predict() -> None:
    nodes = {"n": synthetic_node("n", [0.3, 0.3, 0.3, 0.4], [[0, 1, 2]])}
    job = JobRequest("ns/a", PROFILE, 2, 0.6)
    snap = SchedulingSnapshot([job], nodes)
    (placed,) = decide(snap).placements
    again = explain_set(snap, job, "n", placed.gpus)
    assert again.reasons == placed.reasons and again.feasible
    bad = explain_set(snap, job, "n", [0, 3])
    assert not bad.feasible
    pred = predict(PROFILE, 0.6, nodes["n"], [0, 3])
    assert bad.reasons[0] == pred.reasons[0]
    assert [r for r in pred.reasons if "GPU pair" in r] == [
        r for r in bad.reasons if "GPU pair" in r
    ]
    with pytest.raises(ValueError, match="unknown node"):
        explain_set(snap, job, "nope", [0, 1])
    with pytest.raises(ValueError, match="runs on 2 GPU"):
        explain_set(snap, job, "n", [0])


def test_one_admission_rule_for_predict_and_the_filters() -> None:
    # A product equal to the SLA up to rounding passes everywhere (the filters' tolerance).
    assert reaches_sla(np.array([0.6 - 1e-13, 0.59]), 0.6).tolist() == [True, False]
    assert pairs_admissible(np.array([0.95 - 1e-13, 0.9]), 2, 0.95).tolist() == [True, False]
    assert pairs_admissible(np.array([0.0]), 1, 0.95).tolist() == [True]


def test_snapshot_marks_stale_nodes_and_judges_backoff_at_its_time() -> None:
    node = synthetic_node("n", [0.2], [])
    assert node.last_report_time is not None
    late = node.last_report_time + timedelta(seconds=700)
    job = JobRequest("ns/a", PROFILE, 1, 0.5, not_before=late.timestamp() + 1)
    stale = SchedulingSnapshot([job], {"n": node}, now=late, stale_after_seconds=600)
    assert stale.state().unavailable == {"n": "stale trace"}
    assert decide(stale).deferred == ["ns/a"]
    waited = SchedulingSnapshot(
        [job], {"n": node}, now=late + timedelta(seconds=2), stale_after_seconds=600
    )
    (u,) = decide(waited).unschedulable
    assert u.message == "0/1 nodes are available: 1 node unavailable: stale trace."
    cordoned = SchedulingSnapshot([job], {"n": node}, unavailable={"n": "cordoned"})
    assert decide(cordoned).unschedulable[0].reasons == ("1 node unavailable: cordoned",)
