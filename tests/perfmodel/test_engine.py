"""The one engine model (gleaner.perfmodel.engine): formulas, KV sizes, throughput vs memory."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from gleaner.perfmodel.engine import ENGINES, GIB, LLAMA31_8B_H100, EngineModel

M = LLAMA31_8B_H100


def test_the_iteration_latency_is_the_documented_sum() -> None:
    p = np.array([3.0, 1.0])
    c = np.array([10.0, 100.0])
    expected = (M.k1 + M.k3) * 4 + M.k2 * (3 * 13 + 1 * 101) + M.k4 * 114 + M.k5
    assert M.batch(p, c) == pytest.approx(expected, rel=1e-12)
    assert M.prefill(512) == pytest.approx(M.step(512, 512 * 512, 512))
    assert M.decode(8, 99) == pytest.approx(M.batch(np.ones(8), np.full(8, 99.0)))


def test_kv_use_per_token_comes_in_blocks() -> None:
    assert M.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert M.block_tokens == 16
    assert M.block_bytes == 16 * M.kv_bytes_per_token
    assert [M.blocks_for(n) for n in (0, 1, 16, 17)] == [0, 1, 1, 2]
    assert M.kv_gib(GIB / M.kv_bytes_per_token) == pytest.approx(1.0)


def test_offline_throughput_grows_with_memory_and_stops_at_max_seqs() -> None:
    rates = [M.batch_throughput(kv, 1024, 256, 256) for kv in (0.01, 1, 4, 16, 64, 128)]
    assert rates[0] == 0.0  # not even one request fits
    assert all(b > a for a, b in itertools.pairwise(rates[:-1]))
    # 256 requests of 1,152 tokens need ~36 GiB: beyond that the batch is capped.
    assert rates[-1] == pytest.approx(rates[-2])


def test_parameters_are_checked() -> None:
    with pytest.raises(ValueError):
        EngineModel(k1=-1, k2=0, k3=0, k4=0, k5=0, kv_bytes_per_token=1, weights_gib=1)
    with pytest.raises(ValueError):
        EngineModel(
            k1=0, k2=0, k3=0, k4=0, k5=0, kv_bytes_per_token=1, weights_gib=1, block_tokens=0
        )
    assert ENGINES["llama-3.1-8b-h100"] is M


def test_resident_memory_and_recompute_cost_are_the_engines() -> None:
    m = LLAMA31_8B_H100
    assert m.resident_gib == pytest.approx(m.weights_gib + m.runtime_gib)
    assert 17.5 < m.resident_gib < 18.5  # an 8B model in BF16 under vLLM: about 18 GiB
    # Recomputing t tokens costs a prefill of t tokens less the fixed per-iteration term.
    for t in (1.0, 512.0, 4096.0):
        assert t * m.recompute_per_token(t) == pytest.approx(m.prefill(t) - m.k5)
    with pytest.raises(ValueError, match="runtime_gib"):
        EngineModel(
            k1=0, k2=0, k3=0, k4=0, k5=0, kv_bytes_per_token=1, weights_gib=1, runtime_gib=-1
        )


def test_online_load_follows_littles_law_over_the_iteration_latency() -> None:
    """At a low rate one request at a time: busy = 1 - exp(-rate * R) with R a lone
    request's prefill and decode steps; at higher rates batching shares the weight read
    (busy grows slower than the rate), and the KV held is the requests in flight times
    their mean context."""
    p, o = 2747.0, 267.0
    lone = M.prefill(p) + o * M.decode(1, p + o / 2)
    rates = np.array([0.0, 1e-4, 0.3, 1.0, 3.0, 1e4])
    busy, tokens = M.online_load(rates, p, o)
    assert busy[0] == 0.0 and tokens[0] == 0.0
    assert busy[1] == pytest.approx(1 - np.exp(-1e-4 * lone), rel=1e-3)
    assert np.all(np.diff(busy) > 0) and busy[-1] == pytest.approx(1.0)
    assert busy[3] > 1 - np.exp(-1.0 * lone)  # a batch's step is longer than a lone one's
    held = -np.log1p(-busy[2])  # requests in flight at 0.3/s
    assert held > 0.3 * lone  # batching makes each request take longer
    assert tokens[2] == pytest.approx(held * (p + o / 2), rel=1e-6)
    # Waiting requests beyond max_seqs hold no KV cache.
    assert tokens[-1] == pytest.approx(256 * (p + o / 2))


def test_online_load_moves_with_the_engine_constants() -> None:
    rates = np.array([0.2, 0.8])
    shipped, _ = M.online_load(rates, 2747, 267)
    slower, _ = replace(M, k1=2 * M.k1).online_load(rates, 2747, 267)
    assert (slower > shipped).all()
