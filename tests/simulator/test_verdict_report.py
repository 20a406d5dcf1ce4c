"""The verdict in words and report.html: who wins, one colour per policy, readable log ticks."""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest

from gleaner.simulator.cluster_scenario import PolicyName
from gleaner.simulator.node import NodeScenario
from gleaner.simulator.report import KNOWN_COLORS, log_ticks, policy_colors, render_report
from gleaner.simulator.runner import run_scenario
from gleaner.simulator.scenario import Scenario
from gleaner.simulator.verdict import (
    CLUSTER_POLICY_TEXT,
    POLICY_TEXT,
    cluster_verdict,
    node_verdict,
    target_value,
)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    scenario = Scenario(name="t", seed=4, node=NodeScenario(duration_s=90.0))
    return run_scenario(scenario).results


def test_every_policy_has_its_own_colour() -> None:
    assert len(set(KNOWN_COLORS.values())) == len(KNOWN_COLORS)
    names = [*KNOWN_COLORS, "mine", "yours", "theirs"]
    colors = policy_colors(names)
    assert len(set(colors.values())) == len(names)
    assert colors["gleaner"] == KNOWN_COLORS["gleaner"]


def test_log_ticks_are_one_two_five() -> None:
    assert log_ticks(3.0, 120.0) == [5.0, 10.0, 20.0, 50.0, 100.0]
    assert log_ticks(0.2, 100.0) == [0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    many = log_ticks(0.01, 1e5)
    assert all(str(v).lstrip("0.").startswith("1") for v in many)


def test_target_values_carry_their_unit() -> None:
    assert target_value({"value": 0.0123, "unit": "%"}) == "+1.23%"
    assert target_value({"value": 0.994, "unit": "share"}) == "99.4%"
    assert target_value({"value": 3, "unit": "count"}) == "3"


def test_targets_are_about_gleaner_and_comparisons_are_labelled(
    results: dict[str, Any],
) -> None:
    kinds = {t["name"]: t["kind"] for t in results["targets"]}
    assert all(n.startswith("gleaner") for n, k in kinds.items() if k == "target")
    assert {k for k in kinds.values()} == {"target", "comparison"}
    assert all(t["unit"] in {"%", "share", "count"} for t in results["targets"])


def test_verdict_names_the_seed_and_a_winner_per_measure(results: dict[str, Any]) -> None:
    v = results["verdict"]
    assert v[0].startswith("Seed 4:")
    runs = results["node"]["runs"]
    best = min(
        (n for n in runs if n != "online-only"), key=lambda n: runs[n]["ttft_increase"]["mean"]
    )
    assert any(line.startswith(f"{best} has the smallest mean TTFT increase") for line in v) or any(
        "tie for the smallest mean TTFT increase" in line for line in v
    )
    assert any(line.startswith("Break-even (mean TTFT)") for line in v)
    assert any("Comparison with iteration-level sharing" in line for line in v)
    assert node_verdict(results["node"], 4) == v


def test_report_explains_and_colours_every_policy(results: dict[str, Any]) -> None:
    page = render_report(results)
    for name in results["node"]["runs"]:
        assert POLICY_TEXT[name].replace("'", "&#x27;") in page
    colours = policy_colors(list(results["node"]["runs"]))
    for name, colour in colours.items():
        # The legend swatch and the CDF trace of the policy use the same colour.
        assert f"background:{colour}'></span><b>{name}</b>" in page
        assert re.search(
            rf'"line":\{{"color":"{colour}"[^}}]*\}},"mode":"lines","name":"{name}"', page
        )
    assert "Preemption-cost break-even" in page
    assert "Comparisons with baselines" in page and "Node-level targets (Gleaner)" in page


def _policy(saved: float, met: float | None, evictions: int, error: float | None) -> dict[str, Any]:
    return {
        "gpus_saved": saved,
        "sla_attainment": met,
        "sla_windows": 0 if met is None else 40,
        "evictions": evictions,
        "jobs": 20,
        "prediction_error": {"placements": 0 if error is None else 9, "mean_abs": error or 0.0},
    }


def test_cluster_verdict_names_winners_margins_and_the_idle_reference() -> None:
    cluster = {
        "gpus": 16,
        "nodes": 2,
        "trace": "/data/exports/dcgm.json",
        "config": {"duration_h": 3.0},
        "policies": {
            "no-harvest": _policy(0.0, None, 0, None),
            "gleaner": _policy(5.5, 0.95, 2, 0.061),
            "first-fit": _policy(6.0, 0.80, 9, None),
        },
    }
    assert cluster_verdict(cluster, 11) == [
        "Seed 11: 16 GPUs in 2 nodes, 3 h of online load replayed from dcgm.json, 20 "
        "OfflineJobs; every policy saw the same load and jobs.",
        "no-harvest ran no job: it has no SLA windows to judge (shown as –).",
        "first-fit has the most GPUs saved (6.00), ahead of gleaner (5.50) by 0.50.",
        "gleaner has the most SLA windows met (95.0%), ahead of first-fit (80.0%) by 15.0 points.",
        "gleaner has the fewest evictions (2), ahead of first-fit (9) by 7.",
        "gleaner has the smallest prediction error (6.1 points); no other policy to compare.",
        "Comparison with first-fit (no model, no SLA check): Gleaner saves 5.5 GPUs against 6.0, "
        "meets 95.0% of SLA windows against 80.0%, with 2 evictions against 9.",
    ]


def test_values_equal_as_printed_are_a_tie_not_a_lead() -> None:
    from gleaner.simulator.verdict import _lead

    two = {"prism": 0.108, "uvm": 0.114, "gleaner": 0.2}
    assert _lead(two, "the fewest preemptions per request", True, lambda v: f"{v:.2f}") == (
        "prism, uvm tie for the fewest preemptions per request (0.11)."
    )
    apart = {"prism": 0.19, "gleaner": 0.2}
    assert _lead(apart, "the fewest preemptions", True, lambda v: f"{v:.2f}") == (
        "prism has the fewest preemptions (0.19), ahead of gleaner (0.20) by 0.01."
    )


def test_every_cluster_policy_has_its_sentence() -> None:
    # The report describes each policy a scenario can name, not "a custom placement policy".
    assert set(typing.get_args(PolicyName)) == set(CLUSTER_POLICY_TEXT)
