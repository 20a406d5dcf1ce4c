"""Day of week in the time-of-day profile: weekend slots, used for a weekend hour once they
hold enough weekend days (``gleaner.perfmodel.diurnal``), written to and read from a
NodeHistory's ``status.weekendHours`` (``gleaner.perfmodel.hours``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gleaner.api import GpuInfo, NodeHistoryStatus
from gleaner.api.nodetrace import hour_memory_states
from gleaner.perfmodel.diurnal import (
    HOURS,
    MIN_WEEKEND_DAYS,
    DiurnalProfile,
    forecast,
    hour_busy,
    is_weekend,
    report_ratios,
)
from gleaner.perfmodel.hours import (
    capped_profile,
    node_forecast,
    profile_from_nodetrace,
    profile_from_status,
    profile_to_hours,
    profile_to_weekend_hours,
    weekend_memory_states,
)
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.testing.fixtures import mean_idle

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
GPUS = [GpuSpec(i, uuid=f"GPU-{i}", memory_gib=80.0) for i in range(2)]
INVENTORY = [GpuInfo(index=g.index, uuid=g.uuid, memory_gi_b=80.0) for g in GPUS]
WEEKDAY_BUSY, WEEKEND_BUSY = 0.8, 0.1


def _hour(start: datetime, busy: float, gpus: int = 2) -> NodeSummary:
    """One hour from ``start`` at a constant busy fraction (offline gets the rest)."""
    t = start.timestamp() + np.arange(0, 3600, 60.0)
    b = np.full((t.size, gpus), busy)
    free = np.full((t.size, gpus), 40.0) + np.arange(gpus)[None, :]
    return NodeSummary.from_samples("n", GPUS[:gpus], t, b, free, 1.0 - b)


def _pattern(days: int, split: bool = True) -> DiurnalProfile:
    """``days`` days from a Monday of busy weekdays and idle weekends, folded hour by hour
    as an agent does (``split``: with the day kind; without it, as agents before it)."""
    profile = DiurnalProfile("n")
    for hour_index in range(days * HOURS):
        start = MONDAY + timedelta(hours=hour_index)
        summary = _hour(start, WEEKEND_BUSY if is_weekend(start) else WEEKDAY_BUSY)
        profile = (
            profile.fold_at(start, summary)
            if split
            else profile.fold(start.hour, summary)  # the all-days slot only
        )
    return profile


def _history(profile: DiurnalProfile) -> NodeHistoryStatus:
    """``profile`` as its agent writes it, through the API server's JSON and back."""
    status = NodeHistoryStatus(
        gpus=INVENTORY,
        hours=profile_to_hours(profile),
        weekend_hours=profile_to_weekend_hours(profile),
    )
    return NodeHistoryStatus.model_validate(json.loads(json.dumps(status.to_k8s())))


def test_weekend_days_are_saturday_and_sunday_utc() -> None:
    friday, saturday = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 3, tzinfo=UTC)
    assert not is_weekend(friday + timedelta(hours=23, minutes=59))
    assert is_weekend(saturday)
    assert is_weekend(saturday + timedelta(days=1, hours=23, minutes=59))
    assert not is_weekend(MONDAY)
    assert [is_weekend(MONDAY + timedelta(days=d, hours=12)) for d in range(7)] == [
        False, False, False, False, False, True, True,
    ]  # fmt: skip


def test_a_weekend_hour_follows_the_weekends_after_two_weeks() -> None:
    # Two weeks of busy weekdays and idle weekends, then the next week up to Friday night:
    # the all-days hours are mostly the weekdays just seen.
    split, unsplit = _pattern(19), _pattern(19, split=False)
    saturday = MONDAY + timedelta(days=19, hours=10)
    assert is_weekend(saturday)
    latest = _hour(saturday - timedelta(hours=1), WEEKDAY_BUSY)  # Friday's level
    with_split = node_forecast(latest, split, saturday, 2 * 3600)
    # 3/4 the weekend hours ahead (idle 0.9), 1/4 the latest window (idle 0.2).
    assert mean_idle(with_split) == pytest.approx(0.75 * (1 - WEEKEND_BUSY) + 0.25 * 0.2)
    # Without the split (or with it disabled), the all-days hours: the weekdays' level.
    disabled = DiurnalProfile(
        "n", split.slots, weekend=split.weekend, weekend_days=split.weekend_days,
        weekend_min_days=None,
    )  # fmt: skip
    for profile in (unsplit, disabled):
        without = node_forecast(latest, profile, saturday, 2 * 3600)
        assert mean_idle(without) < 0.5 < mean_idle(with_split)
    # Weekdays are forecast from the all-days hours, as before the split.
    monday = saturday + timedelta(days=2)
    assert node_forecast(latest, split, monday, 2 * 3600).equals(
        node_forecast(latest, unsplit, monday, 2 * 3600)
    )


