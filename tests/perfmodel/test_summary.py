"""Summaries: agreement with raw samples within the documented bound, merging, NodeTrace."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from gleaner.api import NodeTrace, NodeTraceStatus
from gleaner.perfmodel import (
    JobProfile,
    MemoryHistogram,
    NodeSummary,
    NodeTraceListSource,
    TraceFormatError,
    compute_factor,
    memory_factor,
    multi_gpu_factor,
    summarize_samples,
)

PROFILE = JobProfile(100.0, 12.0, (4.0, 12.0), (20.0, 100.0), 2.0)


def lipschitz(profile: JobProfile) -> float:
    """L of the P_memory integrand, per GiB (module docstring of gleaner.perfmodel.sketch)."""
    xs = np.array(profile.curve_memory_gib)
    ys = np.array(profile.curve_tokens_per_second)
    slope = float(np.max(np.diff(ys) / np.diff(xs)))
    return (slope + profile.memory_deficit_coefficient) / profile.max_tokens_per_second


def synthetic_frame(seed: int, n_t: int = 600, n_gpus: int = 4, node: str = "n1") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n_t, dtype=float) * 2.0 + 1_700_000_000.0
    shared = rng.random(n_t) < 0.4  # correlated online load across GPUs
    busy = np.where(rng.random((n_t, n_gpus)) < 0.9, shared[:, None], ~shared[:, None])
    free = np.clip(8 + 4 * np.sin(t[:, None] / 300 + np.arange(n_gpus)), 0, None)
    free = free + rng.uniform(-2, 2, (n_t, n_gpus))
    return pd.DataFrame(
        {
            "timestamp": np.repeat(t, n_gpus),
            "node": node,
            "gpu": np.tile(np.arange(n_gpus), n_t),
            "online_busy": busy.astype(float).ravel(),
            "free_memory_gib": np.clip(free, 0, None).ravel(),
        }
    )


def raw_factors(frame: pd.DataFrame, gpus: list[int]) -> tuple[float, float, float]:
    """The model straight from raw samples, no summary (the reference)."""
    wide_busy = frame.pivot(index="timestamp", columns="gpu", values="online_busy")[gpus]
    wide_free = frame.pivot(index="timestamp", columns="gpu", values="free_memory_gib")[gpus]
    compute = float((1 - wide_busy.mean()).min())
    m = wide_free.min(axis=1).to_numpy()
    mem = PROFILE.memory_factor_of(m, np.ones_like(m))
    multi = 1.0
    for a, b in itertools.combinations(gpus, 2):
        ov = np.minimum(wide_busy[a], wide_busy[b]).sum()
        un = np.maximum(wide_busy[a], wide_busy[b]).sum()
        multi = min(multi, float(ov / un) if un > 0 else 1.0)
    return compute, mem, multi


@pytest.mark.parametrize("max_states", [4096, 24])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summary_agrees_with_raw_samples_within_bound(seed: int, max_states: int) -> None:
    frame = synthetic_frame(seed)
    node = summarize_samples(frame, step_gib=0.25, max_states=max_states)["n1"]
    assert node.memory.n_states <= max_states
    bound = lipschitz(PROFILE) * node.memory.step_gib
    for gpus in ([0], [2], [0, 1], [1, 2, 3], [0, 1, 2, 3]):
        c, m, x = raw_factors(frame, gpus)
        assert compute_factor(node, gpus) == pytest.approx(c, abs=1e-12)
        assert multi_gpu_factor(node, gpus) == pytest.approx(x, abs=1e-12)
        got = memory_factor(PROFILE, node, gpus)
        assert abs(got - m) <= bound + 1e-12
        assert got <= m + 1e-12  # floor: never optimistic for a non-decreasing integrand


def test_merge_equals_summary_of_concatenation() -> None:
    frame = synthetic_frame(7, n_t=400)
    first = frame[frame["timestamp"] < frame["timestamp"].iloc[0] + 300]
    second = frame[frame["timestamp"] >= frame["timestamp"].iloc[0] + 300]
    for cap in (4096, 30):
        a = summarize_samples(first, max_states=cap)["n1"]
        b = summarize_samples(second, max_states=cap)["n1"]
        whole = summarize_samples(frame, max_states=cap)["n1"]
        merged = a.merge(b, max_states=cap)
        assert merged.equals(whole)
        assert b.merge(a, max_states=cap).equals(whole)
        assert merged.window_start == whole.window_start
        assert merged.window_end == whole.window_end


def test_sketch_cap_doubles_step_exactly() -> None:
    rng = np.random.default_rng(0)
    free = rng.uniform(0, 40, (1000, 2))
    capped = MemoryHistogram.from_samples(free, 1.0, step_gib=0.5, max_states=50)
    assert capped.n_states <= 50
    ratio = capped.step_gib / 0.5
    assert ratio == 2 ** round(np.log2(ratio)) and ratio > 1
    direct = MemoryHistogram.from_samples(free, 1.0, step_gib=capped.step_gib, max_states=10**6)
    assert capped.equals(direct)
    assert capped.total_seconds == pytest.approx(1000.0)


def test_sketch_quantile_and_marginal() -> None:
    sketch = MemoryHistogram.from_samples([[1.2, 5.0], [3.7, 5.0], [3.9, 0.2]], 1.0, 0.5)
    values, secs = sketch.marginal(0)
    assert values.tolist() == [1.0, 3.5] and secs.tolist() == [1.0, 2.0]
    # pooled values: 1.0, 3.5, 3.5, 5.0, 5.0, 0.0 -> p10 = 0.0, median = 3.5
    assert sketch.quantile(0.10) == 0.0
    assert sketch.quantile(0.5) == 3.5
    assert sorted(sketch.tightest([0, 1])[0].tolist()) == pytest.approx([0.0, 1.0, 3.5])


def test_nodetrace_round_trip_preserves_predictions() -> None:
    frame = synthetic_frame(4, n_t=300, n_gpus=3)
    frame["offline_enabled"] = 1.0 - frame["online_busy"] * 0.5
    node = summarize_samples(frame)["n1"]
    status = node.to_nodetrace_status(source="simulated", agent_version="test")
    assert status.idle_fraction == pytest.approx(
        float(np.mean([compute_factor(node, [g]) for g in range(3)]))
    )
    assert status.harvestable_memory_p10_gi_b == node.memory.quantile(0.1)
    assert len(status.pairs) == 3
    obj = NodeTrace(metadata={"name": "n1"}, status=status).to_k8s()
    # The wire form validates against the API model and comes back identical.
    assert NodeTraceStatus.model_validate(obj["status"]).to_k8s() == status.to_k8s()
    back = NodeTraceListSource([obj]).load()["n1"]
    assert back.equals(node)
    for gpus in ([0], [1, 2], [0, 1, 2]):
        assert memory_factor(PROFILE, back, gpus) == pytest.approx(
            memory_factor(PROFILE, node, gpus)
        )
        assert compute_factor(back, gpus) == pytest.approx(compute_factor(node, gpus))
        assert multi_gpu_factor(back, gpus) == pytest.approx(multi_gpu_factor(node, gpus))


def test_nodetrace_inventory_order_maps_memory_columns() -> None:
    obj = {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "NodeTrace",
        "metadata": {"name": "gpu-7"},
        "status": {
            "lastReportTime": datetime(2024, 1, 1, tzinfo=UTC).isoformat(),
            "gpus": [
                {"index": 1, "uuid": "GPU-b", "memoryGiB": 80},
                {"index": 0, "uuid": "GPU-a", "memoryGiB": 80},
            ],
            "window": {"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T00:01:40Z",
                       "seconds": 100},
            "perGPU": [
                {"index": 0, "offlineEnabledSeconds": 80, "onlineBusySeconds": 20},
                {"index": 1, "offlineEnabledSeconds": 40, "onlineBusySeconds": 60},
            ],
            "pairs": [{"gpuA": 0, "gpuB": 1, "overlapSeconds": 15, "unionSeconds": 65}],
            "memory": {"stepGiB": 1, "states": [
                {"freeGiB": [4, 12], "seconds": 50}, {"freeGiB": [12, 12], "seconds": 50}
            ]},
        },
    }  # fmt: skip
    node = NodeTraceListSource([obj]).load()["gpu-7"]
    assert node.gpu_indices == (0, 1)
    assert node.gpus[0].uuid == "GPU-a"
    assert compute_factor(node, [0]) == pytest.approx(0.8)
    assert compute_factor(node, [0, 1]) == pytest.approx(0.4)
    assert multi_gpu_factor(node, [0, 1]) == pytest.approx(15 / 65)
    # GPU 0 sees 12 then 12, GPU 1 sees 4 then 12 (inventory lists GPU 1 first).
    assert memory_factor(PROFILE, node, [0]) == pytest.approx(1.0)
    assert memory_factor(PROFILE, node, [1]) == pytest.approx((20 + 100 - 2 * 8) / 2 / 100)


def test_nodetrace_source_rejects_invalid_objects() -> None:
    with pytest.raises(TraceFormatError, match=r"NodeTrace #0: invalid at status"):
        NodeTraceListSource([{"metadata": {"name": "x"}, "status": {"gpus": "nope"}}]).load()


def test_misaligned_samples_are_refused() -> None:
    frame = synthetic_frame(0, n_t=5, n_gpus=2)
    with pytest.raises(TraceFormatError, match="GPU 1 has no sample at timestamp"):
        summarize_samples(frame.iloc[:-1])
    with pytest.raises(TraceFormatError, match="duplicate samples"):
        summarize_samples(pd.concat([frame, frame.iloc[:1]]))


def test_window_keeps_the_last_seconds() -> None:
    frame = synthetic_frame(0, n_t=100, n_gpus=1)  # 2 s period, 200 s
    node = summarize_samples(frame, window_seconds=50)["n1"]
    assert node.window_seconds == pytest.approx(50.0)


def test_merge_mixed_agent_and_no_agent() -> None:
    a = NodeSummary.from_samples("n", [0], [0, 1], [[1], [0]], [[8], [8]], [[0], [1]])
    b = NodeSummary.from_samples("n", [0], [2, 3], [[1], [1]], [[8], [8]])
    merged = a.merge(b)
    assert merged.offline_enabled_seconds is not None
    assert merged.offline_enabled_seconds.tolist() == [1.0]  # 1 (agent) + (2 - 2) estimate
    with pytest.raises(ValueError, match="inventories differ"):
        a.merge(NodeSummary.from_samples("n", [1], [0], [[0]], [[1]]))
