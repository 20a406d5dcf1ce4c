"""The time-of-day forecast: hour slots, bounded folding, blending with the recent level."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.perfmodel.admission import load_scale
from gleaner.perfmodel.diurnal import (
    HOURS,
    DiurnalProfile,
    busy_ratios,
    forecast,
    horizon_hours,
    hour_busy,
    hour_of,
    report_ratios,
    scaled,
    worst_hours,
)
from gleaner.perfmodel.hours import node_admission
from gleaner.perfmodel.summary import NodeSummary

DAY0 = datetime(2026, 1, 5, tzinfo=UTC)


def _hour(busy: float, free_gib: float = 40.0, seconds: int = 3600, gpus: int = 2) -> NodeSummary:
    """One node's summary of ``seconds`` at a constant online busy fraction."""
    t = np.arange(0, seconds, 60.0)
    b = np.full((t.size, gpus), busy)
    free = np.full((t.size, gpus), free_gib)
    return NodeSummary.from_samples("n", list(range(gpus)), t, b, free, 1.0 - b)


def _idle(summary: NodeSummary) -> float:
    return float(summary.compute_fractions().mean())


def test_scaling_keeps_every_fraction_and_scales_the_weight() -> None:
    s = _hour(0.3)
    big = scaled(s, 4.0)
    assert big.window_seconds == 4 * s.window_seconds
    assert np.allclose(big.compute_fractions(), s.compute_fractions())
    assert big.memory.total_seconds == pytest.approx(4 * s.memory.total_seconds)
    # In a merge the scaled one weighs four times as much.
    merged = _hour(0.8).merge(big)
    assert _idle(merged) == pytest.approx((0.2 + 4 * 0.7) / 5)
    with pytest.raises(ValueError, match="positive"):
        scaled(s, 0.0)


def test_horizon_hours_splits_at_clock_hours() -> None:
    start = DAY0 + timedelta(hours=23, minutes=30)
    assert horizon_hours(start, 2 * 3600) == [(23, 1800.0), (0, 3600.0), (1, 1800.0)]
    assert hour_of(start) == 23
    assert sum(s for _, s in horizon_hours(DAY0, 30 * 3600)) == 30 * 3600


def test_folding_is_bounded_and_forgets_old_days() -> None:
    profile = DiurnalProfile("n", day_weight=0.5)
    for _ in range(50):  # fifty days of a busy hour 9
        profile = profile.fold(9, _hour(0.9))
    assert profile.hours_known == 1 and len(profile.slots) == HOURS
    slot = profile.slots[9]
    assert slot is not None
    # Weights 1 + 0.5 + 0.25 + ...: bounded by twice an hour, not fifty hours.
    assert slot.window_seconds < 2 * 3600 + 1
    # The workload changes: after a few days the new level dominates.
    for _ in range(5):
        profile = profile.fold(9, _hour(0.1))
    slot = profile.slots[9]
    assert slot is not None and _idle(slot) > 0.85


def test_forecast_uses_the_hours_ahead_not_the_trailing_ones() -> None:
    # Nights idle (busy 0.1), days busy (busy 0.8, 8:00-20:00).
    profile = DiurnalProfile("n")
    for _day in range(3):
        for h in range(HOURS):
            profile = profile.fold(h, _hour(0.8 if 8 <= h < 20 else 0.1))
    # At 7:00 the recent (night) level is idle; the day ahead is not.
    recent = _hour(0.1)
    at = DAY0 + timedelta(days=3, hours=7)
    ahead = forecast(profile, recent, at, 4 * 3600, recent_weight=0.25)
    seasonal = (0.9 * 3600 + 0.2 * 3 * 3600) / (4 * 3600)
    assert _idle(ahead) == pytest.approx(0.75 * seasonal + 0.25 * 0.9)
    assert _idle(ahead) < _idle(recent) - 0.3
    # With no weight on the recent level the forecast is the hours ahead alone.
    only = forecast(profile, recent, at, 4 * 3600, recent_weight=0.0)
    assert _idle(only) == pytest.approx(seasonal)


