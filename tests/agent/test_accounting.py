"""Accounting: integrals, windows across missed reports, and the NodeTrace status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.agent.policy import Accounting, to_nodetrace_status, window_between
from gleaner.agent.policy.accounting import GIB, cap_states, harvestable_quantile
from gleaner.api import GpuInfo, NodeTraceStatus

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _inventory(n: int) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"GPU-{i}", memory_gi_b=80) for i in range(n)]


def test_integrals_pairs_and_jobs() -> None:
    a = Accounting([0, 1], start=0.0, memory_step_gib=1.0)
    a.set_offline_jobs(0.0, {"ns/j": [0, 1]})
    a.set_offline_enabled(0.0, 0, True)
    a.set_offline_enabled(0.0, 1, True)
    a.set_harvestable(0.0, 0, 10 * GIB)
    a.set_harvestable(0.0, 1, 20 * GIB)
    a.set_online_busy(1.0, 0, 1)
    a.set_offline_enabled(1.0, 0, False)
    a.set_online_busy(2.0, 1, 1)
    a.set_online_busy(3.0, 0, 0)
    a.set_offline_enabled(3.0, 0, True)
    a.set_harvestable(3.0, 1, 5 * GIB + GIB // 2)
    s = a.snapshot(4.0)
    assert s.gpus[0].online_busy_s == pytest.approx(2.0)
    assert s.gpus[0].offline_enabled_s == pytest.approx(2.0)
    assert s.gpus[1].online_busy_s == pytest.approx(2.0)
    assert s.pairs[(0, 1)].overlap_s == pytest.approx(1.0)
    assert s.pairs[(0, 1)].union_s == pytest.approx(3.0)
    # The lockstep job ran only while both GPUs were enabled: [0,1) and [3,4).
    assert s.job_timeslice_s["ns/j"] == pytest.approx(2.0)
    assert s.memory_states == {(10, 20): 3.0, (10, 5): 1.0}
    assert s.gpus[1].harvestable_byte_s == pytest.approx(3 * 20 * GIB + 5.5 * GIB)


def test_fractional_busy_levels_follow_the_trace_rule() -> None:
    a = Accounting([0, 1])
    a.set_online_busy(0.0, 0, 0.5)
    a.set_online_busy(0.0, 1, 0.25)
    s = a.snapshot(2.0)
    assert s.pairs[(0, 1)].overlap_s == pytest.approx(0.5)
    assert s.pairs[(0, 1)].union_s == pytest.approx(1.0)
    with pytest.raises(ValueError):
        a.set_online_busy(3.0, 0, 1.5)
    with pytest.raises(KeyError):
        a.set_online_busy(3.0, 7, 1)


def test_window_after_missed_reports_covers_the_gap() -> None:
    a = Accounting([0])
    a.set_offline_enabled(0.0, 0, 1)
    first = a.snapshot(15.0)
    a.add_preemption(0)
    a.add_online_request(0, 1)
    a.add_online_request(0, 0)
    a.add_reclamation(0, 4 << 20, 3)
    # Reports at 30 s and 45 s failed; the report at 60 s covers 15..60.
    w = window_between(first, a.snapshot(60.0))
    assert w.seconds == pytest.approx(45.0)
    assert w.gpus[0].offline_enabled_s == pytest.approx(45.0)
    assert w.gpus[0].preemptions == 1
    assert w.gpus[0].online_requests == 2
    assert w.gpus[0].request_preemptions == {1: 1, 0: 1}
    assert w.gpus[0].max_preemptions_per_request == 1
    assert w.gpus[0].reclaimed_bytes == 4 << 20
    assert w.gpus[0].kv_blocks_invalidated == 3
    with pytest.raises(ValueError):
        window_between(a.snapshot(), first)


def test_nodetrace_status_round_trips_through_the_api_model() -> None:
    a = Accounting([0, 1], memory_step_gib=0.5)
    a.set_harvestable(0.0, 0, 8 * GIB)
    a.set_harvestable(0.0, 1, 30 * GIB)
    a.set_offline_enabled(0.0, 0, 1)
    a.set_online_busy(0.0, 1, 1)
    a.set_offline_jobs(0.0, {"team/llm": [0]})
    w = window_between(None, a.snapshot(10.0))
    status = to_nodetrace_status(
        w,
        inventory=_inventory(2),
        wall_start=T0,
        wall_end=T0 + timedelta(seconds=10),
        offline_jobs={0: "team/llm"},
        agent_version="0.1.0",
    )
    wire = status.to_k8s()
    back = NodeTraceStatus.model_validate(wire)
    assert back.per_gpu[0].offline_job == "team/llm"
    assert back.per_gpu[0].offline_enabled_seconds == pytest.approx(10.0)
    assert back.per_gpu[1].online_busy_seconds == pytest.approx(10.0)
    assert back.pairs[0].union_seconds == pytest.approx(10.0)
    assert back.memory is not None
    assert [s.free_gi_b for s in back.memory.states] == [[8.0, 30.0]]
    assert back.idle_fraction == pytest.approx(0.5)
    assert back.harvestable_memory_p10_gi_b == 8.0
    assert back.offline_jobs == 1
    assert back.window is not None and back.window.seconds == pytest.approx(10.0)


def test_cap_states_doubles_the_step() -> None:
    states: dict[tuple[int, ...], float] = {(i,): 1.0 for i in range(10)}
    capped, step = cap_states(states, 0.5, max_states=3)
    assert step == 2.0 and len(capped) == 3
    assert sum(capped.values()) == pytest.approx(10.0)


@settings(max_examples=100, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.floats(0.0, 5.0),
            st.integers(0, 2),
            st.floats(0.0, 1.0),
            st.integers(0, 100 * GIB),
        ),
        max_size=30,
    ),
    cut=st.floats(0.0, 1.0),
)
def test_property_windows_add_up_and_overlap_within_union(
    changes: list[tuple[float, int, float, int]], cut: float
) -> None:
    a = Accounting([0, 1, 2], memory_step_gib=1.0)
    t = 0.0
    end = sum(c[0] for c in changes) + 1.0
    mid_t = cut * end
    mid = None
    for dt, gpu, level, free in changes:
        if mid is None and t + dt >= mid_t:
            mid = a.snapshot(mid_t)
        t += dt
        a.set_online_busy(t, gpu, level)
        a.set_harvestable(t, gpu, free)
    if mid is None:
        mid = a.snapshot(mid_t)
    full = a.snapshot(end)
    w1, w2 = window_between(None, mid), window_between(mid, full)
    for g in (0, 1, 2):
        assert w1.gpus[g].online_busy_s + w2.gpus[g].online_busy_s == pytest.approx(
            full.gpus[g].online_busy_s, abs=1e-6
        )
    for key, p in full.pairs.items():
        assert p.overlap_s <= p.union_s + 1e-9
        assert w1.pairs[key].union_s + w2.pairs[key].union_s == pytest.approx(p.union_s, abs=1e-6)
    assert sum(full.memory_states.values()) == pytest.approx(end, abs=1e-6)
    q = harvestable_quantile(full, 0.1)
    assert q is not None and q >= 0
