"""The workload and latency models: arrival statistics, BurstGPT-like lengths, coefficients."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.simulator.latency import LLAMA31_8B_H100 as M
from gleaner.simulator.workload import (
    ArrivalConfig,
    LengthConfig,
    gamma_arrivals,
    generate_requests,
    lognormal_lengths,
)


def test_gamma_arrivals_have_the_configured_rate_and_cv() -> None:
    rng = np.random.default_rng(1)
    t = gamma_arrivals(rng, ArrivalConfig(rate_per_s=2.0, cv=2.5), 50_000.0)
    gaps = np.diff(t)
    assert abs(len(t) / 50_000.0 - 2.0) / 2.0 < 0.05
    assert abs(gaps.std() / gaps.mean() - 2.5) < 0.15
    assert (t >= 0).all() and (t < 50_000.0).all() and (np.diff(t) >= 0).all()


def test_poisson_special_case() -> None:
    rng = np.random.default_rng(2)
    gaps = np.diff(gamma_arrivals(rng, ArrivalConfig(rate_per_s=5.0, cv=1.0), 20_000.0))
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05


def test_burstgpt_means_survive_clipping() -> None:
    rng = np.random.default_rng(3)
    prompt = lognormal_lengths(rng, LengthConfig(mean=2747, sigma=1.0, max=32768), 400_000)
    output = lognormal_lengths(rng, LengthConfig(mean=267, sigma=1.0, max=4096), 400_000)
    assert abs(prompt.mean() / 2747 - 1) < 0.01
    assert abs(output.mean() / 267 - 1) < 0.01
    assert prompt.min() >= 1 and prompt.max() <= 32768


def test_same_seed_same_requests() -> None:
    args = (ArrivalConfig(rate_per_s=1.0), LengthConfig(mean=100), LengthConfig(mean=10), 100.0)
    a = generate_requests(np.random.default_rng(9), *args)
    b = generate_requests(np.random.default_rng(9), *args)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.prompt, b.prompt)


def test_coefficients_match_public_figures() -> None:
    # Single-request decode of an 8B model on an H100 is weight-read bound: ~6-7 ms/token.
    assert 0.005 < M.decode(1, 3000) < 0.008
    # A BurstGPT-mean prompt (2,747 tokens) prefills in ~0.1 s.
    assert 0.08 < M.prefill(2747) < 0.13
    # Batched decode stays well under 20 ms at 32 requests of 3k context.
    assert 0.010 < M.decode(32, 3000) < 0.020
    assert M.kv_bytes_per_token == 131072


@settings(max_examples=50)
@given(
    p=st.lists(st.integers(1, 4096), min_size=1, max_size=16),
    c=st.lists(st.integers(0, 32768), min_size=16, max_size=16),
    extra=st.integers(1, 512),
)
def test_latency_grows_with_tokens_and_context(p: list[int], c: list[int], extra: int) -> None:
    new = np.array(p, dtype=np.float64)
    ctx = np.array(c[: len(p)], dtype=np.float64)
    base = M.batch(new, ctx)
    assert M.batch(new + extra, ctx) > base
    assert M.batch(new, ctx + extra) > base
    total = new + ctx
    assert np.isclose(base, M.step(new.sum(), float(np.dot(new, total)), total.sum()))
