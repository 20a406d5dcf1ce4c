"""The pure builder: record in, exact snapshot numbers out."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from gleaner.dashboard.build import (
    DEFAULT_MONITOR,
    DashboardData,
    build_dashboard,
    current_point,
    eviction_id,
    memory_distribution,
    node_view,
    parse_sla_windows,
    predicted_steps,
    runner_ups,
    weighted_quantile,
    with_placements,
)
from gleaner.dashboard.model import (
    ClusterRecord,
    Factors,
    JobEviction,
    JobView,
    Point,
    RecordedReport,
)
from gleaner.perfmodel import GpuSpec, JobProfile, MemoryHistogram, NodeSummary
from gleaner.scheduler.measures import meets_sla

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def summary(
    name: str,
    enabled: list[float],
    free: list[list[float]],
    overlap: float = 1.0,
    window: float = 100.0,
    jobs: tuple[str | None, ...] = (),
) -> NodeSummary:
    """A node whose GPUs were offline-enabled for ``enabled`` of the window, with memory
    states ``free`` (one row per equally long state) and every pair overlapping ``overlap``."""
    g = len(enabled)
    busy = np.array([(1 - e) * window for e in enabled])
    union = np.full((g, g), window * 0.5)
    np.fill_diagonal(union, busy)
    ov = union * overlap
    np.fill_diagonal(ov, busy)
    states = np.array(free, dtype=float)
    return NodeSummary(
        node=name,
        gpus=tuple(GpuSpec(index=i, uuid=f"GPU-{name}-{i}") for i in range(g)),
        window_seconds=window,
        online_busy_seconds=busy,
        offline_enabled_seconds=np.array(enabled) * window,
        pair_overlap_seconds=ov,
        pair_union_seconds=union,
        memory=MemoryHistogram.from_states(states, [window / len(free)] * len(free), 1.0, g),
        offline_jobs=jobs,
    )


PROFILE = JobProfile(
    standalone_tokens_per_second=1000,
    required_memory_gib=40,
    curve_memory_gib=(10, 40),
    curve_tokens_per_second=(500, 1000),
)


def test_weighted_quantile_is_the_lower_quantile() -> None:
    assert weighted_quantile([10, 20, 30], [1, 1, 2], 0.25) == 10
    assert weighted_quantile([10, 20, 30], [1, 1, 2], 0.5) == 20
    assert weighted_quantile([10, 20, 30], [1, 1, 2], 0.51) == 30
    assert weighted_quantile([], [], 0.5) is None
    with pytest.raises(ValueError, match="quantile"):
        weighted_quantile([1], [1], 1.5)


def test_memory_distribution_quantiles_mean_histogram() -> None:
    d = memory_distribution([20.0, 40.0], [30.0, 10.0])
    assert d.p10 == 20 and d.p50 == 20 and d.p90 == 40
    assert d.mean == pytest.approx(25.0)
    assert [(p.t, p.v) for p in d.histogram] == [(20.0, 0.75), (40.0, 0.25)]
    assert memory_distribution([], []).p50 is None


def test_node_view_idle_overlap_and_jobs() -> None:
    s = summary("n", [0.8, 0.5], [[30, 60], [50, 20]], overlap=0.9, jobs=("ns/a", None))
    v = node_view(s)
    assert [g.idle_fraction for g in v.gpus] == [pytest.approx(0.8), pytest.approx(0.5)]
    assert v.idle_fraction == pytest.approx(0.65)
    assert v.overlap[0][1] == pytest.approx(0.9) and v.overlap[1][0] == pytest.approx(0.9)
    assert v.gpus[0].memory.min == 30 and v.gpus[0].memory.max == 50
    assert v.gpus[1].memory.mean == pytest.approx(40.0)
    assert v.offline_jobs == ["ns/a"] and v.gpus[0].offline_job == "ns/a"


def test_runner_ups_rank_feasible_first_and_explain() -> None:
    nodes = {
        "chosen": summary("chosen", [0.9], [[40]]),
        "good": summary("good", [0.8, 0.8], [[40, 40]]),
        "slow": summary("slow", [0.3], [[40]]),
        "full": summary("full", [0.9], [[40]]),
        "barred": summary("barred", [0.95], [[40]]),
    }
    out = runner_ups(
        PROFILE,
        0.5,
        1,
        nodes,
        occupied={"full": [0], "good": [0]},
        chosen=("chosen", 0.9),
        excluded=["barred"],
    )
    by_node = {r.node: r for r in out}
    assert "chosen" not in by_node
    assert [r.node for r in out][:2] == ["good", "slow"]
    good = by_node["good"]
    assert good.gpus == [1] and good.feasible
    assert good.factors is not None and good.factors.throughput_fraction == pytest.approx(0.8)
    assert "0.80 < 0.90 on chosen" in good.why and "compute 0.80" in good.why
    assert not by_node["slow"].feasible and "< SLA 0.50" in by_node["slow"].why
    # The scheduler's own wording (NodeExcluded, GPUFree), as in the operator's messages.
    assert by_node["full"].why == "no free GPU"
    assert by_node["barred"].why == "job missed its SLA there before"


def test_runner_ups_multi_gpu_prefers_admissible_sets() -> None:
    nodes = {"pair": summary("pair", [0.9, 0.9, 0.9], [[40, 40, 40]], overlap=0.5)}
    out = runner_ups(PROFILE, 0.3, 2, nodes, occupied={})
    assert len(out) == 1 and not out[0].feasible
    assert "admission" in out[0].why


def test_sla_windows_annotation_and_eviction_ids() -> None:
    raw = '{"node": "n", "gpus": [0], "placedAt": 1, "windows": [[10, 0.5], [20, 0.7]]}'
    assert parse_sla_windows(raw) == [Point(t=10, v=0.5), Point(t=20, v=0.7)]
    assert parse_sla_windows("not json") == [] and parse_sla_windows(None) == []
    assert eviction_id("batch", "job-sla-eviction-1") == "batch.job-sla-eviction-1"


def test_annotation_matches_the_operator_contract() -> None:
    """The dashboard reads what the operator writes: the SLA-window annotation's value and
    the eviction-report ConfigMap (names and formats of gleaner.api.contract)."""
    import json

    from gleaner.api.contract import EVICTION_REPORT_SELECTOR, REPORT_KEY, is_eviction_report
    from gleaner.dashboard.build import eviction_view
    from gleaner.operator.builders import build_eviction_report_configmap
    from gleaner.operator.slahistory import dump_history
    from gleaner.scheduler.monitor import SLAHistory

    history = SLAHistory(job="ns/j", sla=0.5, node="n", gpus=(0,), placed_at=1.0)
    history = history.observe(10.0, 0.5).observe(20.0, 0.7)
    assert parse_sla_windows(dump_history(history)) == [Point(t=10, v=0.5), Point(t=20, v=0.7)]

    report = {
        "job": "ns/j",
        "node": "n",
        "gpus": [0],
        "sla": 0.5,
        "predicted": {"compute": 1, "memory": 1, "multiGPU": 1, "throughputFraction": 0.9},
        "observed": {
            "mean": 0.4,
            "min": 0.3,
            "last": 0.4,
            "windows": 3,
            "windowsMissed": 3,
            "windowSeconds": 60,
        },
        "reason": "r",
        "time": "1970-01-01T00:00:30Z",
        "evictionCount": 1,
        "outcome": "requeued",
        "nextAttemptAfter": "1970-01-01T00:01:00Z",
    }
    cm = build_eviction_report_configmap("j", "ns", 1, report)
    label, _, value = EVICTION_REPORT_SELECTOR.partition("=")
    assert cm["metadata"]["labels"][label] == value and is_eviction_report(cm["metadata"]["labels"])
    recorded = RecordedReport(
        namespace="ns", config_map=cm["metadata"]["name"], report=json.loads(cm["data"][REPORT_KEY])
    )
    view = eviction_view(recorded)
    assert (view.config_map, view.job, view.node) == ("j-sla-eviction-1", "ns/j", "n")


def test_example_snapshot_numbers(data: DashboardData) -> None:
    s = data.snapshot
    assert s.warnings == []
    assert [n.name for n in s.nodes] == ["gpu-node-a", "gpu-node-b", "gpu-node-c"]
    assert s.summary.gpus == 14 and s.summary.gpus_with_offline_job == 4
    # harvested: idle of GPUs that hold a job (a0 .72, a2 .58, a3 .81, b0 .35) over 14 GPUs
    assert s.summary.harvested_utilization == pytest.approx((0.72 + 0.58 + 0.81 + 0.35) / 14)
    # throughput: observed fraction x GPUs of running jobs
    assert s.summary.offline_throughput == pytest.approx(0.64 + 0.44 * 2 + 0.19)
    assert s.summary.sla_attainment == pytest.approx(2 / 3)
    # The same verdicts by job size: the 1-GPU jobs meet one of two, the 2-GPU job its own.
    running = [j for j in s.jobs if j.phase == "Running" and j.meets_sla is not None]
    assert sorted((j.gpu_count, j.meets_sla) for j in running) == [(1, False), (1, True), (2, True)]
    assert s.summary.sla_attainment_by_gpus == {1: pytest.approx(0.5), 2: 1.0}
    assert s.summary.jobs_by_phase == {
        "Evicted": 1,
        "Failed": 1,
        "Pending": 1,
        "Running": 3,
        "Unschedulable": 1,
    }
    assert [e.id for e in s.evictions] == [
        "batch.translate-old-sla-eviction-1",
        "research.long-context-sla-eviction-1",
    ]
    old = s.job("batch", "translate-old")
    assert old is not None and old.evictions[0].report_id == "batch.translate-old-sla-eviction-1"
    translate = s.job("batch", "translate")
    assert translate is not None and translate.meets_sla is False and translate.observed == 0.19


def test_job_detail_runner_ups_use_configmap_profiles(data: DashboardData) -> None:
    pending = data.job_detail("research", "from-configmap")
    assert pending is not None and pending.runner_ups
    assert all(r.node for r in pending.runner_ups)
    # GPUs held by other jobs are not offered
    for r in pending.runner_ups:
        if r.node == "gpu-node-a":
            assert 0 not in r.gpus and 2 not in r.gpus and 3 not in r.gpus
    assert data.job_detail("nope", "nope") is None


def test_malformed_objects_become_warnings(record: ClusterRecord) -> None:
    record.node_traces.append({"metadata": {"name": "broken"}, "status": {"perGPU": "x"}})
    record.offline_jobs.append({"metadata": {"name": "bad", "namespace": "x"}, "spec": {}})
    record.eviction_reports.append(RecordedReport(namespace="x", config_map="r", report={}))
    s = build_dashboard(record).snapshot
    assert len(s.warnings) == 3
    assert any(w.startswith("NodeTrace broken") for w in s.warnings)
    assert any(w.startswith("OfflineJob x/bad") for w in s.warnings)
    assert any(w.startswith("eviction report x/r") for w in s.warnings)
    assert len(s.nodes) == 3


def test_jobs_that_do_not_validate_are_listed_as_invalid(record: ClusterRecord) -> None:
    before = len(build_dashboard(record).snapshot.jobs)
    record.offline_jobs.append(
        {
            "metadata": {"name": "bad", "namespace": "x"},
            "spec": {"gpus": 2, "throughputSLA": 1.5},
            "status": {"phase": "Invalid"},
        }
    )
    jobs = build_dashboard(record).snapshot.jobs
    assert len(jobs) == before + 1
    bad = next(j for j in jobs if j.key == "x/bad")
    assert bad.phase == "Invalid"
    assert bad.gpu_count == 2 and bad.sla == 1.5
    assert bad.message.startswith("invalid spec: ")
    assert "template" in bad.message  # the first field a user must fix
    assert bad.node is None and bad.predicted is None


def test_empty_record_gives_one_series_point() -> None:
    s = build_dashboard(ClusterRecord(generated_at=NOW, source="cluster")).snapshot
    assert s.nodes == [] and s.jobs == []
    assert [p.t for p in s.series.preemptions] == [NOW.timestamp()]
    assert current_point([], []).sla_attainment is None


def test_meets_sla_uses_the_monitors_tolerance() -> None:
    """As the operator's SLAMet: 0.5497 of a 0.55 SLA is within the 2 % tolerance (the
    dashboard judges with the shared rule and the monitor's default configuration)."""
    assert meets_sla(0.5497, 0.55, DEFAULT_MONITOR)
    assert meets_sla(0.55 * 0.98, 0.55, DEFAULT_MONITOR)
    assert not meets_sla(0.55 * 0.98 - 1e-6, 0.55, DEFAULT_MONITOR)


