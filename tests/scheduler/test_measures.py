"""The shared measure definitions (gleaner.scheduler.measures)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.scheduler.measures import (
    harvested_utilization,
    job_fraction,
    meets_sla,
    offline_throughput,
    sla_attainment,
)
from gleaner.scheduler.monitor import SLAMonitorConfig, window_missed

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
