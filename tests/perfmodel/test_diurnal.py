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
    STACKS_KEPT,
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
from gleaner.testing.fixtures import mean_idle

DAY0 = datetime(2026, 1, 5, tzinfo=UTC)


def _hour(busy: float, free_gib: float = 40.0, seconds: int = 3600, gpus: int = 2) -> NodeSummary:
    """One node's summary of ``seconds`` at a constant online busy fraction."""
    t = np.arange(0, seconds, 60.0)
    b = np.full((t.size, gpus), busy)
    free = np.full((t.size, gpus), free_gib)
    return NodeSummary.from_samples("n", list(range(gpus)), t, b, free, 1.0 - b)


def test_scaling_keeps_every_fraction_and_scales_the_weight() -> None:
    s = _hour(0.3)
    big = scaled(s, 4.0)
    assert big.window_seconds == 4 * s.window_seconds
    assert np.allclose(big.compute_fractions(), s.compute_fractions())
    assert big.memory.total_seconds == pytest.approx(4 * s.memory.total_seconds)
    # In a merge the scaled one weighs four times as much.
    merged = _hour(0.8).merge(big)
    assert mean_idle(merged) == pytest.approx((0.2 + 4 * 0.7) / 5)
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
    assert slot is not None and mean_idle(slot) > 0.85


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
    assert mean_idle(ahead) == pytest.approx(0.75 * seasonal + 0.25 * 0.9)
    assert mean_idle(ahead) < mean_idle(recent) - 0.3
    # With no weight on the recent level the forecast is the hours ahead alone.
    only = forecast(profile, recent, at, 4 * 3600, recent_weight=0.0)
    assert mean_idle(only) == pytest.approx(seasonal)


def test_without_history_the_forecast_is_the_recent_summary() -> None:
    recent = _hour(0.4)
    assert forecast(DiurnalProfile("n"), recent, DAY0, 7200) is recent
    profile = DiurnalProfile("n").fold(3, _hour(0.9))
    # Hours without a slot are left out: only hour 3 of [2:00, 4:00) is known.
    out = forecast(profile, recent, DAY0 + timedelta(hours=2), 7200, recent_weight=0.5)
    assert mean_idle(out) == pytest.approx(0.5 * 0.1 + 0.5 * 0.6)


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
    assert min(values) - 1e-9 <= mean_idle(out) <= max(values) + 1e-9
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
    assert mean_idle(worst) == pytest.approx(0.75 * 0.2 + 0.25 * 0.9)
    assert mean_idle(worst) < mean_idle(mean) - 0.1
    busy = worst.online_busy_seconds / worst.window_seconds
    assert np.allclose(busy, 0.75 * 0.8 + 0.25 * 0.1)
    # The same hours at night only: nothing worse than the night.
    night = worst_hours(profile, recent, DAY0 + timedelta(days=3, hours=1), 4 * 3600)
    assert mean_idle(night) == pytest.approx(0.9)


def test_worst_hours_scales_the_load_by_the_spread() -> None:
    profile = _day_night_profile()
    recent = _hour(0.1)
    at = DAY0 + timedelta(days=3, hours=7)
    worst = worst_hours(profile, recent, at, 4 * 3600, recent_weight=0.25, busy_scale=1.5)
    busy = 0.75 * 0.8 + 0.25 * 0.1
    idle = 0.75 * 0.2 + 0.25 * 0.9
    # The enabled share shrinks with the idle share the scaled load leaves.
    assert mean_idle(worst) == pytest.approx(idle * (1 - 1.5 * busy) / (1 - busy))
    # A load scaled past full leaves nothing.
    full = worst_hours(profile, recent, at, 4 * 3600, busy_scale=3.0)
    assert mean_idle(full) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="busy_scale"):
        worst_hours(profile, recent, at, 3600, busy_scale=0.9)


def test_worst_hours_without_history_is_the_recent_level() -> None:
    recent = _hour(0.4)
    out = worst_hours(DiurnalProfile("n"), recent, DAY0, 7200)
    assert mean_idle(out) == pytest.approx(mean_idle(recent))


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
    assert mean_idle(got) == pytest.approx(mean_idle(want))
    assert got.labels == {"zone": "a"} and got.window_end == recent.window_end
    # Hours of another inventory than the report's: the report unchanged.
    other = replace(_hour(0.4, gpus=3), node="n")
    assert node_admission(other, profile, DAY0, 12 * 3600.0) is other