def _eviction(t: float, predicted: float) -> JobEviction:
    return JobEviction(
        time=datetime.fromtimestamp(t, tz=UTC),
        node="n",
        reason="r",
        sla=0.5,
        predicted_throughput_fraction=predicted,
        observed_throughput_fraction=0.1,
    )


def test_predicted_steps_follow_each_placement() -> None:
    obs = [Point(t=t, v=0.5) for t in (100.0, 200.0, 300.0, 400.0, 500.0)]
    now = Factors(compute=1, memory=1, multi_gpu=1, throughput_fraction=0.8)
    steps = predicted_steps(obs, [_eviction(250.0, 0.6)], now, placed_at=280.0)
    assert [(p.t, p.v) for p in steps] == [(100, 0.6), (250, 0.6), (280, 0.8), (500, 0.8)]
    # Evicted and not placed again: the placement in the status is the evicted one.
    steps = predicted_steps(obs[:2], [_eviction(250.0, 0.6)], now, placed_at=50.0)
    assert [(p.t, p.v) for p in steps] == []
    steps = predicted_steps(obs, [_eviction(250.0, 0.6)], now, placed_at=50.0)
    assert [(p.t, p.v) for p in steps] == [(100, 0.6), (250, 0.6)]
    assert predicted_steps([], [], now, None) == []


def test_placed_jobs_hold_their_gpus_even_before_the_agent_reports() -> None:
    node = node_view(summary("a", [0.5, 0.5, 0.5], [[10, 10, 10]], jobs=(None, None, "x/old")))
    job = JobView(
        namespace="x",
        name="j",
        key="x/j",
        phase="Running",
        node="a",
        gpus=[1],
        gpu_count=1,
        sla=0.3,
    )
    merged = with_placements(node, [job])
    assert [g.offline_job for g in merged.gpus] == [None, "x/j", "x/old"]
    assert merged.offline_jobs == ["x/j", "x/old"]
    assert with_placements(node, []) is node
