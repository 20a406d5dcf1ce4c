"""Accounting: integrals, windows across missed reports, and the NodeTrace status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.api import GpuInfo, NodeTrace, NodeTraceStatus
from gleaner.api.units import GIB
from gleaner.perfmodel import (
    JobProfile,
    NodeSummary,
    compute_factor,
    compute_factors,
    memory_factor,
    multi_gpu_factor,
    summarize_samples,
)
from gleaner.runtime_agent.policy import Accounting, to_nodetrace_status, window_between
from gleaner.runtime_agent.policy.accounting import Totals
from gleaner.runtime_agent.reporting import ReportWindow

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _inventory(n: int) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"GPU-{i}", memory_gi_b=80) for i in range(n)]


def _states(totals: Totals) -> dict[tuple[int, ...], float]:
    """The memory sketch as {levels: seconds}."""
    m = totals.memory
    rows = zip(m.levels, m.seconds, strict=True)
    return {tuple(int(x) for x in row): float(s) for row, s in rows}


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
    assert _states(s) == {(10, 20): 3.0, (10, 5): 1.0}
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


def test_memory_states_are_capped_by_doubling_the_step() -> None:
    a = Accounting([0], memory_step_gib=0.5, max_memory_states=3)
    for i in range(10):
        a.set_harvestable(float(i), 0, i * GIB // 2)
    s = a.snapshot(10.0)
    # perfmodel's coarsening: levels 0..9 at 0.5 GiB become 0..2 at 2 GiB.
    assert s.memory_step_gib == 2.0 and s.memory.n_states == 3
    assert _states(s) == {(0,): 4.0, (1,): 4.0, (2,): 2.0}


@settings(max_examples=100)
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
    if mid.at > full.start + 1e-6:
        with pytest.raises(ValueError):
            window_between(None, full)  # the memory interval of ``mid`` would be missing
    for g in (0, 1, 2):
        assert w1.gpus[g].online_busy_s + w2.gpus[g].online_busy_s == pytest.approx(
            full.gpus[g].online_busy_s, abs=1e-6
        )
    for key, p in full.pairs.items():
        assert p.overlap_s <= p.union_s + 1e-9
        assert w1.pairs[key].union_s + w2.pairs[key].union_s == pytest.approx(p.union_s, abs=1e-6)
    # The memory sketch of the whole run is the merge of the two intervals.
    whole = window_between(None, full, [mid])
    assert whole.memory.total_seconds == pytest.approx(end, abs=1e-6)
    assert w2.memory.total_seconds == pytest.approx(end - mid_t, abs=1e-6)
    q = whole.memory.quantile(0.1)
    assert q is not None and q >= 0


def test_agent_nodetrace_round_trips_to_the_factors_of_the_raw_samples() -> None:
    """Agent-written NodeTrace → NodeSummary.from_nodetrace = summarize_samples of the same data."""
    rng = np.random.default_rng(7)
    n_t, n_gpus, period = 240, 3, 1.0
    shared = rng.random(n_t) < 0.4
    busy = np.where(rng.random((n_t, n_gpus)) < 0.85, shared[:, None], ~shared[:, None])
    busy = busy.astype(float)
    busy[::7, 1] = 0.5  # some fractional samples (the trace rule for overlap)
    enabled = np.where(busy > 0, 0.0, rng.choice([0.0, 1.0], (n_t, n_gpus), p=[0.2, 0.8]))
    # Free memory on a 1/64 GiB grid: exact in bytes, so both paths floor the same numbers.
    free = np.round(rng.uniform(2.0, 30.0, (n_t, n_gpus)) * 64) / 64
    free[n_t // 2 :, 2] = 9.5  # a level exactly on a step boundary
    a = Accounting(range(n_gpus), start=0.0, memory_step_gib=0.5)
    reports = ReportWindow(window_s=3600, node="n1")
    reports.add(T0, a.snapshot(0.0))
    for i in range(n_t):
        t = i * period
        for g in range(n_gpus):
            a.set_online_busy(t, g, busy[i, g])
            a.set_offline_enabled(t, g, enabled[i, g])
            a.set_harvestable(t, g, int(free[i, g] * GIB))
        if i and i % 60 == 0:  # a snapshot every minute, as the daemon takes them
            reports.add(T0 + timedelta(seconds=t), a.snapshot(t))
    end = n_t * period
    reports.add(T0 + timedelta(seconds=end), a.snapshot(end))
    status = reports.status(_inventory(n_gpus), {0: "ns/job"})
    assert status is not None
    wire = NodeTrace(metadata={"name": "n1"}, spec={"nodeName": "n1"}, status=status).to_k8s()
    agent = NodeSummary.from_nodetrace(wire)

    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(np.arange(n_t) * period, n_gpus),
            "node": "n1",
            "gpu": np.tile(np.arange(n_gpus), n_t),
            "online_busy": busy.ravel(),
            "free_memory_gib": free.ravel(),
            "offline_enabled": enabled.ravel(),
        }
    )
    raw = summarize_samples(frame, step_gib=0.5)["n1"]
    assert agent.equals(raw)
    assert agent.memory.equals(raw.memory)
    np.testing.assert_allclose(compute_factors(agent), compute_factors(raw))
    profile = JobProfile(100.0, 12.0, (4.0, 12.0), (20.0, 100.0), 2.0)
    for gpus in ([0], [1], [2], [0, 1], [1, 2], [0, 1, 2]):
        assert compute_factor(agent, gpus) == pytest.approx(compute_factor(raw, gpus))
        assert memory_factor(profile, agent, gpus) == pytest.approx(
            memory_factor(profile, raw, gpus)
        )
        assert multi_gpu_factor(agent, gpus) == pytest.approx(multi_gpu_factor(raw, gpus))
    assert status.idle_fraction == pytest.approx(float(compute_factors(raw).mean()))
    assert status.harvestable_memory_p10_gi_b == raw.memory.quantile(0.10)
    assert status.offline_jobs == 1 and status.per_gpu[0].offline_job == "ns/job"


class _EagerReference:
    """The accounting rule written the plain way: every level integrated at every change."""

    def __init__(self, gpus: list[int]) -> None:
        self.gpus = gpus
        self.now = 0.0
        self.busy = dict.fromkeys(gpus, 0.0)
        self.enabled = dict.fromkeys(gpus, 0.0)
        self.free = dict.fromkeys(gpus, 0)
        self.jobs: dict[str, tuple[int, ...]] = {}
        self.busy_s = dict.fromkeys(gpus, 0.0)
        self.enabled_s = dict.fromkeys(gpus, 0.0)
        self.byte_s = dict.fromkeys(gpus, 0.0)
        self.overlap = {(a, b): 0.0 for a in gpus for b in gpus if a < b}
        self.union = dict.fromkeys(self.overlap, 0.0)
        self.slices: dict[str, float] = {}

    def advance(self, t: float) -> None:
        dt = t - self.now
        if dt <= 0:
            return
        for g in self.gpus:
            self.busy_s[g] += self.busy[g] * dt
            self.enabled_s[g] += self.enabled[g] * dt
            self.byte_s[g] += self.free[g] * dt
        for a, b in self.overlap:
            self.overlap[(a, b)] += min(self.busy[a], self.busy[b]) * dt
            self.union[(a, b)] += max(self.busy[a], self.busy[b]) * dt
        for job, gs in self.jobs.items():
            level = min((self.enabled[g] for g in gs), default=0.0)
            self.slices[job] = self.slices.get(job, 0.0) + level * dt
        self.now = t


@settings(max_examples=150)
@given(
    events=st.lists(
        st.tuples(
            st.floats(0.0, 2.0),
            st.sampled_from(["busy", "enabled", "free", "jobs", "read"]),
            st.integers(0, 2),
            st.sampled_from([0.0, 1.0, 0.25, 0.5]),
        ),
        max_size=60,
    )
)
def test_property_lazy_integration_equals_integrating_every_level_at_every_change(
    events: list[tuple[float, str, int, float]],
) -> None:
    """Integrating only what a change feeds, and the rest when read, loses nothing."""
    gpus = [0, 1, 2]
    a, ref = Accounting(gpus, memory_step_gib=1.0), _EagerReference(gpus)
    t = 0.0
    for dt, kind, gpu, level in events:
        t += dt
        ref.advance(t)
        if kind == "busy":
            a.set_online_busy(t, gpu, level)
            ref.busy[gpu] = level
        elif kind == "enabled":
            a.set_offline_enabled(t, gpu, level)
            ref.enabled[gpu] = level
        elif kind == "free":
            a.set_harvestable(t, gpu, int(level * 8 * GIB))
            ref.free[gpu] = int(level * 8 * GIB)
        elif kind == "jobs":
            jobs = {"ns/a": [gpu], "ns/b": [g for g in gpus if g != gpu]}
            a.set_offline_jobs(t, jobs)
            ref.jobs = {j: tuple(gs) for j, gs in jobs.items()}
            for job in jobs:
                ref.slices.setdefault(job, 0.0)
        else:  # a read in the middle integrates everything; later changes go on from there
            a.advance(t)  # as the daemon does before a scrape or a report
            mid = a.totals
            assert mid.at == t
            assert mid.gpus[gpu].online_busy_s == pytest.approx(ref.busy_s[gpu], abs=1e-9)
    end = t + 1.0
    ref.advance(end)
    s = a.snapshot(end)
    assert s.at == end
    for g in gpus:
        assert s.gpus[g].online_busy_s == pytest.approx(ref.busy_s[g], abs=1e-9)
        assert s.gpus[g].offline_enabled_s == pytest.approx(ref.enabled_s[g], abs=1e-9)
        assert s.gpus[g].harvestable_byte_s == pytest.approx(ref.byte_s[g], rel=1e-12, abs=1e-3)
        assert sum(s.gpus[g].harvestable_bucket_s) == pytest.approx(end, abs=1e-9)
    for pair in ref.overlap:
        assert s.pairs[pair].overlap_s == pytest.approx(ref.overlap[pair], abs=1e-9)
        assert s.pairs[pair].union_s == pytest.approx(ref.union[pair], abs=1e-9)
    assert s.job_timeslice_s.keys() == ref.slices.keys()
    for job, secs in ref.slices.items():
        assert s.job_timeslice_s[job] == pytest.approx(secs, abs=1e-9)
    assert s.memory.total_seconds == pytest.approx(end, abs=1e-9)
