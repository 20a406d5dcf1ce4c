"""A node with hours is admitted by one bound: the operator's pass and the simulator's
``gleaner`` policy, given the same node history, load spread, bias observations and risk
target, judge a job by the same bias-corrected prediction (``gleaner.scheduler.risk``)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from gleaner.api import Placement
from gleaner.operator.bias import feed as operator_feed
from gleaner.operator.config import OperatorConfig
from gleaner.operator.traces import HourProfiles, summaries_from_nodetraces
from gleaner.perfmodel import JobProfile, NodeTraceListSource, predict
from gleaner.perfmodel.diurnal import DiurnalProfile, forecast
from gleaner.perfmodel.hours import profile_from_nodetrace, profile_to_hours
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.scheduler import BiasTable
from gleaner.scheduler.bias import feed as scheduler_feed
from gleaner.simulator.cluster import ForecastBase, admission_rule
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.testing.fixtures import make_placement
from gleaner.testing.kube import nodetrace_manifest

DAY = datetime(2026, 3, 2, tzinfo=UTC)
NOW = DAY + timedelta(hours=7, minutes=20)
PROFILE = JobProfile(
    standalone_tokens_per_second=1000.0,
    required_memory_gib=20.0,
    curve_memory_gib=(10.0, 20.0, 40.0),
    curve_tokens_per_second=(400.0, 900.0, 1000.0),
)


def _node_with_hours(node: str) -> dict[str, Any]:
    """A 2-GPU NodeTrace whose latest window ends at ``NOW``, with a day of hours whose
    load peaks in the afternoon."""
    obj = nodetrace_manifest(node, gpus=2, offline_enabled=0.8, end=NOW)
    gpus = [
        GpuSpec(g["index"], uuid=g["uuid"], memory_gib=g["memoryGiB"])
        for g in obj["status"]["gpus"]
    ]
    profile = DiurnalProfile(node)
    for hour in range(24):
        busy = 0.15 + 0.6 * max(0.0, np.sin(np.pi * (hour - 6) / 12))
        t = DAY.timestamp() + hour * 3600 + np.arange(0, 3600, 60.0)
        b = np.column_stack([np.full(t.size, busy), np.full(t.size, 0.8 * busy)])
        summary = NodeSummary.from_samples(node, gpus, t, b, np.full((t.size, 2), 50.0), 1 - b)
        profile = profile.fold(hour, summary)
    obj["status"]["hours"] = [h.to_k8s() for h in profile_to_hours(profile)]
    return obj


def _windows(seed: int) -> list[float]:
    """Observed fractions of 40 windows around a raw prediction of 0.6 (some below it)."""
    rng = np.random.default_rng(seed)
    return [float(x) for x in 0.6 * rng.lognormal(0.05, 0.2, size=40)]


def _placement() -> Placement:
    return make_placement("a", [0, 1], compute=0.75, memory=0.8, fraction=0.6, decided_at=DAY)


def _bounds(risk: float | None) -> tuple[float, float]:
    """(the operator's bound, the simulator's bound) of the job on the node's two GPUs."""
    obj = _node_with_hours("a")
    # The load spread both learned so far: windows busier than forecast by up to ~40%.
    learned = HourProfiles()
    learned.spread.add("a", [1.0 / r for r in np.linspace(0.9, 1.4, 30)])

    # The operator: its pass's node summaries (learning the latest report's window first),
    # its bias table from its configuration, fed by its SLA monitor's feed.
    config = OperatorConfig(risk_target=risk)
    op_summary = summaries_from_nodetraces([obj], NOW, learned, config.risk_target)["a"]
    op_bias = BiasTable(config.bias)
    for observed in _windows(1):
        operator_feed(op_bias, _placement(), "", observed)

    # The simulator: the same history (profile and latest report), the spread as learned,
    # its policy's rule and bias table, fed as its SLA monitor feeds it.
    scenario = ClusterScenario(risk_target=risk if risk is not None else 0.5)
    rule = admission_rule(scenario, "gleaner" if risk is not None else "no-risk")
    profile = profile_from_nodetrace(obj)
    assert profile is not None
    recent = NodeTraceListSource([obj]).load()["a"]
    horizon = scenario.forecast_horizon_h * 3600
    base = ForecastBase(
        NOW,
        [profile],
        [recent],
        {"a": forecast(profile, recent, NOW, horizon)},
        copy.deepcopy(learned.spread),
    )
    sim_summary = base.forecasts("worst-hours", rule).admit(horizon)["a"]
    sim_bias = BiasTable(rule.bias_config())
    for observed in _windows(1):
        scheduler_feed(sim_bias, _placement(), "", observed)

    def bound(summary: NodeSummary, bias: BiasTable) -> float:
        raw = predict(PROFILE, 0.3, summary, (0, 1)).throughput_fraction
        return bias.corrected("a", "", raw)

    return bound(op_summary, op_bias), bound(sim_summary, sim_bias)


@pytest.mark.parametrize("risk", [0.9, 0.75, None])
def test_the_operator_and_the_simulator_admit_a_node_with_hours_by_one_bound(
    risk: float | None,
) -> None:
    operator, simulator = _bounds(risk)
    assert simulator == pytest.approx(operator, rel=1e-9)
    assert 0.0 < operator < 1.0


def test_the_risk_target_moves_that_bound() -> None:
    """The spread and the residual quantile both bite: a stricter target, a lower bound."""
    strict, _ = _bounds(0.9)
    loose, _ = _bounds(0.75)
    mean, _ = _bounds(None)
    assert strict < loose < mean