def test_a_weekend_slot_serves_only_from_the_second_weekend_day() -> None:
    assert MIN_WEEKEND_DAYS == 2
    # Monday to Saturday: one weekend day of each hour.
    profile = _pattern(6)
    assert profile.weekend_days == (1,) * HOURS
    sunday = MONDAY + timedelta(days=6, hours=3)
    assert profile.key_at(sunday) == sunday.hour
    # Through Sunday: two days, a weekend hour now reads its weekend slot.
    profile = _pattern(7)
    assert profile.weekend_days == (2,) * HOURS
    saturday = sunday + timedelta(days=6)
    assert profile.key_at(saturday) == HOURS + saturday.hour
    busy = hour_busy(profile, saturday.hour, weekend=True)
    assert busy is not None and busy == pytest.approx([WEEKEND_BUSY] * 2)
    # The spread learned from reports compares a weekend report with the weekend hour.
    report = _hour(saturday, WEEKEND_BUSY)
    assert report_ratios(profile, report) == pytest.approx([1.0, 1.0])


def test_a_horizon_over_friday_midnight_takes_each_day_kind() -> None:
    profile = _pattern(14)
    friday_night = MONDAY + timedelta(days=18, hours=23)
    # One Friday hour (all-days) and one Saturday hour (weekend), no recent level.
    latest = _hour(friday_night, 0.5)
    got = forecast(profile, latest, friday_night, 2 * 3600, recent_weight=0.0)
    friday_slot, saturday_slot = profile.slots[23], profile.weekend[0]
    assert friday_slot is not None and saturday_slot is not None
    want = (mean_idle(friday_slot) + mean_idle(saturday_slot)) / 2
    assert mean_idle(got) == pytest.approx(want)


def test_weekend_hours_read_back_with_their_days() -> None:
    profile = _pattern(14)
    stored = _history(profile)
    assert stored.weekend_hours is not None and len(stored.weekend_hours) == HOURS
    assert {h.days for h in stored.weekend_hours} == {4}
    assert all(h.days is None for h in stored.hours or ())
    back = profile_from_status("n", stored)
    assert back.weekend_days == profile.weekend_days
    for want, got in zip(capped_profile(profile).weekend, back.weekend, strict=True):
        assert want is not None and got is not None and got.equals(want, rtol=1e-6)
    # A NodeTrace as the operator joins it with its NodeHistory reads the same.
    joined = {
        "metadata": {"name": "n"},
        "spec": {"nodeName": "n"},
        "status": json.loads(json.dumps(stored.to_k8s())),
    }
    from_dict = profile_from_nodetrace(joined)
    assert from_dict is not None and from_dict.weekend_days == profile.weekend_days


def test_an_older_history_reads_and_forecasts_as_before() -> None:
    # What an agent before the split wrote: hours only, no weekendHours field at all.
    old = _pattern(14, split=False)
    raw = NodeHistoryStatus(gpus=INVENTORY, hours=profile_to_hours(old)).to_k8s()
    assert "weekendHours" not in raw
    back = profile_from_status("n", NodeHistoryStatus.model_validate(json.loads(json.dumps(raw))))
    assert back.weekend == (None,) * HOURS and back.weekend_days == (0,) * HOURS
    latest = _hour(MONDAY, 0.5)
    for start in (MONDAY + timedelta(days=19, hours=10), MONDAY + timedelta(days=21, hours=10)):
        assert node_forecast(latest, back, start, 2 * 3600).equals(
            node_forecast(latest, capped_profile(old), start, 2 * 3600)
        )


@pytest.mark.parametrize("gpus", [8, 16])
def test_weekend_hours_are_bounded_in_size(gpus: int) -> None:
    specs = [GpuSpec(i, uuid=f"GPU-{i}") for i in range(gpus)]
    bound = weekend_memory_states(gpus)
    assert bound == hour_memory_states(gpus) // 2
    profile = DiurnalProfile("n")
    rng = np.random.default_rng(5)
    saturday = MONDAY + timedelta(days=5)
    for hour in range(2 * HOURS):
        t = saturday.timestamp() + hour * 3600 + np.arange(0, 3600, 10.0)
        summary = NodeSummary.from_samples(
            "n", specs, t, rng.random((t.size, gpus)), rng.random((t.size, gpus)) * 80,
            step_gib=0.01,
        )  # fmt: skip
        profile = profile.fold_at(saturday + timedelta(hours=hour), summary)
    weekend = profile_to_weekend_hours(profile)
    assert weekend is not None and len(weekend) == HOURS
    for h in weekend:
        assert h.memory is not None and len(h.memory.states) <= bound
        assert h.memory.step_gi_b >= 0.01
    inventory = [GpuInfo(index=i, uuid=f"GPU-{i}", memory_gi_b=80.0) for i in range(gpus)]
    status = NodeHistoryStatus(
        gpus=inventory, hours=profile_to_hours(profile), weekend_hours=weekend
    )
    size = len(json.dumps(status.to_k8s(), separators=(",", ":")))
    # The documented bound (docs/api.md, "NodeHistory"): under 1 MB, Kubernetes' 1.5 MiB.
    assert size < 1_000_000