def test_without_history_the_forecast_is_the_recent_summary() -> None:
    recent = _hour(0.4)
    assert forecast(DiurnalProfile("n"), recent, DAY0, 7200) is recent
    profile = DiurnalProfile("n").fold(3, _hour(0.9))
    # Hours without a slot are left out: only hour 3 of [2:00, 4:00) is known.
    out = forecast(profile, recent, DAY0 + timedelta(hours=2), 7200, recent_weight=0.5)
    assert _idle(out) == pytest.approx(0.5 * 0.1 + 0.5 * 0.6)


def test_profile_refuses_other_nodes_and_bad_hours() -> None:
    profile = DiurnalProfile("m")
    with pytest.raises(ValueError, match="cannot take"):
        profile.fold(1, _hour(0.5))
    with pytest.raises(ValueError, match=r"0\.\.23"):
        DiurnalProfile("n").fold(24, _hour(0.5))


@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=HOURS, max_size=HOURS),
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=HOURS - 1),
    st.floats(min_value=600.0, max_value=2 * 86400.0),
    st.floats(min_value=0.0, max_value=0.99),
)
def test_the_forecast_is_a_weighted_mean_within_its_inputs(
    busy_by_hour: list[float], recent_busy: float, hour: int, horizon: float, weight: float
) -> None:
    profile = DiurnalProfile("n")
    for h, b in enumerate(busy_by_hour):
        profile = profile.fold(h, _hour(b, seconds=600))
    recent = _hour(recent_busy, seconds=600)
    out = forecast(profile, recent, DAY0 + timedelta(hours=hour), horizon, weight)
    values = [1.0 - b for b in (*busy_by_hour, recent_busy)]
    assert min(values) - 1e-9 <= _idle(out) <= max(values) + 1e-9
    assert out.memory.n_gpus == recent.memory.n_gpus


def _day_night_profile() -> DiurnalProfile:
    """Nights idle (busy 0.1), days busy (busy 0.8, 8:00-20:00), three days of it."""
    profile = DiurnalProfile("n")
    for _day in range(3):
        for h in range(HOURS):
            profile = profile.fold(h, _hour(0.8 if 8 <= h < 20 else 0.1))
    return profile


def test_worst_hours_judges_each_gpu_by_its_busiest_hour_ahead() -> None:
    profile = _day_night_profile()
    recent = _hour(0.1)
    at = DAY0 + timedelta(days=3, hours=7)
    mean = forecast(profile, recent, at, 4 * 3600, recent_weight=0.25)
    worst = worst_hours(profile, recent, at, 4 * 3600, recent_weight=0.25)
    # The busiest hour ahead is a day hour, blended with the (night) recent level.
    assert _idle(worst) == pytest.approx(0.75 * 0.2 + 0.25 * 0.9)
    assert _idle(worst) < _idle(mean) - 0.1
    busy = worst.online_busy_seconds / worst.window_seconds
    assert np.allclose(busy, 0.75 * 0.8 + 0.25 * 0.1)
    # The same hours at night only: nothing worse than the night.
    night = worst_hours(profile, recent, DAY0 + timedelta(days=3, hours=1), 4 * 3600)
    assert _idle(night) == pytest.approx(0.9)


def test_worst_hours_scales_the_load_by_the_spread() -> None:
    profile = _day_night_profile()
    recent = _hour(0.1)
    at = DAY0 + timedelta(days=3, hours=7)
    worst = worst_hours(profile, recent, at, 4 * 3600, recent_weight=0.25, busy_scale=1.5)
    busy = 0.75 * 0.8 + 0.25 * 0.1
    idle = 0.75 * 0.2 + 0.25 * 0.9
    # The enabled share shrinks with the idle share the scaled load leaves.
    assert _idle(worst) == pytest.approx(idle * (1 - 1.5 * busy) / (1 - busy))
    # A load scaled past full leaves nothing.
    full = worst_hours(profile, recent, at, 4 * 3600, busy_scale=3.0)
    assert _idle(full) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="busy_scale"):
        worst_hours(profile, recent, at, 3600, busy_scale=0.9)


