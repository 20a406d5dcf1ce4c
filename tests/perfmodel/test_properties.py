"""Properties of the model that must hold for every input (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gleaner.perfmodel import (
    JobProfile,
    NodeSummary,
    compute_factor,
    memory_factor,
    multi_gpu_factor,
    predict,
)

N_T = 12


@st.composite
def profiles(draw: st.DrawFn) -> JobProfile:
    n = draw(st.integers(2, 5))
    steps = draw(st.lists(st.floats(0.5, 10), min_size=n, max_size=n))
    mem = np.cumsum(steps)
    gains = draw(st.lists(st.floats(0, 50), min_size=n, max_size=n))
    tps = np.cumsum(gains) + draw(st.floats(0, 10))
    standalone = max(float(tps[-1]), 1.0)
    return JobProfile(
        standalone_tokens_per_second=standalone,
        required_memory_gib=draw(st.floats(0.5, 60)),
        curve_memory_gib=tuple(float(x) for x in mem),
        curve_tokens_per_second=tuple(float(x) for x in tps),
        memory_deficit_coefficient=draw(st.floats(0, 20)),
    )


def unit_matrix(n_gpus: int) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, (N_T, n_gpus), elements=st.floats(0, 1))


def memory_matrix(n_gpus: int) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, (N_T, n_gpus), elements=st.floats(0, 80))


def summary(busy: np.ndarray, free: np.ndarray, enabled: np.ndarray | None = None) -> NodeSummary:
    g = busy.shape[1]
    return NodeSummary.from_samples(
        "n", list(range(g)), np.arange(N_T, dtype=float), busy, free, enabled, step_gib=0.5
    )


@settings(max_examples=60)
@given(profiles(), unit_matrix(3), memory_matrix(3), st.booleans(), unit_matrix(3))
def test_factors_stay_in_unit_interval(
    profile: JobProfile,
    busy: np.ndarray,
    free: np.ndarray,
    with_agent: bool,
    enabled: np.ndarray,
) -> None:
    node = summary(busy, free, enabled if with_agent else None)
    for gpus in ([0], [1, 2], [0, 1, 2]):
        pred = predict(profile, 0.5, node, gpus)
        for v in (pred.compute, pred.memory, pred.multi_gpu, pred.throughput_fraction):
            assert 0.0 <= v <= 1.0
        assert pred.feasible == (
            pred.throughput_fraction >= 0.5 and (len(gpus) == 1 or pred.multi_gpu >= 0.95)
        )


@settings(max_examples=60)
@given(
    profiles(),
    memory_matrix(2),
    arrays(np.float64, (N_T, 2), elements=st.floats(0, 20)),
)
def test_more_free_memory_never_lowers_p_memory(
    profile: JobProfile, free: np.ndarray, extra: np.ndarray
) -> None:
    busy = np.zeros((N_T, 2))
    low, high = summary(busy, free), summary(busy, free + extra)
    for gpus in ([0], [1], [0, 1]):
        assert memory_factor(profile, high, gpus) >= memory_factor(profile, low, gpus) - 1e-12


@settings(max_examples=60)
@given(unit_matrix(2), unit_matrix(2), memory_matrix(2))
def test_more_online_busy_never_raises_p_compute(
    busy: np.ndarray, more: np.ndarray, free: np.ndarray
) -> None:
    busier = np.clip(busy + more, 0, 1)
    for gpus in ([0], [1], [0, 1]):
        assert (
            compute_factor(summary(busier, free), gpus)
            <= compute_factor(summary(busy, free), gpus) + 1e-12
        )


@settings(max_examples=60)
@given(arrays(np.float64, (N_T,), elements=st.floats(0, 1)), st.integers(2, 4), memory_matrix(4))
def test_perfectly_aligned_gpus_score_one(busy: np.ndarray, n_gpus: int, free: np.ndarray) -> None:
    aligned = np.repeat(busy[:, None], n_gpus, axis=1)
    node = summary(aligned, free[:, :n_gpus])
    assert multi_gpu_factor(node, list(range(n_gpus))) == 1.0
