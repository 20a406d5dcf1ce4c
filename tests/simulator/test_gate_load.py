"""The cluster's ground truth: a gate efficiency that falls with load, as node-level runs
measure it, kept apart from what the predictor sees (the agents' past reports)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.simulator.cluster import run_cluster
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.node import run_node
from gleaner.simulator.online import (
    GATE_EFFICIENCY_BY_BUSY,
    REFERENCE_BUSY,
    GateEfficiency,
    generate_online,
    node_summary,
)
from gleaner.simulator.scenario import load_scenario

busy = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(st.floats(min_value=0.5, max_value=1.0), st.floats(min_value=0.1, max_value=0.9))
def test_the_curve_passes_through_the_measured_point(eta: float, ref: float) -> None:
    gate = GateEfficiency(eta, ref)
    assert float(gate.at(ref)) == pytest.approx(min(1.0, eta))


@given(busy, busy)
def test_eta_falls_with_load_and_never_exceeds_one(a: float, b: float) -> None:
    gate = GateEfficiency(0.96)
    lo, hi = sorted((a, b))
    assert float(gate.at(hi)) <= float(gate.at(lo)) + 1e-12
    assert 0.0 < float(gate.at(hi)) <= 1.0


def test_without_load_dependence_eta_is_constant() -> None:
    gate = GateEfficiency(0.9, by_load=False)
    assert np.all(gate.at(np.linspace(0, 1, 11)) == 0.9)
    with pytest.raises(ValueError):
        GateEfficiency(0.0)


@pytest.mark.parametrize("rate", [0.3, 1.5])
def test_the_curve_is_what_the_node_level_measures(rate: float) -> None:
    """A short node-level run at a light and a heavy load lands near the table's curve
    (which was measured with the default 1200 s runs)."""
    node = load_scenario("default").node
    assert node is not None
    arrival = node.online.arrival.model_copy(update={"rate_per_s": rate})
    cfg = node.model_copy(
        update={
            "online": node.online.model_copy(update={"arrival": arrival}),
            "duration_s": 300,
            "runs": [r for r in node.runs if r.name == "gleaner"],
        }
    )
    run = run_node(cfg, 7)["runs"]["gleaner"]
    b = run["online_busy_fraction"]
    measured = run["offline_run_fraction"] / (1.0 - b)
    ref_eta = dict(GATE_EFFICIENCY_BY_BUSY)[REFERENCE_BUSY]
    assert float(GateEfficiency(ref_eta).at(b)) == pytest.approx(measured, abs=0.05)


def test_reports_and_truth_use_the_same_gate() -> None:
    cfg = ClusterScenario(nodes=2, duration_h=2.0, history_h=1.0)
    online = generate_online(cfg, np.random.default_rng(1))
    gate = GateEfficiency(0.96)
    s = node_summary(online, 0, 0, 60, gate)
    b = online.busy[online.rows(0), :60]
    expected = ((1.0 - b) * gate.at(b)).sum(axis=1) * online.step_s
    assert s.offline_enabled_seconds is not None
    assert np.allclose(s.offline_enabled_seconds, expected)
    flat = node_summary(online, 0, 0, 60, 0.96)
    assert flat.offline_enabled_seconds is not None
    assert np.allclose(flat.offline_enabled_seconds, (1.0 - b).sum(axis=1) * online.step_s * 0.96)


def test_load_dependent_truth_harvests_less_at_peak_than_flat() -> None:
    """Busy GPUs lose more of their idle time with the load curve than with one η: the
    busiest tenth of GPU-steps is enabled for less than at the flat η."""
    cfg = ClusterScenario(nodes=2, duration_h=2.0, history_h=1.0)
    online = generate_online(cfg, np.random.default_rng(2))
    b = online.busy
    hot = b >= np.quantile(b, 0.9)
    gate = GateEfficiency(0.96)
    assert float(gate.enabled(b)[hot].sum()) < float(((1.0 - b) * 0.96)[hot].sum())


def test_a_cluster_run_reports_the_gate_it_used() -> None:
    cfg = ClusterScenario(nodes=2, duration_h=2.0, history_h=1.0, policies=["gleaner"])
    out = run_cluster(cfg, seed=3, gate_efficiency=0.95, reference_busy=0.4)
    assert out["gate"] == GateEfficiency(0.95, 0.4, by_load=True)
    assert out["gate_efficiency"] == 0.95
    flat = run_cluster(cfg.model_copy(update={"gate_by_load": False}), 3, 0.95)
    assert flat["gate"].by_load is False