def test_worst_hours_without_history_is_the_recent_level() -> None:
    recent = _hour(0.4)
    out = worst_hours(DiurnalProfile("n"), recent, DAY0, 7200)
    assert _idle(out) == pytest.approx(_idle(recent))


def test_the_load_scale_is_the_spread_of_windows_above_the_forecast() -> None:
    # 95 windows as forecast, 5 at twice the forecast load.
    ratios = busy_ratios([0.2] * 100, [0.2] * 95 + [0.4] * 5)
    assert load_scale(ratios, 0.9) == pytest.approx(1.0)
    assert load_scale(ratios, 0.99) == pytest.approx(2.0)
    # Windows quieter than forecast never lower it below 1.
    assert load_scale(busy_ratios([0.5] * 30, [0.1] * 30), 0.99) == 1.0
    # Too few windows: no spread known.
    assert load_scale(ratios[:10], 0.99) == 1.0
    # An idle window counts as barely busy, not as a division by zero.
    assert busy_ratios([0.3], [0.0]) == [pytest.approx(300.0)]


def test_a_report_is_compared_with_the_forecast_for_the_hour_of_its_middle() -> None:
    profile = DiurnalProfile("n").fold(6, _hour(0.2)).fold(7, _hour(0.5))
    assert hour_busy(profile, 6) == pytest.approx([0.2, 0.2])
    assert hour_busy(profile, 8) is None
    report = replace(_hour(0.4, seconds=1800), window_end=DAY0 + timedelta(hours=7, minutes=10))
    # Its middle is 06:55: hour 6's 0.2 against the 0.4 observed, per GPU.
    assert report_ratios(profile, report) == pytest.approx([0.5, 0.5])
    later = replace(report, window_end=DAY0 + timedelta(hours=7, minutes=20))
    assert report_ratios(profile, later) == pytest.approx([1.25, 1.25])
    # No hour known, no window end, or another GPU count: nothing learned.
    assert report_ratios(profile, replace(report, window_end=DAY0 + timedelta(hours=9))) == []
    assert report_ratios(profile, replace(report, window_end=None)) == []
    three = replace(_hour(0.4, gpus=3), window_end=DAY0 + timedelta(hours=7))
    assert report_ratios(profile, three) == []


def test_node_admission_is_worst_hours_over_the_reports_forecast() -> None:
    profile = DiurnalProfile("n").fold(6, _hour(0.2)).fold(9, _hour(0.8))
    recent = replace(_hour(0.4), labels={"zone": "a"}, window_end=DAY0 + timedelta(hours=6))
    got = node_admission(recent, profile, DAY0 + timedelta(hours=6), 12 * 3600.0, busy_scale=1.2)
    want = worst_hours(profile, recent, DAY0 + timedelta(hours=6), 12 * 3600.0, busy_scale=1.2)
    assert got.online_busy_seconds == pytest.approx(want.online_busy_seconds)
    assert _idle(got) == pytest.approx(_idle(want))
    assert got.labels == {"zone": "a"} and got.window_end == recent.window_end
    # Hours of another inventory than the report's: the report unchanged.
    other = replace(_hour(0.4, gpus=3), node="n")
    assert node_admission(other, profile, DAY0, 12 * 3600.0) is other


def test_merging_many_hours_at_once_gives_what_merging_them_one_by_one_gives() -> None:
    from gleaner.perfmodel.diurnal import _merge_all, _merge_pairwise

    rng = np.random.default_rng(5)
    parts = []
    for h in range(12):
        t = np.arange(0, 3600, 60.0)
        b = rng.uniform(0, 1, (t.size, 2))
        free = rng.uniform(0, 70, (t.size, 2))
        parts.append(NodeSummary.from_samples("n", [0, 1], t + h * 3600, b, free, 1.0 - b))
    once, pairwise = _merge_all(parts), _merge_pairwise(parts)
    assert np.array_equal(once.memory.levels, pairwise.memory.levels)
    assert np.array_equal(once.memory.seconds, pairwise.memory.seconds)
    assert np.array_equal(once.online_busy_seconds, pairwise.online_busy_seconds)
    assert once.window_seconds == pairwise.window_seconds
    assert once.window_end == pairwise.window_end
