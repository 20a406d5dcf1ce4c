"""The agent's Prometheus families: names of DESIGN.md, values from the accounting."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gleaner.api.units import GIB
from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.metrics import HARVESTABLE_HISTOGRAM, build_registry
from gleaner.runtime_agent.policy import GateConfig, KvSpan, MemoryConfig
from gleaner.runtime_agent.simulated import synthetic_inventory

DESIGN_NAMES = {
    "gleaner_gpu_offline_enabled_seconds_total",
    "gleaner_gpu_online_busy_seconds_total",
    "gleaner_gpu_pair_busy_overlap_seconds_total",
    "gleaner_gpu_pair_busy_union_seconds_total",
    "gleaner_online_requests_total",
    "gleaner_preemptions_total",
    "gleaner_memory_reclaim_events_total",
    "gleaner_memory_reclaimed_bytes_total",
    "gleaner_kv_blocks_invalidated_total",
    "gleaner_offline_job_timeslice_seconds_total",
    "gleaner_gpu_harvestable_memory_bytes",
    "gleaner_online_request_preemptions_bucket",
    "gleaner_memory_reservation_headroom_bytes",
    "gleaner_memory_release_interval_seconds",
}


def _agent() -> NodeAgent:
    table = {h: [KvSpan(f"r{h // 2}", (h,), 100)] for h in range(64)}
    agent = NodeAgent(
        node="n1",
        inventory=synthetic_inventory("n1", 2, 80),
        start=0.0,
        gate_config=GateConfig(cool_floor_s=0.01, request_timeout_s=None),
        memory_config=MemoryConfig(initial_handles=4),
        offline_handles=lambda gpu: table,
    )
    agent.set_offline_jobs(0.0, {0: "team/llm", 1: "team/llm"})
    agent.tick(1.0)  # both gates open at 0.01
    agent.online_busy(2.0, 0, "p", "q1")
    agent.online_busy(2.5, 1, "p")
    agent.online_idle(3.0, 0, "p", ["q1"])
    agent.online_idle(3.0, 1, "p")
    agent.set_online_memory(3.5, 1, base_bytes=10 * GIB, dynamic_bytes=8 << 20)  # 4 of 4: grow
    agent.tick(4.0)
    return agent


def test_every_design_metric_is_exported_with_node_and_gpu() -> None:
    agent = _agent()
    registry = build_registry(lambda: agent)
    text = generate_latest(registry).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert not DESIGN_NAMES - names
    assert f"{HARVESTABLE_HISTOGRAM}_bucket" in names


def test_values_come_from_the_accounting() -> None:
    agent = _agent()
    r = build_registry(lambda: agent)
    g0 = {"node": "n1", "gpu": "0"}
    g1 = {"node": "n1", "gpu": "1"}
    assert r.get_sample_value("gleaner_gpu_online_busy_seconds_total", g0) == 1.0
    assert r.get_sample_value("gleaner_gpu_online_busy_seconds_total", g1) == 0.5
    assert r.get_sample_value("gleaner_preemptions_total", g0) == 1.0
    assert r.get_sample_value("gleaner_online_requests_total", g0) == 1.0
    pair = {"node": "n1", "gpu_a": "0", "gpu_b": "1"}
    assert r.get_sample_value("gleaner_gpu_pair_busy_overlap_seconds_total", pair) == 0.5
    assert r.get_sample_value("gleaner_gpu_pair_busy_union_seconds_total", pair) == 1.0
    # The lockstep job ran while both gates were open: from the first tick (1.0) until
    # GPU 0 turned busy (2.0); both reopen only at the tick at 4.0.
    job = {"node": "n1", "namespace": "team", "job": "llm"}
    assert r.get_sample_value("gleaner_offline_job_timeslice_seconds_total", job) == 1.0
    assert r.get_sample_value("gleaner_memory_reclaim_events_total", g1) == 1.0
    # The tick at 1.0 released one of the 4 initial handles; 4 used of 3 grows it to
    # max(2·3, ⌈4 / 0.9⌉) = 6 handles, 3 of them reclaimed from offline work.
    assert r.get_sample_value("gleaner_memory_reclaimed_bytes_total", g1) == 3 * (2 << 20)
    assert r.get_sample_value("gleaner_kv_blocks_invalidated_total", g1) == 3.0
    assert r.get_sample_value("gleaner_memory_reservation_headroom_bytes", g1) == 6 * (2 << 20)
    assert r.get_sample_value("gleaner_online_request_preemptions_bucket", {**g0, "le": "0.0"}) == 0
    assert r.get_sample_value("gleaner_online_request_preemptions_bucket", {**g0, "le": "1.0"}) == 1
    hist = r.get_sample_value(f"{HARVESTABLE_HISTOGRAM}_count", g0)
    assert hist == 4.0


def test_each_registry_is_its_own() -> None:
    a, b = _agent(), _agent()
    ra, rb = build_registry(lambda: a), build_registry(lambda: b)
    b.online_busy(5.0, 0, "x")
    b.tick(6.0)
    a.tick(6.0)
    busy = "gleaner_gpu_online_busy_seconds_total"
    assert ra.get_sample_value(busy, {"node": "n1", "gpu": "0"}) == 1.0
    assert rb.get_sample_value(busy, {"node": "n1", "gpu": "0"}) == 2.0
