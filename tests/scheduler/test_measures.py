"""The shared measure definitions (gleaner.scheduler.measures)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.scheduler.lifecycle import sla_tick
from gleaner.scheduler.measures import (
    harvested_utilization,
    job_fraction,
    latest_window_met,
    meets_sla,
    offline_throughput,
    placement_met,
    sla_attainment,
)
from gleaner.scheduler.monitor import SLAHistory, SLAMonitorConfig, window_missed

CFG = SLAMonitorConfig(tolerance=0.1)


@given(st.floats(0, 1), st.floats(0.01, 1))
def test_meets_sla_is_the_monitors_rule(fraction: float, sla: float) -> None:
    assert meets_sla(fraction, sla, CFG) == (not window_missed(fraction, sla, CFG))


def test_meets_sla_boundary_uses_the_tolerance() -> None:
    assert meets_sla(0.45, 0.5, CFG)
    assert not meets_sla(0.449, 0.5, CFG)


def test_sla_attainment_is_the_fraction_of_job_windows_met() -> None:
    assert sla_attainment([True, False, True, True]) == pytest.approx(0.75)
    assert sla_attainment(iter([False])) == 0.0
    assert sla_attainment([]) is None


@given(st.lists(st.booleans(), min_size=1))
def test_sla_attainment_is_a_fraction(met: list[bool]) -> None:
    value = sla_attainment(met)
    assert value is not None and 0.0 <= value <= 1.0
    assert value == pytest.approx(met.count(True) / len(met))


def test_job_fraction_prefers_the_observation() -> None:
    assert job_fraction(0.3, 0.8) == 0.3
    assert job_fraction(None, 0.8) == 0.8
    assert job_fraction(0.0, 0.8) == 0.0  # an observed zero is still an observation
    assert job_fraction(None, None) is None


def test_offline_throughput_counts_gpus() -> None:
    assert offline_throughput([(0.5, 2), (0.25, 4)]) == pytest.approx(2.0)
    assert offline_throughput([]) == 0.0


def test_harvested_utilization_divides_by_all_gpus() -> None:
    assert harvested_utilization([0.8, 0.6], 8) == pytest.approx(1.4 / 8)
    assert harvested_utilization([], 8) == 0.0
    assert harvested_utilization([], 0) is None


# -- the newest SLA window's verdict: the monitor's windows and rule -----------------------

_WINDOWED = SLAMonitorConfig(window_seconds=60.0, grace_seconds=0.0)


@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=90),
    st.sampled_from([None, 60.0, 600.0, 1800.0]),
)
def test_the_newest_window_verdict_is_the_one_the_monitor_gave(
    fractions: list[float], sla_window: float | None
) -> None:
    """Whatever the samples, the verdict equals the SLAMet the monitor's ticks last set."""
    placed_at = 1000.0
    history = SLAHistory(
        job="ns/j",
        sla=0.5,
        node="n",
        gpus=(0,),
        placed_at=placed_at,
        max_windows=1000,
        sla_window_seconds=sla_window,
    )
    last_met: bool | None = None
    samples = []
    for i, fraction in enumerate(fractions):
        end = placed_at + 60.0 * (i + 1)
        samples.append((end, fraction))
        tick = sla_tick(history, (end, fraction), end, _WINDOWED)
        history = tick.history
        last_met = tick.met if tick.met is not None else last_met
    assert latest_window_met(history, _WINDOWED) == last_met
    assert placement_met(samples, 0.5, placed_at, sla_window, _WINDOWED) == last_met


def test_a_short_dip_inside_a_met_sla_window_is_not_a_miss() -> None:
    # 30 one-minute samples at 0.7, then one dip to 0.1: the 30-minute window met 0.5.
    samples = [(60.0 * (i + 1), 0.7) for i in range(30)]
    assert placement_met(samples, 0.5, 0.0, 1800.0, _WINDOWED) is True
    dip = [*samples, (60.0 * 31, 0.1)]
    assert placement_met(dip, 0.5, 0.0, 1800.0, _WINDOWED) is True  # the window is open
    # Judged sample by sample (no SLA window), the dip is a miss.
    assert placement_met(dip, 0.5, 0.0, None, _WINDOWED) is False
    # Before the first window closes there is no verdict; another placement's samples count not.
    assert placement_met(samples[:10], 0.5, 0.0, 1800.0, _WINDOWED) is None
    assert placement_met(samples, 0.5, 1e6, 1800.0, _WINDOWED) is None
