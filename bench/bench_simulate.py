"""Simulator speed: the 1,000-GPU, 24-hour cluster scenario in under 5 minutes,
and the default `gleaner simulate` scenario in under 2 minutes.

``python -m bench simulate`` prints wall-clock times, their ratio to the targets, and the
headline numbers of each run; it returns 1 when a target is missed. ``--only cluster`` or
``--only default`` runs one of the two.
"""

from __future__ import annotations

import argparse
import time

from gleaner.simulator.runner import run_scenario
from gleaner.simulator.scenario import load_scenario

TARGETS_S = {"cluster-1000": 300.0, "default": 120.0}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench simulate")
    parser.add_argument("--only", choices=["cluster", "default"], default=None)
    args = parser.parse_args(argv)
    names = ["cluster-1000", "default"]
    if args.only == "cluster":
        names = ["cluster-1000"]
    elif args.only == "default":
        names = ["default"]
    worst = 0
    print(f"{'scenario':14s} {'wall s':>8s} {'target s':>9s} {'ratio':>6s}  headline")
    for name in names:
        scenario = load_scenario(name)
        start = time.perf_counter()
        results = run_scenario(scenario).results
        wall = time.perf_counter() - start
        target = TARGETS_S[name]
        head = ""
        if "cluster" in results:
            g = results["cluster"]["policies"].get("gleaner", {})
            head = (
                f"{results['cluster']['gpus']} GPUs; gleaner: GPUs saved "
                f"{g.get('gpus_saved', 0):.1f}, SLA {100 * (g.get('sla_attainment') or 0):.1f}%"
            )
        if "targets" in results:
            met = sum(t["met"] for t in results["targets"])
            head += f"; node targets met {met}/{len(results['targets'])}"
        print(f"{name:14s} {wall:8.1f} {target:9.0f} {wall / target:6.2f}  {head}")
        if wall > target:
            worst = 1
    return worst
