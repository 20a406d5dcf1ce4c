"""``scenario_gate``: the gate efficiency a caller that runs the cluster level alone
(``python -m bench sla``) gets is the one ``gleaner simulate`` feeds its cluster level, so
the benchmark's figures are the CLI's own."""

from __future__ import annotations

from gleaner.simulator.online import REFERENCE_BUSY
from gleaner.simulator.runner import (
    DEFAULT_GATE_EFFICIENCY,
    measured_gate,
    run_scenario,
    scenario_gate,
)
from gleaner.simulator.scenario import load_scenario, quick


def test_the_gleaner_node_run_alone_gives_the_cluster_levels_gate() -> None:
    scenario = quick(load_scenario("default"))
    out = run_scenario(scenario, seed=3)
    assert out.cluster_raw is not None
    gate = out.cluster_raw["gate"]
    eta, reference_busy = scenario_gate(scenario, 3)
    assert (eta, reference_busy) == (gate.at_reference, gate.reference_busy)
    # Measured, not the fallback: the node level's own run at this seed.
    assert (eta, reference_busy) != (DEFAULT_GATE_EFFICIENCY, REFERENCE_BUSY)
    assert (eta, reference_busy) == measured_gate(out.results["node"])


def test_without_a_node_level_or_its_gleaner_run_the_defaults() -> None:
    scenario = quick(load_scenario("default"))
    assert scenario.node is not None
    no_node = scenario.model_copy(update={"node": None})
    assert scenario_gate(no_node, 1) == (DEFAULT_GATE_EFFICIENCY, REFERENCE_BUSY)
    others = scenario.node.model_copy(
        update={"runs": [r for r in scenario.node.runs if r.name != "gleaner"]}
    )
    assert scenario_gate(scenario.model_copy(update={"node": others}), 1) == (
        DEFAULT_GATE_EFFICIENCY,
        REFERENCE_BUSY,
    )
    assert measured_gate({"runs": {}}) is None
    busy = {"gleaner": {"online_busy_fraction": 1.0, "offline_run_fraction": 0.0}}
    assert measured_gate({"runs": busy}) is None
