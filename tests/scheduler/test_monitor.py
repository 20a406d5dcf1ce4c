"""SLA monitor: grace, k-of-n hysteresis, tolerance, backoff, max evictions, reports."""

from __future__ import annotations

import json

import pytest

from gleaner.scheduler import (
    EvictionReport,
    PredictedFactors,
    SLAAction,
    SLAHistory,
    SLAMonitorConfig,
    backoff_seconds,
    build_eviction_report,
    decide_sla,
    next_attempt_after,
    plan_after_eviction,
)

CFG = SLAMonitorConfig(
    window_seconds=60,
    history_windows=5,
    violation_windows=3,
    grace_seconds=300,
    tolerance=0.0,
    backoff_base_seconds=30,
    backoff_max_seconds=600,
)


def _history(values: list[float], start: float = 1000.0, placed_at: float = 0.0) -> SLAHistory:
    h = SLAHistory("ns/j", sla=0.6, node="n1", gpus=(0, 1), placed_at=placed_at, predicted=0.7)
    for i, v in enumerate(values):
        h = h.observe(start + 60 * i, v)
    return h


def test_grace_period_keeps_whatever_is_observed() -> None:
    h = _history([0.0, 0.0, 0.0, 0.0], start=60.0)
    d = decide_sla(h, now=299.0, config=CFG)
    assert d.action is SLAAction.KEEP and d.in_grace
    assert "grace" in d.reason
    # After grace, windows that ended inside it still do not count.
    d = decide_sla(h, now=301.0, config=CFG)
    assert d.action is SLAAction.KEEP and d.considered == 0
    assert d.reason == "no observation since the grace period ended"


def test_k_of_n_hysteresis() -> None:
    # Two misses among the last five: keep.
    d = decide_sla(_history([0.7, 0.5, 0.7, 0.5, 0.7]), now=2000, config=CFG)
    assert d.action is SLAAction.KEEP and (d.considered, d.missed) == (5, 2)
    assert d.reason == "missed SLA in 2 of the last 5 windows (evict at 3/5)"
    # A third miss: evict.
    d = decide_sla(_history([0.7, 0.5, 0.7, 0.5, 0.5]), now=2000, config=CFG)
    assert d.evict and (d.considered, d.missed) == (5, 3)
    assert d.reason == (
        "missed SLA 0.60 in 3 of the last 5 windows (observed mean 0.58, last 0.50, predicted 0.70)"
    )
    # Old misses slide out of the last n windows.
    d = decide_sla(_history([0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 0.7, 0.7]), now=2000, config=CFG)
    assert d.action is SLAAction.KEEP and d.missed == 0


def test_one_bad_window_never_evicts_unless_k_is_one() -> None:
    h = _history([0.7, 0.7, 0.0])
    assert not decide_sla(h, 2000, CFG).evict
    one = SLAMonitorConfig(history_windows=1, violation_windows=1, grace_seconds=0)
    assert decide_sla(h, 2000, one).evict


def test_tolerance() -> None:
    cfg = SLAMonitorConfig(history_windows=3, violation_windows=3, grace_seconds=0, tolerance=0.05)
    assert not decide_sla(_history([0.58, 0.58, 0.58]), 2000, cfg).evict  # within 5% of 0.6
    assert decide_sla(_history([0.56, 0.56, 0.56]), 2000, cfg).evict


def test_history_is_bounded_and_sorted() -> None:
    h = SLAHistory("ns/j", 0.5, "n", (0,), 0.0, max_windows=3)
    for t in (5.0, 1.0, 4.0, 2.0, 3.0):
        h = h.observe(t, t / 10)
    assert [w.end for w in h.windows] == [3.0, 4.0, 5.0]


def test_exponential_backoff_capped() -> None:
    assert [backoff_seconds(e, CFG) for e in range(0, 7)] == [0, 30, 60, 120, 240, 480, 600]
    assert backoff_seconds(10_000, CFG) == 600
    assert next_attempt_after(3, now=1000.0, config=CFG) == 1120.0


def test_requeue_away_from_the_node_then_give_up() -> None:
    plan = plan_after_eviction("n1", 0, 3, ["n0"], now=100.0, config=CFG)
    assert not plan.failed and plan.eviction_count == 1
    assert plan.excluded_nodes == ("n0", "n1")
    assert plan.next_attempt_after == 130.0
    plan = plan_after_eviction("n2", 1, 3, plan.excluded_nodes, now=200.0, config=CFG)
    assert not plan.failed and plan.next_attempt_after == 260.0
    plan = plan_after_eviction("n3", 2, 3, plan.excluded_nodes, now=300.0, config=CFG)
    assert plan.failed and plan.next_attempt_after is None
    assert plan.message == "gave up after 3 SLA eviction(s) (maxEvictions 3)"
    assert plan_after_eviction("n1", 0, 0, [], 0.0, CFG).failed


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        SLAMonitorConfig(history_windows=3, violation_windows=4)
    with pytest.raises(ValueError):
        SLAMonitorConfig(tolerance=1.0)
    with pytest.raises(ValueError):
        SLAMonitorConfig(backoff_base_seconds=10, backoff_max_seconds=5)


def test_eviction_report_round_trip() -> None:
    h = _history([0.7, 0.5, 0.7, 0.5, 0.4])
    decision = decide_sla(h, 2000.0, CFG)
    plan = plan_after_eviction("n1", 0, 3, [], 2000.0, CFG)
    report = build_eviction_report(
        h,
        decision,
        plan,
        PredictedFactors(compute=0.8, memory=0.9, multi_gpu=0.97, throughput_fraction=0.7),
        now=2000.0,
        config=CFG,
        gpu_uuids=("GPU-a", "GPU-b"),
    )
    assert report.observed.windows == 5 and report.observed.windows_missed == 3
    assert report.observed.mean == pytest.approx(0.56)
    assert (report.observed.min, report.observed.last) == (0.4, 0.4)
    data = report.to_json()
    assert data["outcome"] == "requeued" and data["time"] == "1970-01-01T00:33:20Z"
    assert data["nextAttemptAfter"] == "1970-01-01T00:33:50Z"
    assert data["nextPlacement"] == ("requeued; not before 1970-01-01T00:33:50Z, not on n1")
    text = json.dumps(data)
    assert EvictionReport.from_json(text) == report
    assert EvictionReport.from_json(data) == report
    failed = plan_after_eviction("n1", 2, 3, [], 2000.0, CFG)
    gave_up = build_eviction_report(h, decision, failed, report.predicted, now=2000.0, config=CFG)
    assert gave_up.to_json()["outcome"] == "failed"
    assert EvictionReport.from_json(gave_up.to_json()).next_placement.startswith("none: gave up")


def test_malformed_report_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="malformed eviction report"):
        EvictionReport.from_json({"job": "x"})
    with pytest.raises(ValueError, match="JSON object"):
        EvictionReport.from_json("[1, 2]")
