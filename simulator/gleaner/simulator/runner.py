"""Run a scenario end to end: node level, cluster level, target checks, one results dict.

Contract. :func:`run_scenario` runs the node-level part (``gleaner.simulator.node.run_node``) and
the cluster-level part (``gleaner.simulator.cluster.run_cluster``, fed the gate efficiency the
node level measured) of a :class:`~gleaner.simulator.scenario.Scenario` and returns
:class:`SimulationOutput`: ``results`` is JSON-ready (what ``results.json`` holds and the
report plots), ``cluster_raw`` keeps the objects behind the dashboard snapshot.
:func:`scenario_gate` is the gate efficiency the cluster level gets at a seed, for callers
that run the cluster level alone (``python -m bench sla``). :func:`check_targets`
evaluates docs/simulator.md's node-level targets on ``results`` and says, for each, the
value, the target and whether it is met — the tests read the same JSON. Each entry
says whether it is a ``target`` (about Gleaner) or a ``comparison`` (Gleaner against a
baseline), and the unit its value and threshold are written in. With a node level that runs
``gleaner`` and ``iteration`` the results also hold the preemption-cost break-even
(``node.breakeven``, ``gleaner.simulator.sensitivity``) and the verdict in words
(``verdict``, ``gleaner.simulator.verdict``); a cluster level adds its own verdict
(``cluster_verdict``); ``sensitivity=True`` adds the sensitivity table.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gleaner.simulator.cluster import run_cluster, total_steps
from gleaner.simulator.node import run_node
from gleaner.simulator.online import REFERENCE_BUSY, online_from_trace
from gleaner.simulator.scenario import Scenario
from gleaner.simulator.sensitivity import breakeven
from gleaner.simulator.sensitivity import sensitivity as sensitivity_rows
from gleaner.simulator.verdict import cluster_verdict, node_verdict

DEFAULT_GATE_EFFICIENCY = 0.96
"""Enabled share of online-idle time when no node-level run measured it."""

ProgressFactory = Callable[[str, int], Callable[[int], None]]


@dataclass
class SimulationOutput:
    results: dict[str, Any]
    cluster_raw: dict[str, Any] | None


def measured_gate(node: dict[str, Any]) -> tuple[float, float] | None:
    """The gate efficiency η a node-level run measured and the online busy share it was
    measured at: the ``gleaner`` run's offline run time over the online-idle time (None
    without that run, or when the GPU was never idle)."""
    gate = node["runs"].get("gleaner")
    if gate is None or gate["online_busy_fraction"] >= 1.0:
        return None
    eta = min(1.0, gate["offline_run_fraction"] / (1.0 - gate["online_busy_fraction"]))
    return eta, float(gate["online_busy_fraction"])


def scenario_gate(scenario: Scenario, seed: int) -> tuple[float, float]:
    """The (η, reference busy share) :func:`run_scenario` feeds the cluster level at
    ``seed``, without the rest of the node level: the ``gleaner`` node run alone, whose
    result does not depend on the other runs (the defaults without a node level)."""
    default = (DEFAULT_GATE_EFFICIENCY, REFERENCE_BUSY)
    if scenario.node is None:
        return default
    runs = [r for r in scenario.node.runs if r.name == "gleaner"]
    if not runs:
        return default
    alone = scenario.node.model_copy(update={"runs": runs})
    node = run_node(alone, seed, replay=alone.replay())
    return measured_gate(node) or default


def _no_progress(desc: str, total: int) -> Callable[[int], None]:
    return lambda n: None


def run_scenario(
    scenario: Scenario,
    seed: int | None = None,
    trace: str | Path | None = None,
    progress: ProgressFactory = _no_progress,
    sensitivity: bool = False,
) -> SimulationOutput:
    """Run every part of ``scenario`` (see the module docstring)."""
    seed = scenario.seed if seed is None else seed
    results: dict[str, Any] = {"scenario": scenario.name, "description": scenario.description}
    results["seed"] = seed
    eta = DEFAULT_GATE_EFFICIENCY
    reference_busy = REFERENCE_BUSY
    online = None
    if trace is not None and scenario.cluster is not None:
        # Read and check the trace first: a bad file fails before minutes of node-level work.
        from gleaner.perfmodel import read_trace_frame, validate_trace_frame

        frame = validate_trace_frame(read_trace_frame(trace))
        online = online_from_trace(frame, scenario.cluster.history_h)
    if scenario.node is not None:
        replay = scenario.node.replay()  # a bad trace fails before any run
        tick = progress("node level", len(scenario.node.runs))
        node = run_node(scenario.node, seed, progress=lambda name: tick(1), replay=replay)
        results["node"] = node
        names = {r.name for r in scenario.node.runs}
        if {"gleaner", "iteration", "online-only"} <= names:
            tick = progress("break-even", 1)
            node["breakeven"] = breakeven(scenario.node, seed)
            tick(1)
        if sensitivity:
            tick = progress("sensitivity", 7)
            results["sensitivity"] = sensitivity_rows(
                scenario.node, seed, progress=lambda term: tick(1)
            )
        results["verdict"] = node_verdict(node, seed)
        measured = measured_gate(node)
        if measured is not None:
            eta, reference_busy = measured
        results["targets"] = check_targets(results)
    cluster_raw = None
    if scenario.cluster is not None:
        cfg = scenario.cluster
        if online is not None:
            cfg = cfg.model_copy(
                update={
                    "nodes": len(online.node_names),
                    "gpus_per_node": online.gpus_per_node,
                    "step_s": online.step_s,
                    "duration_h": (online.busy.shape[1] - online.t0_step) * online.step_s / 3600,
                }
            )
        tick = progress("cluster level", total_steps(cfg))
        cluster_raw = run_cluster(
            cfg, seed, eta, progress=tick, online=online, reference_busy=reference_busy
        )
        results["cluster"] = {
            "gpus": cluster_raw["online"].n_gpus,
            "nodes": len(cluster_raw["online"].node_names),
            "trace": str(trace) if trace is not None else None,
            "gate_efficiency": cluster_raw["gate_efficiency"],
            "config": cfg.model_dump(mode="json"),
            "policies": {
                name: {k: v for k, v in m.items() if not k.startswith("_")}
                for name, m in cluster_raw["policies"].items()
            },
        }
        results["cluster_verdict"] = cluster_verdict(results["cluster"], seed)
    return SimulationOutput(results, cluster_raw)


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "≤": operator.le,
    ">": operator.gt,
    "≥": operator.ge,
}


def _target(
    name: str,
    value: float,
    op: str,
    bound: float,
    why: str = "",
    kind: str = "target",
    unit: str = "%",
    *,
    judged: bool = True,
) -> dict[str, Any]:
    """One row: ``value op bound``, the bound written once (its text follows from it, in
    ``unit``: "%" and "share" as a percentage, "count" as a number). ``judged`` False: the
    value could not be computed (a zero denominator), which never meets the target."""
    shown = f"{bound:g}" if unit == "count" else f"{100 * bound:.4g}%"
    return {
        "name": name,
        "value": value,
        "target": f"{op} {shown}",
        "met": judged and _COMPARE[op](value, bound),
        "note": why,
        "kind": kind,
        "unit": unit,
    }


def check_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The node-level targets of docs/simulator.md, evaluated on the results JSON."""
    runs = results["node"]["runs"]
    out: list[dict[str, Any]] = []
    g = runs.get("gleaner")
    if g is None:
        return out
    out.append(_target("gleaner TTFT increase (mean)", g["ttft_increase"]["mean"], "<", 0.05))
    out.append(_target("gleaner TPOT increase (mean)", g["tpot_increase"]["mean"], "<", 0.02))
    out.append(
        _target(
            "gleaner max preemptions per request",
            g["max_preemptions_per_request"],
            "≤",
            1,
            unit="count",
        )
    )
    out.append(
        _target(
            "gleaner offline throughput / bound",
            g["offline_normalized"],
            "≥",
            0.9,
            "share of what the gate's own run time would give with its initial memory",
            unit="share",
        )
    )
    gp = runs.get("gpreempt")
    if gp is not None:
        out.append(
            _target(
                "gpreempt preemptions per request (Gleaner: ≤ 1)",
                gp["preemptions_per_request"],
                ">",
                1,
                kind="comparison",
                unit="count",
            )
        )
    it = runs.get("iteration")
    if it is not None:
        out.append(
            _target(
                "iteration TTFT increase (mean) above gleaner's",
                it["ttft_increase"]["mean"],
                ">",
                g["ttft_increase"]["mean"],
                kind="comparison",
            )
        )
    fifo = runs.get("gleaner-fifo")
    if fifo is not None:
        sel, ff = g["throughput_loss"], fifo["throughput_loss"]
        out.append(
            _target(
                "selective reclamation loss / FIFO loss",
                sel / ff if ff > 0 else 0.0,
                "≤",
                0.8,
                "loss = 1 - offline throughput / (gate + no reclamation) bound",
                kind="comparison",
                unit="share",
                judged=ff > 0,
            )
        )
    return out
