"""The throughput SLA: Gleaner's default against the paper's model and its own ablations.

``python -m bench sla`` runs the default scenario's cluster (256 GPUs, 24 h, the SLA
window of the API's default, 30 min) over seeds 1-3 for every policy below, side by side
on the same online trace and job queue per seed, and prints per policy the SLA windows
met (SLA attainment), GPUs saved, SLA evictions, and the median absolute prediction
error (the mean forecast's prediction vs the observed throughput fraction of each
placement; the admission bound is not a prediction of the mean), averaged over the seeds,
then the windows met by job size (1, 2, 4 GPUs), pooled over the seeds:

- ``gleaner``: each job judged over the next 12 hours by each GPU's busiest hour of the
  time-of-day forecast, its load scaled by the spread of past windows at
  ``cluster.risk_target`` (``worst-hours``), the pair-overlap filter, and proactive moves
  (each hour, a running job whose node no longer admits it over the coming
  ``cluster.move_horizon_h`` moves to a node that admits it);
- ``paper``: the paper's model (trailing window, mean rule, 0.95 pair filter);
- ``no-diurnal``, ``no-worst-hours``, ``no-risk``, ``no-multi-filter``, ``no-move``,
  ``no-planned-exit``: ``gleaner`` less one rule (``no-planned-exit``: no shorter
  admission pass for 4-GPU jobs, so no planned exit);
- ``oracle``: ``gleaner`` admitting by the run's own future load (each GPU at its worst
  hour of the horizon, no load spread). Nobody can run it; it bounds what a better
  forecast of the hours ahead could buy.

Moves are counted with the SLA evictions against the evictions target (each one restarts
a job, as an eviction does).

Targets (docs/benchmarks.md): SLA windows met >= 99% with GPUs saved no lower than
``paper``, evictions at most half of ``paper``'s, median absolute prediction error <= 5%.
It prints each target's verdict and returns 1 when one is missed. Each seed's cluster gets
the gate efficiency ``gleaner simulate`` feeds it at that seed (the node level's
``gleaner`` run, about 1.5 s; ``scenario_gate``), so the figures of ``gleaner`` and
``paper`` are ``gleaner simulate --seed N``'s own, the policy the targets name.
``--seeds 1,2`` picks other seeds.
"""

from __future__ import annotations

import argparse
import time
from statistics import mean
from typing import Any

from gleaner.simulator.cluster import run_cluster
from gleaner.simulator.cluster_scenario import PolicyName
from gleaner.simulator.runner import scenario_gate
from gleaner.simulator.scenario import load_scenario

POLICIES: tuple[PolicyName, ...] = (
    "gleaner",
    "paper",
    "no-diurnal",
    "no-worst-hours",
    "no-risk",
    "no-multi-filter",
    "no-move",
    "no-planned-exit",
    "oracle",
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sla")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help="comma-separated policies to run (gleaner and paper are always run)",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = [p for p in POLICIES if p in {"gleaner", "paper", *args.policies.split(",")}]
    scenario = load_scenario("default")
    base = scenario.cluster
    assert base is not None
    cfg = base.model_copy(update={"policies": chosen})
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in chosen}
    start = time.perf_counter()
    gates: list[str] = []
    for seed in seeds:
        eta, reference_busy = scenario_gate(scenario, seed)
        gates.append(f"{eta:.3f} at {100 * reference_busy:.1f}% busy")
        out = run_cluster(cfg, seed, eta, reference_busy=reference_busy)
        for policy in chosen:
            rows[policy].append(out["policies"][policy])
    wall = time.perf_counter() - start
    print(f"seeds {seeds}, {wall:.0f} s; means over the seeds (each seed in brackets)")
    print(f"gate efficiency measured by the node level: {'; '.join(gates)}")
    print(
        f"{'policy':16s} {'windows met':>12s} {'GPUs saved':>11s} {'evictions':>10s} "
        f"{'moves':>6s} {'median |err|':>13s}"
    )
    summary: dict[str, dict[str, float]] = {}
    for policy in chosen:
        ms = rows[policy]
        met = [100 * (m["sla_attainment"] or 0.0) for m in ms]
        saved = [m["gpus_saved"] for m in ms]
        ev = [float(m["evictions"]) for m in ms]
        mv = [float(m.get("moves", 0)) for m in ms]
        err = [m["prediction_error"]["median_abs"] for m in ms]
        summary[policy] = {
            "met": mean(met),
            "saved": mean(saved),
            "ev": mean(ev),
            "mv": mean(mv),
            "err": mean(err),
        }
        print(
            f"{policy:16s} {mean(met):11.1f}% {mean(saved):11.1f} {mean(ev):10.1f} "
            f"{mean(mv):6.1f} {mean(err):13.3f}   [{' '.join(f'{x:.1f}%' for x in met)}; "
            f"{' '.join(f'{x:.1f}' for x in saved)}; {' '.join(f'{x:.0f}' for x in ev)}; "
            f"{' '.join(f'{x:.0f}' for x in mv)}]"
        )
    print("windows met by job size (all seeds pooled; windows judged in brackets)")
    sizes = sorted(
        {gpus for policy in chosen for m in rows[policy] for gpus in m["sla_windows_by_gpus"]}
    )
    print(f"{'policy':16s} " + " ".join(f"{f'{gpus}-GPU jobs':>16s}" for gpus in sizes))
    for policy in chosen:
        cells = []
        for gpus in sizes:
            got = [m["sla_windows_by_gpus"].get(gpus) for m in rows[policy]]
            judged = sum(w["windows"] for w in got if w)
            met = sum(w["met"] for w in got if w)
            share = f"{100 * met / judged:.1f}%" if judged else "-"
            cells.append(f"{share:>8s} [{judged:5d}]")
        print(f"{policy:16s} " + " ".join(f"{c:>16s}" for c in cells))
    g, p = summary["gleaner"], summary["paper"]
    targets = [
        ("SLA windows met >= 99%", g["met"] >= 99.0, f"{g['met']:.1f}%"),
        (
            "GPUs saved >= paper's",
            g["saved"] >= p["saved"],
            f"{g['saved']:.1f} vs {p['saved']:.1f}",
        ),
        (
            "evictions and moves <= half of paper's evictions",
            g["ev"] + g["mv"] <= p["ev"] / 2,
            f"{g['ev'] + g['mv']:.0f} vs {p['ev']:.0f}",
        ),
        ("median |prediction error| <= 0.05", g["err"] <= 0.05, f"{g['err']:.3f}"),
    ]
    for policy in chosen:
        if policy in ("gleaner", "paper", "oracle"):
            continue
        a = summary[policy]
        dm, ds = g["met"] - a["met"], g["saved"] - a["saved"]
        verdict = "gleaner beats it" if dm >= 0 and ds >= 0 else "not beaten"
        print(f"vs {policy}: windows met {dm:+.2f} points, GPUs saved {ds:+.2f}: {verdict}")
    if "oracle" in summary:
        o = summary["oracle"]
        print(
            f"oracle (sees each GPU's worst hour ahead, a bound): windows met "
            f"{o['met'] - g['met']:+.2f} points, GPUs saved {o['saved'] - g['saved']:+.2f} "
            "against gleaner: what a perfect forecast of the hours ahead would add"
        )
    for name, ok, value in targets:
        print(f"target {name}: {'met' if ok else 'MISSED'} ({value})")
    return 0 if all(ok for _, ok, _ in targets) else 1
