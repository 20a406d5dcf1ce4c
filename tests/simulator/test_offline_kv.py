"""The offline job's memory curve and KV layout, and its fit with the agent's reclamation."""

from __future__ import annotations

import numpy as np

from gleaner.runtime_agent.policy.reclaim import (
    plan_reclamation,
    reclaim_cost,
    select_handles_fifo,
    select_handles_greedy,
)
from gleaner.simulator.latency import LLAMA31_8B_H100 as M
from gleaner.simulator.offline import BLOCK_TOKENS, OfflineJobConfig, OfflineKV, memory_curve


def test_memory_curve_is_a_valid_profile() -> None:
    curve = memory_curve(M, OfflineJobConfig(), 58.0)
    mem, tps = np.array(curve.memory_gib), np.array(curve.tokens_per_second)
    assert (np.diff(mem) > 0).all() and (np.diff(tps) >= 0).all()
    assert mem[0] > curve.weights_gib
    assert curve.weights_gib < curve.required_memory_gib <= mem[-1]
    assert curve.rate(curve.required_memory_gib) >= 0.95 * curve.standalone
    assert curve.rate(curve.weights_gib - 1) == 0.0
    # An 8B model in BF16 on one H100: a few thousand tokens/s of batch throughput.
    assert 2000 < curve.standalone < 6000


def _kv(handles: int = 12, seed: int = 4) -> OfflineKV:
    kv = OfflineKV(handle_tokens=1024, job=OfflineJobConfig(), rng=np.random.default_rng(seed))
    kv.add_handles(handles)
    for _ in range(20):
        kv.generate(600)
    return kv


def test_layout_accounts_for_every_block() -> None:
    kv = _kv()
    hm = kv.handle_map()
    used = sum(len(s.blocks) for spans in hm.values() for s in spans)
    assert used + kv.free_blocks() == kv.handles * kv.blocks_per_handle
    assert list(hm) == sorted(hm)  # mapping order, oldest first
    for spans in hm.values():
        for s in spans:
            assert s.tokens > 0 and s.tokens % 1 == 0


def test_remove_handles_recomputes_what_the_agent_planned() -> None:
    for selector in (select_handles_greedy, select_handles_fifo):
        kv = _kv()
        hm = kv.handle_map()
        plan = plan_reclamation(0, hm, 3, handle_bytes=1024 * 131072, selector=selector)
        before = kv.handles
        got = kv.remove_handles(list(plan.handles))
        assert kv.handles == before - 3
        assert got == plan.tokens_to_recompute == reclaim_cost(hm, list(plan.handles))
        assert set(kv.handle_map()).isdisjoint(plan.handles)


def test_greedy_never_costs_more_than_fifo_on_simulated_layouts() -> None:
    for seed in range(5):
        hm = _kv(seed=seed).handle_map()
        for k in (1, 3, 6):
            greedy = reclaim_cost(hm, select_handles_greedy(hm, k))
            fifo = reclaim_cost(hm, select_handles_fifo(hm, k))
            assert greedy <= fifo


def test_first_fit_fills_oldest_handles_first() -> None:
    kv = OfflineKV(
        handle_tokens=64 * BLOCK_TOKENS,
        job=OfflineJobConfig(max_seqs=4),
        rng=np.random.default_rng(1),
    )
    kv.add_handles(50)
    hm = kv.handle_map()
    occupied = [h for h, spans in hm.items() if spans]
    assert occupied == sorted(hm)[: len(occupied)]
