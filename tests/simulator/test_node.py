"""Node-level engine and policies on short runs: invariants and the qualitative claims."""

from __future__ import annotations

from typing import Any

import pytest

from gleaner.simulator.node import NodeScenario, RunSpec, run_node


@pytest.fixture(scope="module")
def short() -> dict[str, Any]:
    scenario = NodeScenario(
        duration_s=150.0,
        memory={"static_window_s": 150.0},
        runs=[
            RunSpec(name="online-only", compute="online-only", memory="none"),
            RunSpec(name="gleaner", compute="gleaner", memory="gleaner"),
            RunSpec(name="gpreempt", compute="gpreempt", memory="gleaner"),
            RunSpec(name="iteration", compute="iteration", memory="gleaner"),
            RunSpec(name="static", compute="gleaner", memory="static"),
        ],
    )
    return run_node(scenario, seed=11)


def test_every_run_serves_every_request(short: dict[str, Any]) -> None:
    counts = {r["requests"] for r in short["runs"].values()}
    assert len(counts) == 1 and counts.pop() > 10


def test_online_only_has_no_offline_work(short: dict[str, Any]) -> None:
    ref = short["runs"]["online-only"]
    assert ref["offline_tokens"] == 0 and ref["preemptions_per_request"] == 0
    assert 0.0 < ref["online_busy_fraction"] < 1.0


def test_ttft_is_at_least_a_prefill(short: dict[str, Any]) -> None:
    # The fastest first token needs one prefill iteration of a 1-token prompt (k5).
    for run in short["runs"].values():
        assert run["ttft_cdf_s"][0] >= 0.006


def test_gate_bounds_preemptions_and_timeslicing_does_not(short: dict[str, Any]) -> None:
    runs = short["runs"]
    assert runs["gleaner"]["max_preemptions_per_request"] <= 1
    assert runs["gpreempt"]["preemptions_per_request"] > 1
    assert runs["iteration"]["preemptions_per_request"] > 1


def test_kernel_boundary_preemption_hurts_decode(short: dict[str, Any]) -> None:
    runs = short["runs"]
    assert runs["iteration"]["tpot_increase"]["mean"] > runs["gleaner"]["tpot_increase"]["mean"]
    assert runs["gleaner"]["tpot_increase"]["mean"] < 0.02


def test_offline_work_fills_idle_time(short: dict[str, Any]) -> None:
    runs = short["runs"]
    g = runs["gleaner"]
    assert g["offline_tokens"] > 0
    # The gate only runs offline work while online is idle.
    assert g["offline_run_fraction"] <= 1.0 - g["online_busy_fraction"] + 1e-9
    assert runs["gpreempt"]["offline_run_fraction"] >= g["offline_run_fraction"]
    assert 0.5 < g["offline_normalized"] <= 1.0 + 1e-9


def test_static_share_never_reclaims(short: dict[str, Any]) -> None:
    assert short["runs"]["static"]["reclamations"] == 0
    assert short["runs"]["gleaner"]["reclamations"] > 0


@pytest.mark.timeout(120)
def test_a_pool_that_frees_memory_only_under_pressure_sees_decode_growth() -> None:
    # On this seed a request outgrows the online share of a prism pool while nothing waits.
    # When the policy saw only the head of the queue, the request was preempted and
    # readmitted forever with nothing freed: the run never ended.
    from gleaner.simulator.scenario import load_scenario, quick

    node = quick(load_scenario("default")).node
    assert node is not None
    prism = [r for r in node.runs if r.name == "prism"]
    online = [r for r in node.runs if r.name == "online-only"]
    out = run_node(node.model_copy(update={"runs": online + prism}), seed=3)["runs"]
    assert out["prism"]["requests"] == out["online-only"]["requests"] > 10
    assert out["prism"]["online_kv_preemptions"] < out["prism"]["requests"]


@pytest.mark.timeout(120)
def test_a_request_the_pool_can_never_hold_is_refused_not_waited_for() -> None:
    # On this seed one request outgrows the static policy's fixed share of the pool. Waiting
    # for room that never comes kept the run going forever; vLLM refuses such a request.
    from gleaner.simulator.scenario import load_scenario, quick

    node = quick(load_scenario("default")).node
    assert node is not None
    runs = [r for r in node.runs if r.name in ("online-only", "static", "gleaner")]
    out = run_node(node.model_copy(update={"runs": runs}), seed=2)["runs"]
    assert out["static"]["refused_requests"] == 1
    assert out["online-only"]["refused_requests"] == out["gleaner"]["refused_requests"] == 0
    served = out["online-only"]["requests"]
    assert out["static"]["requests"] + out["static"]["refused_requests"] == served
    assert out["gleaner"]["requests"] == served
