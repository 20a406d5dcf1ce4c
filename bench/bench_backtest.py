"""``gleaner backtest`` on diurnal traces the simulator writes (targets in docs/benchmarks.md).

``python -m bench backtest`` draws, for each seed (1-3 by default), the default scenario's
online load over ``--days`` days on ``--nodes`` 8-GPU nodes (diurnal services with bursts
and noise: the simulator's ground truth, ``gleaner simulate --write-trace``) and that
cluster's offline queue (the simulator's job mix: 1/2/4 GPUs, SLAs 0.15-0.55, profiles from
the engine model), writes them as a trace file and OfflineJob manifests, and reads them
back as ``gleaner backtest`` does. It then runs the backtest's own code
(``gleaner.cli.backtest.run_backtest``) with origins every 2 hours after ``--min-history``,
each placement decided from the trace before its origin and judged on the next 2 hours,
for each placement rule:

- ``trailing``: the trailing 6 h window and the mean rule (the paper's);
- ``diurnal``: the mean time-of-day forecast over the horizon;
- ``worst-hours``: the operator's admission (each GPU's busiest hour of the horizon, its
  load scaled by the spread of past windows) at each ``--risk-targets`` value; the first
  one is the command's default.

It prints per rule the placements, the share that met their SLA on their horizon, the
oracle's placements (it places from the horizon itself) and the ratio, summed over the
seeds (each seed in brackets), the verdict against both targets (>= 99% of placements
meet their SLA, >= 80% of the oracle's placements), and where the default rule's misses
were: by hour of the day of the origin and by admission margin (predicted - SLA). Returns
1 when the default rule misses a target.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gleaner.cli.backtest import load_queue, run_backtest
from gleaner.perfmodel import read_trace_frame, validate_trace_frame
from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET
from gleaner.scheduler.backtest import (
    TARGET_ATTAINMENT,
    TARGET_ORACLE_SHARE,
    BacktestResult,
    Group,
    by_gpus,
    by_hour,
    by_margin,
)
from gleaner.simulator.jobfile import job_manifests, write_job_manifests
from gleaner.simulator.scenario import load_scenario
from gleaner.simulator.tracefile import cluster_trace, write_trace

HOUR = 3600.0


@dataclass(frozen=True)
class Rule:
    name: str
    forecast: str
    risk_target: float | None = None


def _rules(risk_targets: list[float]) -> list[Rule]:
    worst = [Rule(f"worst-hours {r:g}", "worst-hours", r) for r in risk_targets]
    return [*worst, Rule("diurnal", "diurnal"), Rule("trailing", "trailing")]


def _inputs(seed: int, nodes: int, days: float, where: Path) -> tuple[Path, Path]:
    """The seed's trace file and job manifests, written where ``gleaner backtest`` reads."""
    base = load_scenario("default").cluster
    assert base is not None
    cfg = base.model_copy(update={"nodes": nodes, "history_h": 0.0, "duration_h": 24.0 * days})
    trace, jobs = where / f"trace-{seed}.parquet", where / f"jobs-{seed}.yaml"
    write_trace(cluster_trace(cfg, seed), trace)
    write_job_manifests(job_manifests(cfg, seed), jobs)
    return trace, jobs


def _share(num: int, den: int) -> str:
    return "-" if den == 0 else f"{100 * num / den:.1f}%"


def _groups(title: str, label: Callable[[int], str], groups: list[Group]) -> None:
    print(title)
    print("  " + " ".join(f"{label(g.key):>7s}" for g in groups))
    print("  " + " ".join(f"{g.placed:7d}" for g in groups) + "  placements")
    print("  " + " ".join(f"{100 * g.missed_share:6.1f}%" for g in groups) + "  missed")


