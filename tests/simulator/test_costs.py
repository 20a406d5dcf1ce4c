"""The node-level cost model: each term is drawn as documented and moves the runs it should."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gleaner.simulator.costs import (
    PAGE_BYTES,
    CostMeter,
    CostModel,
    InflightConfig,
    LatencyDistribution,
    fit_latency,
    measured_costs,
    with_measured,
)
from gleaner.simulator.node import NodeScenario, RunSpec, run_node
from gleaner.simulator.scenario import load_scenario
from gleaner.simulator.sensitivity import TERMS, all_off, breakeven, sensitivity
from gleaner.simulator.workload import ArrivalConfig

RUNS = [
    RunSpec(name="online-only", compute="online-only", memory="none"),
    RunSpec(name="gleaner", compute="gleaner", memory="gleaner"),
    RunSpec(name="iteration", compute="iteration", memory="gleaner"),
]


def _scenario(costs: CostModel | None = None, duration_s: float = 120.0) -> NodeScenario:
    sc = NodeScenario(duration_s=duration_s, runs=list(RUNS))
    sc.online.arrival = ArrivalConfig(rate_per_s=0.5, cv=2.0)
    if costs is not None:
        sc.costs = costs
    return sc


@pytest.fixture(scope="module")
def default_runs() -> dict[str, Any]:
    runs: dict[str, Any] = run_node(_scenario(), seed=11)["runs"]
    return runs


def test_lognormal_latency_median_cap_and_off() -> None:
    rng = np.random.default_rng(0)
    d = LatencyDistribution(median_ms=0.2, sigma=0.5, max_ms=2.0)
    xs = np.array([d.draw(rng) for _ in range(4000)])
    assert np.median(xs) == pytest.approx(0.2e-3, rel=0.1)
    assert xs.max() <= 2.0e-3
    assert LatencyDistribution(median_ms=0.0).draw(rng) == 0.0
    assert d.scaled(10).median_ms == pytest.approx(2.0) and d.scaled(10).max_ms == 20.0


def test_inflight_kernel_preempted_or_drained() -> None:
    rng = np.random.default_rng(1)
    assert InflightConfig(mode="preempt", save_ms=0.05).draw(rng) == pytest.approx(5e-5)
    drain = InflightConfig(mode="drain", kernel_mean_ms=1.0, kernel_sigma=1.0)
    xs = np.array([drain.draw(rng) for _ in range(20000)])
    # Residual life of lognormal kernels: E[X^2] / (2 E[X]) = mean * e^(sigma^2) / 2.
    assert xs.mean() == pytest.approx(1e-3 * np.e / 2, rel=0.1)


def test_meter_charges_gate_only_terms_to_the_gate() -> None:
    costs = CostModel()
    gate = CostMeter(costs, np.random.default_rng(2), gate=True)
    other = CostMeter(costs, np.random.default_rng(2), gate=False)
    assert gate.resume() > other.resume() == pytest.approx(costs.resume_warmup_ms / 1000)
    assert gate.preempt() > costs.inflight.save_ms / 1000
    # 128 MiB reclaimed = 64 pages unmapped, released and mapped for online.
    want = 64 * (costs.vmm.unmap_us + costs.vmm.release_us + costs.vmm.map_us) / 1e6
    assert other.vmm(64 * PAGE_BYTES, 64 * PAGE_BYTES) == pytest.approx(want)
    assert other.pollution(0.01) == pytest.approx(costs.pollution_ms / 1000)


def test_all_terms_off_charges_nothing() -> None:
    runs = run_node(_scenario(all_off(CostModel())), seed=11)["runs"]
    for name in ("gleaner", "iteration"):
        assert runs[name]["online_cost_s"] == 0.0 and runs[name]["offline_cost_s"] == 0.0


def test_default_terms_cost_both_sides(default_runs: dict[str, Any]) -> None:
    g, it = default_runs["gleaner"], default_runs["iteration"]
    assert g["online_cost_s"] > 0 and g["offline_cost_s"] > 0
    # Iteration-level sharing resumes and pollutes at every iteration, the gate once per
    # busy period.
    assert it["online_cost_s"] > g["online_cost_s"]
    assert it["offline_cost_s"] > g["offline_cost_s"]
    assert default_runs["online-only"]["online_cost_s"] == 0.0


def test_a_slow_channel_disable_costs_gleaner_latency(default_runs: dict[str, Any]) -> None:
    base = CostModel()
    slow = base.model_copy(update={"disable": base.disable.scaled(100.0)})
    runs = run_node(_scenario(slow), seed=11)["runs"]
    g0, g1 = default_runs["gleaner"], runs["gleaner"]
    assert g1["online_cost_s"] > g0["online_cost_s"] + 0.01
    assert g1["ttft_s"]["mean"] > g0["ttft_s"]["mean"]
    # The iteration baseline does not use the channel gate.
    assert runs["iteration"]["ttft_s"]["mean"] == default_runs["iteration"]["ttft_s"]["mean"]


def test_vmm_time_is_charged(default_runs: dict[str, Any]) -> None:
    free = TERMS["VMM per 2 MiB page"](CostModel(), 0.0)
    runs = run_node(_scenario(free), seed=11)["runs"]
    if default_runs["gleaner"]["reclamations"] == 0:
        pytest.skip("no reclamation in this short run")
    assert runs["gleaner"]["offline_cost_s"] < default_runs["gleaner"]["offline_cost_s"]


def test_offline_share_of_the_idle_time_ideal_is_at_most_one(
    default_runs: dict[str, Any],
) -> None:
    for run in default_runs.values():
        assert 0.0 <= run["offline_of_ideal"] <= 1.0 + 1e-9


def test_sensitivity_has_a_row_per_term_and_level() -> None:
    rows = sensitivity(_scenario(duration_s=60.0), seed=5)
    assert [r["term"] for r in rows[:2]] == ["(none)", "(all)"]
    assert len(rows) == 2 + 2 * len(TERMS)
    assert rows[0]["online_cost_s"] == 0.0 and rows[1]["online_cost_s"] > 0.0


def test_breakeven_is_where_gleaner_reaches_iteration() -> None:
    be = breakeven(_scenario(duration_s=60.0), seed=5, limit_ms=50.0, steps=2)
    assert be["default_disable_median_ms"] == CostModel().disable.median_ms
    xs = [c["disable_median_ms"] for c in be["curve"]]
    assert xs == sorted(xs) and xs[0] == CostModel().disable.median_ms
    for metric in ("ttft", "tpot"):
        at = be[f"{metric}_ms"]
        goal = be[f"iteration_{metric}_increase"]
        if at is None:
            assert all(c[f"{metric}_increase"] < goal for c in be["curve"])
        else:
            hit = next(c for c in be["curve"] if c["disable_median_ms"] == at)
            assert hit[f"{metric}_increase"] >= goal


def test_measured_latencies_fit_the_cost_model_units() -> None:
    rng = np.random.default_rng(3)
    ns = rng.lognormal(np.log(0.3e6), 0.4, size=2000)  # median 0.3 ms, in ns
    d = fit_latency(ns.tolist())
    assert d.median_ms == pytest.approx(0.3, rel=0.05)
    assert d.sigma == pytest.approx(0.4, rel=0.1)
    assert d.max_ms == pytest.approx(ns.max() / 1e6)
    assert fit_latency([]).median_ms == 0.0


def test_a_hardware_results_file_replaces_the_guessed_latencies(tmp_path: Path) -> None:
    """The path a lent GPU takes: the hardware test writes its measured stop and resume
    latencies (ns) as ``simulator_costs``; pasted under a scenario's ``costs:`` (or merged
    with ``with_measured``) they are what the simulator charges. The measurement is fake."""
    rng = np.random.default_rng(5)
    stop_ns = rng.lognormal(np.log(4e6), 0.3, size=50).tolist()  # a slow GSP RPC: ~4 ms
    resume_ns = rng.lognormal(np.log(1e6), 0.3, size=50).tolist()
    results = tmp_path / "gpu_results.json"
    results.write_text(json.dumps({"driver": "fake", "simulator_costs": measured_costs(
        stop_ns, resume_ns)}))  # fmt: skip
    measured = json.loads(results.read_text())["simulator_costs"]
    scenario = tmp_path / "measured.yaml"
    scenario.write_text(yaml.safe_dump({"name": "measured", "node": {
        "duration_s": 120, "costs": measured}}))  # fmt: skip
    costs = load_scenario(str(scenario)).node.costs  # type: ignore[union-attr]
    assert costs.disable.median_ms == pytest.approx(4.0, rel=0.15)
    assert costs.enable.median_ms == pytest.approx(1.0, rel=0.15)
    assert costs.disable.max_ms == pytest.approx(max(stop_ns) / 1e6)
    assert with_measured(CostModel(), measured) == costs
    # Charged: Gleaner's online side pays the measured disable latency, not the guess.
    guessed = run_node(_scenario(), seed=11)["runs"]["gleaner"]
    paid = run_node(_scenario(costs), seed=11)["runs"]["gleaner"]
    preemptions = paid["preemptions_per_request"] * paid["requests"]
    extra = paid["online_cost_s"] - guessed["online_cost_s"]
    per_preemption = (costs.disable.median_ms - CostModel().disable.median_ms) / 1000
    assert preemptions > 0
    assert 0.5 * per_preemption < extra / preemptions < 2 * per_preemption