def _random_profile(seed: int, steps: tuple[float, ...] = (0.5,)) -> DiurnalProfile:
    """Two days of random hours on 3 GPUs; some hours missing, some without an agent (no
    enabled seconds), each hour's memory at one of ``steps``."""
    rng = np.random.default_rng(seed)
    profile = DiurnalProfile("n")
    for day in range(2):
        for h in range(HOURS):
            if rng.random() < 0.15:
                continue
            t = np.arange(0, 3600, 120.0) + (day * HOURS + h) * 3600
            b = rng.uniform(0, 1, (t.size, 3))
            free = rng.uniform(0, 70, (t.size, 3))
            enabled = None if rng.random() < 0.2 else 1.0 - b
            step = steps[int(rng.integers(len(steps)))]
            hour = NodeSummary.from_samples("n", [0, 1, 2], t, b, free, enabled, step_gib=step)
            profile = profile.fold(h, hour)
    return profile


def _one_by_one(profile: DiurnalProfile, start: datetime, horizon: float) -> NodeSummary:
    """The forecast's seasonal part by its definition: each hour's slot scaled to the
    seconds of the horizon it covers, merged one by one."""
    out: NodeSummary | None = None
    for hour, seconds in horizon_hours(start, horizon):
        slot = profile.slots[hour]
        if slot is None:
            continue
        part = scaled(slot, seconds / slot.window_seconds)
        out = part if out is None else out.merge(part)
    assert out is not None
    return out


def _same(a: NodeSummary, b: NodeSummary) -> bool:
    """The same floats, not only close ones."""

    def eq(x: np.ndarray | None, y: np.ndarray | None) -> bool:
        return (x is None and y is None) or (
            x is not None and y is not None and np.array_equal(x, y, equal_nan=True)
        )

    return (
        a.window_seconds == b.window_seconds
        and eq(a.online_busy_seconds, b.online_busy_seconds)
        and eq(a.offline_enabled_seconds, b.offline_enabled_seconds)
        and eq(a.pair_overlap_seconds, b.pair_overlap_seconds)
        and eq(a.pair_union_seconds, b.pair_union_seconds)
        and a.memory.step_gib == b.memory.step_gib
        and eq(a.memory.levels, b.memory.levels)
        and eq(a.memory.seconds, b.memory.seconds)
    )


STARTS = [
    DAY0 + timedelta(days=2, hours=7),  # on the hour
    DAY0 + timedelta(days=2, hours=7, minutes=17, seconds=3.25),
    DAY0 + timedelta(days=2, hours=22, minutes=59),  # over midnight
]


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("horizon", [1800.0, 12 * 3600.0, 30 * 3600.0])
def test_the_forecast_is_the_hours_merged_one_by_one(start: datetime, horizon: float) -> None:
    profile = _random_profile(3)
    recent = _hour(0.3, gpus=3)
    got = forecast(profile, recent, start, horizon, recent_weight=0.0)
    want = _one_by_one(profile, start, horizon)
    # The same floats: a forecast from kept hours decides what one from scratch decides.
    assert _same(got, want)
    assert got.last_report_time == recent.last_report_time
    # Hours of different memory steps merge at the coarsest (up to float rounding).
    mixed = _random_profile(4, steps=(0.5, 1.0, 2.0))
    got = forecast(mixed, recent, start, horizon, recent_weight=0.0)
    want = _one_by_one(mixed, start, horizon)
    assert got.equals(want, rtol=1e-12)


def test_kept_hour_stacks_give_what_fresh_ones_give() -> None:
    profile = _random_profile(5)
    recent = _hour(0.45, gpus=3)
    # One profile forecasting at every start of two days, against a fresh copy each time
    # (nothing kept): the kept stacks are never those of another start's hours.
    for minutes in range(0, 2 * 24 * 60, 37):
        at = DAY0 + timedelta(days=2, minutes=minutes)
        fresh = DiurnalProfile("n", profile.slots, profile.day_weight)
        for horizon in (2 * 3600.0, 12 * 3600.0):
            assert _same(
                forecast(profile, recent, at, horizon), forecast(fresh, recent, at, horizon)
            )
            kept = worst_hours(profile, recent, at, horizon, busy_scale=1.3)
            assert _same(kept, worst_hours(fresh, recent, at, horizon, busy_scale=1.3))
    assert 0 < len(profile._stacks) <= STACKS_KEPT
    # A folded hour is a new profile with nothing kept.
    assert profile.fold(3, _hour(0.9, gpus=3))._stacks == {}