def _merged(results: list[BacktestResult]) -> BacktestResult:
    return BacktestResult(tuple(o for r in results for o in r.origins))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench backtest")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--nodes", type=int, default=16, help="8-GPU nodes (default 16)")
    parser.add_argument("--days", type=float, default=4.0, help="Trace length, days")
    parser.add_argument(
        "--min-history", type=float, default=2.0, help="Days before the first origin"
    )
    parser.add_argument(
        "--risk-targets",
        default=",".join(f"{t:g}" for t in dict.fromkeys((DEFAULT_RISK_TARGET, 0.9, 0.95, 0.99))),
        help="worst-hours risk targets; the first is the default rule's",
    )
    parser.add_argument(
        "--closed-loop",
        action="store_true",
        help="Correct later placements by earlier ones' observed/predicted ratios",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rules = _rules([float(r) for r in args.risk_targets.split(",")])
    results: dict[str, list[BacktestResult]] = {r.name: [] for r in rules}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            trace, jobs = _inputs(seed, args.nodes, args.days, Path(tmp))
            frame = validate_trace_frame(read_trace_frame(trace))
            requests, profiles = load_queue([jobs])
            for rule in rules:
                results[rule.name].append(
                    run_backtest(
                        frame,
                        requests,
                        profiles,
                        every_s=2 * HOUR,
                        horizon_s=2 * HOUR,
                        min_history_s=args.min_history * 24 * HOUR,
                        forecast=rule.forecast,
                        risk_target=rule.risk_target,
                        closed_loop=args.closed_loop,
                    )
                )
    wall = time.perf_counter() - start
    n_jobs = len(requests)
    print(
        f"seeds {seeds}: {args.nodes} nodes x 8 GPUs, {args.days:g} days of 60 s samples, "
        f"{n_jobs} jobs in the last seed's queue; origins every 2 h after "
        f"{args.min_history:g} days, each judged on the next 2 h; {wall:.0f} s"
    )
    print(
        f"{'rule':18s} {'placements':>10s} {'met SLA':>8s} {'oracle':>7s} {'of oracle':>9s}"
        f"  verdict   [per seed: met SLA; of oracle]"
    )
    verdicts: dict[str, bool] = {}
    for rule in rules:
        rs = results[rule.name]
        total = _merged(rs)
        att, share = total.attainment or 0.0, total.oracle_share or 0.0
        ok = att >= TARGET_ATTAINMENT and share >= TARGET_ORACLE_SHARE
        verdicts[rule.name] = ok
        per_seed = " ".join(
            f"{_share(r.met, r.placed)};{_share(r.placed, r.oracle_placed)}" for r in rs
        )
        print(
            f"{rule.name:18s} {total.placed:10d} {_share(total.met, total.placed):>8s} "
            f"{total.oracle_placed:7d} {_share(total.placed, total.oracle_placed):>9s}  "
            f"{'PASS' if ok else 'FAIL':7s}   [{per_seed}]"
        )
    default = rules[0]
    total = _merged(results[default.name])
    print(f"\nwhere the misses of '{default.name}' were (all seeds):")
    _groups("by hour of the day of the origin (UTC)", lambda k: f"{k:02d}:00", by_hour(total))
    _groups(
        "by admission margin (predicted - SLA)",
        lambda k: f">={0.05 * k:.2f}" if k == 6 else f"<{0.05 * (k + 1):.2f}",
        by_margin(total),
    )
    _groups("by job size", lambda k: f"{k}-GPU", by_gpus(total))
    att, share = total.attainment or 0.0, total.oracle_share or 0.0
    targets = [
        (
            f"placements meeting their SLA >= {100 * TARGET_ATTAINMENT:.0f}%",
            att >= TARGET_ATTAINMENT,
            f"{100 * att:.1f}%",
        ),
        (
            f"placements >= {100 * TARGET_ORACLE_SHARE:.0f}% of the oracle's",
            share >= TARGET_ORACLE_SHARE,
            f"{100 * share:.1f}%",
        ),
    ]
    for name, ok, value in targets:
        print(f"target ({default.name}) {name}: {'met' if ok else 'MISSED'} ({value})")
    return 0 if all(ok for _, ok, _ in targets) else 1
