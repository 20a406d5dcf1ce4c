"""The node-level targets (``check_targets``): each bound is written once, so the text a
user reads and the verdict always agree; a value that could not be computed never meets."""

from __future__ import annotations

from typing import Any

from gleaner.simulator.runner import check_targets


def _results(ttft: float, fifo_loss: float) -> dict[str, Any]:
    gleaner = {
        "ttft_increase": {"mean": ttft},
        "tpot_increase": {"mean": 0.01},
        "max_preemptions_per_request": 1,
        "offline_normalized": 0.9,
        "throughput_loss": 0.1,
    }
    return {"node": {"runs": {"gleaner": gleaner, "gleaner-fifo": {"throughput_loss": fifo_loss}}}}


def _by_name(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in check_targets(results)}


def test_text_and_verdict_come_from_one_bound() -> None:
    rows = _by_name(_results(ttft=0.049, fifo_loss=0.5))
    ttft = rows["gleaner TTFT increase (mean)"]
    assert (ttft["target"], ttft["met"]) == ("< 5%", True)
    assert rows["gleaner max preemptions per request"]["target"] == "≤ 1"
    offline = rows["gleaner offline throughput / bound"]
    assert (offline["target"], offline["met"]) == ("≥ 90%", True)  # at the bound: met
    fifo = rows["selective reclamation loss / FIFO loss"]
    assert (fifo["target"], fifo["met"]) == ("≤ 80%", True)
    assert fifo["value"] == 0.2


def test_at_a_strict_bound_and_without_a_denominator_it_is_missed() -> None:
    rows = _by_name(_results(ttft=0.05, fifo_loss=0.0))
    assert rows["gleaner TTFT increase (mean)"]["met"] is False
    assert rows["selective reclamation loss / FIFO loss"]["met"] is False
