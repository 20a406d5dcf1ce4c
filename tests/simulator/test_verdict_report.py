"""The verdict in words and report.html: who wins, one colour per policy, readable log ticks."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gleaner.simulator.node import NodeScenario
from gleaner.simulator.report import KNOWN_COLORS, log_ticks, policy_colors, render_report
from gleaner.simulator.runner import run_scenario
from gleaner.simulator.scenario import Scenario
from gleaner.simulator.verdict import POLICY_TEXT, node_verdict, target_value


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
