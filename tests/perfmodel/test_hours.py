"""A node's time-of-day profile as NodeTrace ``status.hours`` and back; the forecast a
scheduler predicts from (``gleaner.perfmodel.hours``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.api import NodeTrace, NodeTraceSpec, NodeTraceStatus, ObjectMeta
from gleaner.api.nodetrace import MAX_HOUR_MEMORY_STATES, hour_memory_states
from gleaner.perfmodel.diurnal import HOURS, DiurnalProfile
from gleaner.perfmodel.hours import (
    capped_profile,
    node_forecast,
    profile_from_nodetrace,
    profile_from_status,
    profile_to_hours,
)
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.testing.fixtures import mean_idle

DAY0 = datetime(2026, 1, 5, tzinfo=UTC)
GPUS = [GpuSpec(i, uuid=f"GPU-{i}", product="H100", memory_gib=80.0) for i in range(2)]


def _hour(busy: float, hour: int = 0, free_gib: float = 40.0, gpus: int = 2) -> NodeSummary:
    """One hour of one node at a constant busy fraction (offline gets the rest)."""
    t = DAY0.timestamp() + hour * 3600 + np.arange(0, 3600, 60.0)
    b = np.full((t.size, gpus), busy)
    free = np.full((t.size, gpus), free_gib) + np.arange(gpus)[None, :]
    return NodeSummary.from_samples("n", GPUS[:gpus], t, b, free, 1.0 - b)


def _status(profile: DiurnalProfile, latest: NodeSummary) -> NodeTraceStatus:
    status = latest.to_nodetrace_status(now=DAY0)
    return status.model_copy(update={"hours": profile_to_hours(profile)})


@settings(max_examples=30)
@given(
    st.dictionaries(
        st.integers(0, HOURS - 1),
        st.lists(st.floats(0.0, 1.0), min_size=1, max_size=3),
        max_size=6,
    )
)
def test_hours_read_back_as_the_profile_written(days: dict[int, list[float]]) -> None:
    profile = DiurnalProfile("n")
    for hour, busy_by_day in days.items():
        for busy in busy_by_day:
            profile = profile.fold(hour, _hour(busy, hour))
    status = _status(profile, _hour(0.5))
    # Through the API server's JSON and back, as a reader gets it.
    stored = NodeTraceStatus.model_validate(json.loads(json.dumps(status.to_k8s())))
    back = profile_from_status("n", stored)
    assert [h.hour for h in stored.hours or ()] == sorted(days)
    for want, got in zip(capped_profile(profile).slots, back.slots, strict=True):
        assert (want is None) == (got is None)
        if want is not None and got is not None:
            assert got.equals(want, rtol=1e-6)


@pytest.mark.parametrize("gpus", [2, 16])
def test_each_hour_is_bounded_in_size(gpus: int) -> None:
    specs = [GpuSpec(i, uuid=f"GPU-{i}") for i in range(gpus)]
    bound = hour_memory_states(gpus)
    assert bound == (MAX_HOUR_MEMORY_STATES if gpus <= 8 else 64)
    profile = DiurnalProfile("n")
    rng = np.random.default_rng(3)
    for hour in range(HOURS):
        t = np.arange(0, 3600, 10.0) + hour * 3600
        summary = NodeSummary.from_samples(
            "n", specs, t, rng.random((t.size, gpus)), rng.random((t.size, gpus)) * 80,
            step_gib=0.01,
        )  # fmt: skip
        assert summary.memory.n_states > bound
        profile = profile.fold(hour, summary)
    hours = profile_to_hours(profile)
    assert len(hours) == HOURS
    for h in hours:
        assert h.memory is not None and len(h.memory.states) <= bound
        # Coarser, never optimistic: a capped sketch's step only grows.
        assert h.memory.step_gi_b >= 0.01


def test_hours_of_another_inventory_and_repeated_hours() -> None:
    profile = DiurnalProfile("n").fold(3, _hour(0.2, 3)).fold(4, _hour(0.4, 4))
    status = _status(profile, _hour(0.5))
    hours = list(status.hours or [])
    # The node lost a GPU since hour 3 was stored: that hour is left out.
    one_gpu = _hour(0.9, 3, gpus=1)
    (odd,) = profile_to_hours(DiurnalProfile("n").fold(3, one_gpu))
    # A later entry for the same hour replaces an earlier one.
    later = profile_to_hours(DiurnalProfile("n").fold(4, _hour(0.8, 4)))[0]
    status = status.model_copy(update={"hours": [odd, *hours[1:], later]})
    back = profile_from_status("n", status)
    assert back.slots[3] is None
    slot4 = back.slots[4]
    assert slot4 is not None and mean_idle(slot4) == pytest.approx(0.2)


def test_a_trace_without_hours_has_no_profile() -> None:
    trace = NodeTrace(
        metadata=ObjectMeta(name="n"),
        spec=NodeTraceSpec(node_name="n"),
        status=_hour(0.5).to_nodetrace_status(now=DAY0),
    )
    assert profile_from_nodetrace(trace) is None
    assert profile_from_nodetrace(trace.to_k8s()) is None
    with_hours = trace.model_copy(
        update={"status": _status(DiurnalProfile("n").fold(7, _hour(0.1, 7)), _hour(0.5))}
    )
    profile = profile_from_nodetrace(with_hours.to_k8s())
    assert profile is not None and profile.hours_known == 1


def test_the_forecast_follows_the_hour_and_keeps_the_report() -> None:
    # Busy mornings (6-8), idle evenings (18-20); the latest report is half busy.
    profile = DiurnalProfile("n")
    for hour in range(HOURS):
        profile = profile.fold(hour, _hour(0.9 if 6 <= hour < 9 else 0.1, hour))
    latest = NodeSummary.from_samples(
        "n", GPUS, np.arange(0, 3600, 60.0), np.full((60, 2), 0.5), np.full((60, 2), 40.0),
        np.full((60, 2), 0.5), labels={"zone": "a"},
    )  # fmt: skip
    morning = node_forecast(latest, profile, DAY0 + timedelta(hours=6), 2 * 3600)
    evening = node_forecast(latest, profile, DAY0 + timedelta(hours=18), 2 * 3600)
    # 3/4 the hours ahead, 1/4 the latest window.
    assert mean_idle(morning) == pytest.approx(0.75 * 0.1 + 0.25 * 0.5)
    assert mean_idle(evening) == pytest.approx(0.75 * 0.9 + 0.25 * 0.5)
    for f in (morning, evening):
        assert f.labels == {"zone": "a"}
        assert f.gpus == latest.gpus
        assert f.last_report_time == latest.last_report_time
        assert f.window_end == latest.window_end
    # Hours of another inventory cannot serve this report: it is used as it is.
    other = DiurnalProfile("n").fold(6, _hour(0.9, 6, gpus=1))
    assert node_forecast(latest, other, DAY0 + timedelta(hours=6), 3600) is latest
