"""The model's math on small cases worked out by hand (DESIGN.md "Performance model")."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest

from gleaner.api import MemoryPoint, Profile
from gleaner.perfmodel import (
    GpuFleet,
    JobProfile,
    ModelConfig,
    NodeSummary,
    compute_factor,
    compute_factors,
    memory_factor,
    memory_factors_single,
    multi_gpu_factor,
    predict,
    subset_factors,
)

# Thrput(M) = 20 at 4 GiB rising linearly to 100 at 12 GiB; M_req = 12; MAC = 2.
PROFILE = JobProfile(100.0, 12.0, (4.0, 12.0), (20.0, 100.0), 2.0)


def node_from(
    busy: Sequence[Sequence[float]],
    free: Sequence[Sequence[float]],
    enabled: Sequence[Sequence[float]] | None = None,
    name: str = "n1",
) -> NodeSummary:
    t = np.arange(len(busy), dtype=float)
    return NodeSummary.from_samples(
        name, list(range(len(busy[0]))), t, busy, free, enabled, step_gib=0.5
    )


def test_throughput_interpolates_zero_below_flat_above() -> None:
    got = PROFILE.throughput_at([0.0, 3.99, 4.0, 8.0, 12.0, 40.0])
    assert got.tolist() == pytest.approx([0.0, 0.0, 20.0, 60.0, 100.0, 100.0])


def test_from_api_profile() -> None:
    api = Profile(
        standalone_tokens_per_second=50,
        required_memory_gi_b=8,
        memory_curve=[
            MemoryPoint(memory_gi_b=2, tokens_per_second=10),
            MemoryPoint(memory_gi_b=8, tokens_per_second=50),
        ],
        memory_deficit_coefficient=1.5,
    )
    p = JobProfile.from_api(api)
    assert p.curve_memory_gib == (2.0, 8.0)
    assert p.curve_tokens_per_second == (10.0, 50.0)
    assert p.memory_deficit_coefficient == 1.5
    assert p.throughput_at([5.0]).tolist() == [30.0]


def test_single_gpu_factors_by_hand() -> None:
    # 4 one-second samples: busy 1,0,0,1 -> P_compute (no agent) = 1 - 2/4 = 0.5.
    # Free 12, 8, 8, 4 GiB: Thrput 100, 60, 60, 20 -> E = 60; deficit 0,4,4,8 -> E = 4.
    # P_memory = (60 - 2*4) / 100 = 0.52.
    node = node_from([[1], [0], [0], [1]], [[12], [8], [8], [4]])
    assert compute_factor(node, [0]) == pytest.approx(0.5)
    assert memory_factor(PROFILE, node, [0]) == pytest.approx(0.52)
    assert multi_gpu_factor(node, [0]) == 1.0
    pred = predict(PROFILE, 0.2, node, [0], job="j")
    assert pred.throughput_fraction == pytest.approx(0.26)
    assert pred.tokens_per_second == pytest.approx(26.0)
    assert pred.feasible
    assert pred.reasons[0] == "predicted 0.26 >= SLA 0.20"


def test_agent_enabled_time_wins_over_busy() -> None:
    node = node_from([[1], [1], [0], [0]], [[12]] * 4, enabled=[[0], [0], [0], [1]])
    assert compute_factor(node, [0]) == pytest.approx(0.25)


def test_multi_gpu_tightest_memory_min_compute_and_pairs() -> None:
    # GPU0 busy 1,1,0,0; GPU1 busy 1,0,0,0 -> overlap 1, union 2 -> P_multi 0.5.
    # Memory: min(12, 8)=8, min(4, 12)=4, 12, 12 -> Thrput 60,20,100,100 = E 70;
    # deficit 4, 8, 0, 0 -> E 3; P_memory = (70 - 6) / 100 = 0.64.
    node = node_from(
        [[1, 1], [1, 0], [0, 0], [0, 0]],
        [[12, 8], [4, 12], [12, 12], [12, 12]],
    )
    assert compute_factor(node, [0, 1]) == pytest.approx(0.5)  # min(0.5, 0.75)
    assert memory_factor(PROFILE, node, [0, 1]) == pytest.approx(0.64)
    assert multi_gpu_factor(node, [0, 1]) == pytest.approx(0.5)
    pred = predict(PROFILE, 0.6, node, [0, 1], job="j")
    assert pred.throughput_fraction == pytest.approx(0.5 * 0.64 * 0.5)
    assert not pred.feasible
    assert pred.reasons[0] == "predicted 0.16 < SLA 0.60 (compute 0.50)"
    assert "GPU pair 0-1: busy overlap 0.50 < 0.95 (admission)" in pred.reasons


def test_admission_blocks_even_when_product_meets_sla() -> None:
    # overlap 9 / union 10 = 0.9 < 0.95 while the agent kept offline work enabled.
    node = node_from([[1, 1]] * 9 + [[1, 0]], [[20, 20]] * 10, enabled=[[1, 1]] * 10)
    pred = predict(PROFILE, 0.5, node, [0, 1])
    assert pred.compute == 1.0 and pred.memory == 1.0
    assert pred.multi_gpu == pytest.approx(0.9)
    assert pred.throughput_fraction >= 0.5
    assert not pred.feasible
    relaxed = predict(PROFILE, 0.5, node, [0, 1], ModelConfig(min_pair_overlap=0.85))
    assert relaxed.feasible


def test_never_busy_pair_scores_one_and_unmeasured_pair_zero() -> None:
    node = node_from([[0, 0]] * 3, [[20, 20]] * 3)
    assert multi_gpu_factor(node, [0, 1]) == 1.0
    unmeasured = NodeSummary.from_totals(
        "n", [0, 1], 10.0, [0, 0], None, None, None, np.full((1, 2), 20.0), 10.0
    )
    assert multi_gpu_factor(unmeasured, [0, 1]) == 0.0
    pred = predict(PROFILE, 0.1, unmeasured, [0, 1])
    assert "GPU pair 0-1: busy overlap not measured" in pred.reasons
    assert not pred.feasible


def test_to_json_has_exactly_design_keys() -> None:
    node = node_from([[0]], [[12]])
    data = predict(PROFILE, 0.5, node, [0], job="ns/j").to_json()
    assert list(data) == [
        "job", "node", "gpus", "compute", "memory", "multi_gpu",
        "throughput_fraction", "tokens_per_second", "sla", "feasible", "reasons",
    ]  # fmt: skip
    assert data["gpus"] == [0] and data["feasible"] is True


@pytest.mark.parametrize(
    ("gpus", "sla", "message"),
    [
        ([7], 0.5, "has no GPU 7"),
        ([0, 0], 0.5, "distinct"),
        ([], 0.5, "at least one GPU"),
        ([0], 0.0, "SLA"),
        ([0], 1.5, "SLA"),
    ],
)
def test_bad_requests_raise(gpus: list[int], sla: float, message: str) -> None:
    node = node_from([[0, 0]], [[12, 12]])
    with pytest.raises(ValueError, match=message):
        predict(PROFILE, sla, node, gpus)


def test_empty_window_raises() -> None:
    node = NodeSummary.from_totals("n", [0], 0.0, [0], None, None, None, np.zeros((0, 1)), 1.0)
    with pytest.raises(ValueError, match="window is empty"):
        predict(PROFILE, 0.5, node, [0])


def test_no_memory_samples_predicts_zero_with_reason() -> None:
    node = NodeSummary.from_totals("n", [0], 60.0, [0], None, None, None, np.zeros((0, 1)), 1.0)
    pred = predict(PROFILE, 0.5, node, [0])
    assert pred.memory == 0.0
    assert any("no harvestable-memory samples" in r for r in pred.reasons)


def test_subset_factors_equal_scalar_factors() -> None:
    rng = np.random.default_rng(3)
    busy = (rng.random((200, 4)) < 0.3).astype(float)
    free = rng.uniform(2, 16, (200, 4))
    node = node_from(busy.tolist(), free.tolist())
    subsets = np.array(list(itertools.combinations(range(4), 2)))
    c, m, x = subset_factors(PROFILE, node, subsets)
    for i, (a, b) in enumerate(subsets):
        assert c[i] == pytest.approx(compute_factor(node, [int(a), int(b)]))
        assert m[i] == pytest.approx(memory_factor(PROFILE, node, [int(a), int(b)]))
        assert x[i] == pytest.approx(multi_gpu_factor(node, [int(a), int(b)]))


def test_fleet_equals_per_gpu_factors() -> None:
    rng = np.random.default_rng(5)
    nodes = [
        node_from(
            (rng.random((50, 3)) < 0.4).astype(float).tolist(),
            rng.uniform(0, 20, (50, 3)).tolist(),
            name=f"n{i}",
        )
        for i in range(4)
    ]
    nodes.append(
        NodeSummary.from_totals("empty", [0], 60.0, [0], None, None, None, np.zeros((0, 1)), 1.0)
    )
    fleet = GpuFleet.from_summaries(nodes)
    assert fleet.size == 13
    expected_mem = [memory_factor(PROFILE, n, [g]) for n in nodes for g in n.gpu_indices]
    expected_cmp = np.concatenate([compute_factors(n) for n in nodes])
    assert fleet.memory_factors(PROFILE) == pytest.approx(expected_mem)
    assert memory_factors_single(PROFILE, nodes) == pytest.approx(expected_mem)
    assert fleet.throughput_fractions(PROFILE) == pytest.approx(
        expected_cmp * np.array(expected_mem)
    )
    assert fleet.node_names[int(fleet.node_ids[-1])] == "empty"
