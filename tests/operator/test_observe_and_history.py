"""Observed throughput from NodeTraces and Prometheus vectors; the SLA history annotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gleaner.api.contract import ANNOTATION_SLA_WINDOWS
from gleaner.operator.observation import (
    fraction_from_vector,
    observe_from_nodetrace,
    timeslice_query,
    window_from_fraction,
)
from gleaner.operator.slahistory import dump_history, has_window, history_for, stored_windows
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import nodetrace_manifest

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_single_gpu_observed_is_enabled_fraction_times_predicted_memory() -> None:
    trace = nodetrace_manifest("n", gpus=2, offline_enabled=[0.4, 0.9], end=NOW)
    obs = observe_from_nodetrace(trace, [0], 0.5, NOW - timedelta(minutes=5))
    assert obs is not None
    assert obs.compute == pytest.approx(0.4)
    assert obs.multi_gpu == 1.0
    assert obs.throughput_fraction == pytest.approx(0.2)
    assert obs.end == NOW and obs.seconds == 60


def test_multi_gpu_takes_the_slowest_gpu_and_pair_overlap() -> None:
    trace = nodetrace_manifest("n", gpus=2, offline_enabled=[0.4, 0.9], overlap=0.5, end=NOW)
    obs = observe_from_nodetrace(trace, [0, 1], 1.0, NOW - timedelta(minutes=5))
    assert obs is not None
    assert obs.compute == pytest.approx(0.4)
    assert obs.multi_gpu == pytest.approx(0.5)
    assert obs.throughput_fraction == pytest.approx(0.2)


def test_windows_from_before_the_placement_or_missing_gpus_say_nothing() -> None:
    trace = nodetrace_manifest("n", gpus=2, end=NOW)
    assert observe_from_nodetrace(trace, [0], 1.0, NOW) is None
    assert observe_from_nodetrace(trace, [5], 1.0, NOW - timedelta(hours=1)) is None


def test_prometheus_vector_reduction() -> None:
    assert timeslice_query("ns", "j", 59.6) == (
        'rate(gleaner_offline_job_timeslice_seconds_total{namespace="ns",job="j"}[60s])'
    )
    result: list[dict[str, Any]] = [{"value": [0, "0.8"]}, {"value": [0, "0.3"]}, {"bad": 1}]
    assert fraction_from_vector(result, 0.5) == pytest.approx(0.15)
    assert fraction_from_vector([], 0.5) is None
    assert fraction_from_vector([{"value": [0, "7"]}], 1.0) == 1.0


def test_a_prometheus_fraction_is_a_window_ending_at_the_query_time() -> None:
    obs = window_from_fraction(0.15, 0.5, NOW, 120.0)
    assert (obs.end, obs.seconds, obs.throughput_fraction) == (NOW, 120.0, 0.15)
    assert obs.compute == pytest.approx(0.3) and obs.multi_gpu == 1.0
    assert window_from_fraction(0.0, 0.0, NOW, 60.0).compute == 0.0  # no memory predicted


PLACEMENT = make_placement("n1", [0, 1], decided_at=NOW)


def test_history_round_trips_through_the_annotation() -> None:
    h = history_for("ns/j", 0.5, PLACEMENT, None)
    assert h.windows == () and h.placed_at == NOW.timestamp() and h.predicted == 0.9
    h = h.observe(NOW.timestamp() + 60, 0.4).observe(NOW.timestamp() + 120, 0.2)
    back = history_for("ns/j", 0.5, PLACEMENT, dump_history(h))
    assert [(w.end, w.throughput_fraction) for w in back.windows] == [
        (NOW.timestamp() + 60, 0.4),
        (NOW.timestamp() + 120, 0.2),
    ]
    assert has_window(back, NOW.timestamp() + 120)
    assert not has_window(back, NOW.timestamp() + 180)


def test_history_of_another_placement_or_garbage_is_discarded() -> None:
    h = history_for("ns/j", 0.5, PLACEMENT, None).observe(NOW.timestamp() + 60, 0.4)
    moved = PLACEMENT.model_copy(update={"node": "n2"})
    assert history_for("ns/j", 0.5, moved, dump_history(h)).windows == ()
    assert history_for("ns/j", 0.5, PLACEMENT, "{not json").windows == ()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, None),
        ({"metadata": None}, None),
        ({"metadata": {"annotations": None}}, None),
        ({"metadata": {"annotations": {ANNOTATION_SLA_WINDOWS: 3}}}, None),
        ({"metadata": {"annotations": {"other": "x"}}}, None),
        ({"metadata": {"annotations": {ANNOTATION_SLA_WINDOWS: '{"v": 1}'}}}, '{"v": 1}'),
    ],
)
def test_the_stored_windows_are_read_as_a_string_or_nothing(
    body: dict[str, object], expected: str | None
) -> None:
    assert stored_windows(body) == expected
