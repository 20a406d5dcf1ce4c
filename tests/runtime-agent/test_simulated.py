"""The simulated backend: deterministic synthetic load, trace replay, bursts, offline model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gleaner.api.nodetrace import gpu_uuid
from gleaner.runtime_agent.policy import GateConfig, MemoryConfig
from gleaner.runtime_agent.simulated import (
    SimulatedNode,
    SyntheticConfig,
    SyntheticOnline,
    TraceOnline,
    synthetic_inventory,
)

GATE = GateConfig(cool_floor_s=0.002, cool_ceiling_s=0.5, request_timeout_s=None)


def test_inventory_is_deterministic_per_node() -> None:
    a = synthetic_inventory("node-a", 4, 80)
    assert [g.uuid for g in a] == [g.uuid for g in synthetic_inventory("node-a", 4, 80)]
    assert a[0].uuid != synthetic_inventory("node-b", 4, 80)[0].uuid
    assert a[1].uuid == gpu_uuid("node-a", 1) and a[1].uuid.startswith("GPU-")
    assert a[3].memory_gi_b == 80
    with pytest.raises(ValueError):
        synthetic_inventory("x", 0, 80)


def _run(node: str, seconds: float) -> SimulatedNode:
    sim = SimulatedNode(node, synthetic_inventory(node, 2, 80), gate_config=GATE)
    sim.set_offline_jobs(0.0, {0: "ns/a"})
    sim.advance(seconds)
    return sim


def test_same_node_same_load_and_invariants_hold() -> None:
    a, b = _run("node-a", 30.0), _run("node-a", 30.0)
    ta, tb = a.agent.accounting.totals, b.agent.accounting.totals
    assert ta.gpus[0].online_busy_s == tb.gpus[0].online_busy_s > 0
    assert ta.gpus[0].preemptions == tb.gpus[0].preemptions
    c = _run("node-c", 30.0).agent.accounting.totals
    assert c.gpus[0].online_busy_s != ta.gpus[0].online_busy_s
    for g, t in ta.gpus.items():
        # Offline is never enabled while online is busy: the two never exceed the window.
        assert t.offline_enabled_s + t.online_busy_s <= 30.0 + 1e-6
        assert t.max_preemptions_per_request <= 1, g
        assert t.online_requests > 0
    assert 0 < ta.job_timeslice_s["ns/a"] <= ta.gpus[0].offline_enabled_s + 1e-9


def test_burst_closes_the_gate_for_its_duration() -> None:
    quiet = SyntheticOnline("q", SyntheticConfig(request_rate_per_s=1e-6))
    sim = SimulatedNode("q", synthetic_inventory("q", 2, 80), online=quiet, gate_config=GATE)
    sim.advance(1.0)
    assert all(sim.gate_open.values())
    sim.inject_burst(1.0, [1], 5.0, 1.0)
    sim.advance(3.0)
    assert sim.gate_open == {0: True, 1: False}
    sim.advance(6.1)
    assert sim.gate_open[1]
    t = sim.agent.accounting.totals.gpus[1]
    assert t.online_busy_s == pytest.approx(5.0)
    assert t.preemptions == 1
    with pytest.raises(ValueError):
        sim.inject_burst(7.0, [5], 1.0, 1.0)
    with pytest.raises(ValueError):
        sim.inject_burst(7.0, [0], 1.0, 0.0)


def test_fractional_burst_is_a_duty_cycle() -> None:
    quiet = SyntheticOnline("q", SyntheticConfig(request_rate_per_s=1e-6))
    sim = SimulatedNode("q", synthetic_inventory("q", 1, 80), online=quiet, gate_config=GATE)
    sim.inject_burst(0.0, [0], 2.0, 0.5)
    sim.advance(3.0)
    t = sim.agent.accounting.totals.gpus[0]
    assert t.online_busy_s == pytest.approx(1.0)
    # 50 ms idle > cooldown: one preemption per busy period, but for the first, which came
    # before the gate had ever opened.
    assert t.preemptions == 19
    assert t.online_requests == 20


def test_trace_replay(tmp_path: Path) -> None:
    rows = []
    for i in range(10):
        for gpu in (0, 1):
            rows.append(
                {
                    "timestamp": 100.0 + i,
                    "node": "tr",
                    "gpu": gpu,
                    "online_busy": 0.5 if gpu == 0 else (1.0 if i < 5 else 0.0),
                    "free_memory_gib": 40.0 if i % 2 else 30.0,
                }
            )
    rows.append({"timestamp": 0, "node": "other", "gpu": 0, "online_busy": 1, "free_memory_gib": 1})
    path = tmp_path / "trace.parquet"
    pd.DataFrame(rows).to_parquet(path)
    online = TraceOnline.from_file(path, "tr")
    sim = SimulatedNode(
        "tr",
        synthetic_inventory("tr", 2, 80),
        online=online,
        gate_config=GATE,
        memory_config=MemoryConfig(initial_handles=16),
    )
    sim.advance(20.0)  # the 10 s trace twice
    t = sim.agent.accounting.totals
    assert t.gpus[0].online_busy_s == pytest.approx(10.0, abs=0.01)
    assert t.gpus[1].online_busy_s == pytest.approx(10.0, abs=0.01)
    assert t.pairs[(0, 1)].overlap_s == pytest.approx(5.0, abs=0.01)
    assert t.pairs[(0, 1)].union_s == pytest.approx(15.0, abs=0.01)
    assert t.gpus[1].preemptions == 2  # one 5 s busy period per loop
    free = t.memory.states_gib()
    assert free.size and free.max() <= 40.0  # never more than the trace's free memory
    with pytest.raises(ValueError):
        TraceOnline.from_file(path, "missing")


def test_memory_pressure_reclaims_offline_handles_greedily() -> None:
    cfg = SyntheticConfig(request_rate_per_s=4.0, max_tokens=400, kv_bytes_per_token=1 << 20)
    sim = SimulatedNode(
        "m",
        synthetic_inventory("m", 1, 80),
        online=SyntheticOnline("m", cfg),
        gate_config=GATE,
        memory_config=MemoryConfig(initial_handles=8),
    )
    sim.set_offline_jobs(0.0, {0: "ns/off"})
    sim.advance(20.0)
    t = sim.agent.accounting.totals.gpus[0]
    assert t.reclamations > 0 and t.reclaimed_bytes > 0 and t.kv_blocks_invalidated > 0
    assert sim.offline[0].reclaimed_bytes == t.reclaimed_bytes
    assert sim.offline[0].recomputed_tokens > 0
    assert sim.agent.memory[0].pressure_events >= t.reclamations


def test_the_synthetic_server_runs_the_shared_engine_model() -> None:
    from gleaner.perfmodel.engine import LLAMA31_8B_H100, EngineModel
    from gleaner.runtime_agent.simulated import ENGINE, TOKENS_PER_BLOCK

    assert ENGINE is LLAMA31_8B_H100 and ENGINE.block_tokens == TOKENS_PER_BLOCK
    c = SyntheticConfig()
    assert c.prefill_latency() == ENGINE.prefill(c.prompt_tokens)
    assert c.iteration_latency(3, 600.0) == ENGINE.decode(3, 600.0)
    assert c.kv_bytes(10) == 10 * ENGINE.kv_bytes_per_token
    fixed = SyntheticConfig(prefill_s=0.04, iteration_s=0.02, kv_bytes_per_token=7)
    assert (fixed.prefill_latency(), fixed.iteration_latency(9, 1.0), fixed.kv_bytes(2)) == (
        0.04,
        0.02,
        14,
    )
    slow = EngineModel(k1=0, k2=0, k3=0, k4=0, k5=0.5, kv_bytes_per_token=1, weights_gib=1)
    assert SyntheticConfig(engine=slow).iteration_latency(1, 1.0) == 0.5
