"""The verdict in words: which policy wins on what, by how much, with the seed.

Contract. :func:`node_verdict` reads the node-level results JSON (``gleaner.simulator.node``'s
``run_node`` output, with the optional ``breakeven`` of ``gleaner.simulator.sensitivity``) and
returns plain sentences a user reads: the setting (seed, GPUs, seconds, requests, replayed
trace), the winner of each measure (mean TTFT increase, mean TPOT increase, preemptions per
request, offline tokens/s) and its margin over the runner-up, how Gleaner compares with the
iteration-level baseline, and the break-even disable latency. :func:`cluster_verdict` does the
same for the cluster level (``results["cluster"]``): GPUs saved, SLA windows met, evictions and
prediction error among the policies that ran jobs, and Gleaner against first-fit.
:data:`POLICY_TEXT` explains each shipped run in one sentence (the CLI and report.html show
it). Pure: a dict in, strings out.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

POLICY_TEXT: dict[str, str] = {
    "online-only": "The online service alone on the GPU: the reference every increase is "
    "measured against.",
    "gleaner": "Gleaner: the channel gate stops offline work at once when online turns busy "
    "and resumes it after a cooldown (at most one preemption per request); memory is "
    "reclaimed from offline by the MIAD reservation, choosing pages that cost the least "
    "recomputation.",
    "gleaner-fifo": "Gleaner with first-in-first-out page reclamation instead of the "
    "least-recomputation choice (a comparison for the selection rule).",
    "iteration": "Iteration-level sharing: offline runs whenever no online iteration is in "
    "flight, and an online launch waits for the offline kernel in flight to finish.",
    "gpreempt": "GPreempt-style timeslicing: offline wakes in every gap between online "
    "iterations and is preempted at the next launch (fast, but once per iteration).",
    "uvm": "Unified memory oversubscription: offline fills all free memory and online faults "
    "pages back over PCIe when it grows (gate for compute).",
    "prism": "A shared memory pool without reclamation: offline gives memory back only as its "
    "own requests finish (gate for compute).",
    "static": "A fixed memory split sized from an online-only warm-up window (gate for compute).",
}
"""One sentence per shipped run name."""

CLUSTER_POLICY_TEXT: dict[str, str] = {
    "no-harvest": "No offline jobs run on the online GPUs: the reference.",
    "gleaner": "Gleaner's scheduler places each job where its performance model predicts the "
    "SLA holds, and the SLA monitor evicts and reschedules jobs that keep missing it.",
    "first-fit": "The first node with enough free GPUs, without a model or an SLA check.",
    "no-multi-filter": "Gleaner's scheduler without the multi-GPU overlap filter.",
    "paper": "The paper's model: the trailing window, the mean rule and the 0.95 pair filter.",
    "no-diurnal": "Gleaner's scheduler with the trailing window instead of the time-of-day "
    "forecast.",
    "no-worst-hours": "Gleaner's scheduler admitting by the mean time-of-day forecast instead "
    "of each GPU's busiest hour.",
    "no-risk": "Gleaner's scheduler without the load spread: the busiest hours as forecast.",
    "no-move": "Gleaner's scheduler without moves before a forecast peak (nor planned exits).",
    "no-planned-exit": "Gleaner's scheduler without the planned exit for large jobs.",
    "oracle": "Gleaner's scheduler admitting by the run's own future load, each GPU at its "
    "worst hour ahead: a bound on what a better forecast could buy, not a policy one can run.",
}
"""One sentence per shipped cluster-level placement policy."""


def policy_text(name: str, run: dict[str, Any]) -> str:
    """The sentence for a run (a custom run name is described by its policies)."""
    if name in POLICY_TEXT:
        return POLICY_TEXT[name]
    return f"Compute policy {run.get('compute')}, memory policy {run.get('memory')}."


def pct(x: float) -> str:
    """A signed percentage with two decimals."""
    return f"{100 * x:+.2f}%"


def target_value(target: dict[str, Any]) -> str:
    """A target's value in its unit: ``%`` a signed increase, ``share`` a percentage,
    ``count`` a number."""
    unit = target.get("unit", "%")
    v = float(target["value"])
    if unit == "%":
        return pct(v)
    if unit == "share":
        return f"{100 * v:.1f}%"
    return f"{v:.4g}"


def _colocated(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: r for n, r in runs.items() if r.get("compute") != "online-only"}


FORMAT_NAMES = {"azure": "Azure", "mooncake": "Mooncake", "burstgpt": "BurstGPT"}
"""Request-trace formats as their owners spell them."""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _gpus(n: int) -> str:
    return _count(n, "GPU")


def node_verdict(node: dict[str, Any], seed: int) -> list[str]:
    """Sentences of the node-level verdict (see the module docstring)."""
    runs = _colocated(node["runs"])
    sc = node["scenario"]
    ref = node["runs"].get("online-only")
    n_req = ref["requests"] if ref else next(iter(node["runs"].values()))["requests"]
    replay = node.get("replay")
    path = (sc.get("requests") or {}).get("path")
    named = f" {PurePath(path).name}" if path else ""
    load = (
        f"the replayed {FORMAT_NAMES.get(replay['format'], replay['format'])}-format request "
        f"trace{named} ({replay['requests']} requests)"
        if replay
        else f"synthetic load ({n_req} requests)"
    )
    out = [
        f"Seed {seed}: {_gpus(sc['gpus'])}, {sc['duration_s']:.0f} s of {load}; every policy "
        "saw the same requests."
    ]
    if not runs or ref is None:
        return out
    measures: list[tuple[str, Any, bool, Any]] = [
        ("the smallest mean TTFT increase", lambda r: r["ttft_increase"]["mean"], True, pct),
        ("the smallest mean TPOT increase", lambda r: r["tpot_increase"]["mean"], True, pct),
        (
            "the fewest preemptions per request",
            lambda r: r["preemptions_per_request"],
            True,
            lambda v: f"{v:.2f}",
        ),
        (
            "the most offline tokens/s",
            lambda r: r["offline_tokens_per_second"],
            False,
            lambda v: f"{v:,.0f}",
        ),
    ]
    for what, key, lower, fmt in measures:
        margin = (lambda v: f"{100 * v:.2f} points") if fmt is pct else None
        out.append(_lead({n: float(key(r)) for n, r in runs.items()}, what, lower, fmt, margin))
    g, it = runs.get("gleaner"), runs.get("iteration")
    if g is not None and it is not None:
        ratio = (
            it["offline_tokens_per_second"] / g["offline_tokens_per_second"] - 1.0
            if (g["offline_tokens_per_second"] > 0)
            else 0.0
        )
        out.append(
            "Comparison with iteration-level sharing: Gleaner's mean TTFT increase "
            f"{pct(g['ttft_increase']['mean'])} against {pct(it['ttft_increase']['mean'])}, "
            f"mean TPOT increase {pct(g['tpot_increase']['mean'])} against "
            f"{pct(it['tpot_increase']['mean'])}; iteration-level makes "
            f"{100 * abs(ratio):.1f}% {'more' if ratio >= 0 else 'fewer'} offline tokens/s."
        )
    be = node.get("breakeven")
    if be is not None:
        default = be["default_disable_median_ms"]
        for metric, label in (("ttft", "mean TTFT"), ("tpot", "mean TPOT")):
            at = be[f"{metric}_ms"]
            if at is None:
                out.append(
                    f"Break-even ({label}): Gleaner stays ahead of iteration-level sharing at "
                    f"every channel-disable latency up to {be['limit_ms']:g} ms (median)."
                )
            elif at <= default:
                out.append(
                    f"Break-even ({label}): Gleaner is already behind iteration-level sharing "
                    f"at the default channel-disable latency ({default:g} ms median)."
                )
            else:
                out.append(
                    f"Break-even ({label}): Gleaner stops beating iteration-level sharing when "
                    f"the channel disable takes {at:.2g} ms (median; the default is "
                    f"{default:g} ms, {at / default:.0f}× less)."
                )
    return out


def _lead(values: dict[str, float], what: str, lower: bool, fmt: Any, margin: Any = None) -> str:
    """``winner has <what> (v), ahead of runner-up (v2) by <margin>`` (ties named as ties)."""
    ranked = sorted(values.items(), key=lambda x: x[1], reverse=not lower)
    (w, wv), rest = ranked[0], ranked[1:]
    # Equal as printed is a tie: "0.11, ahead of 0.11 by 0.01" reads as a contradiction.
    ties = [n for n, v in rest if abs(v - wv) <= 1e-9 or fmt(v) == fmt(wv)]
    if ties:
        return f"{', '.join([w, *ties])} tie for {what} ({fmt(wv)})."
    if not rest:
        return f"{w} has {what} ({fmt(wv)}); no other policy to compare."
    n2, v2 = rest[0]
    gap = (margin or fmt)(abs(v2 - wv))
    return f"{w} has {what} ({fmt(wv)}), ahead of {n2} ({fmt(v2)}) by {gap}."


def cluster_verdict(cluster: dict[str, Any], seed: int) -> list[str]:
    """Sentences of the cluster-level verdict: the setting, the winner of each measure (GPUs
    saved, SLA windows met, evictions, prediction error) among the policies that ran jobs,
    and Gleaner against first-fit. Reads ``results["cluster"]`` of ``run_scenario``."""
    pols = cluster["policies"]
    cfg = cluster.get("config", {})
    hours = float(cfg.get("duration_h", 0.0))
    trace = cluster.get("trace")
    load = f"online load replayed from {PurePath(trace).name}" if trace else "synthetic online load"
    jobs = max((int(m.get("jobs", 0)) for m in pols.values()), default=0)
    out = [
        f"Seed {seed}: {_gpus(int(cluster['gpus']))} in {cluster['nodes']} nodes, "
        f"{hours:g} h of {load}, {jobs} OfflineJobs; every policy saw the same load and jobs."
    ]
    ran = {n: m for n, m in pols.items() if m.get("sla_windows", 0) > 0}
    idle = [n for n in pols if n not in ran]
    if idle:
        out.append(f"{', '.join(idle)} ran no job: it has no SLA windows to judge (shown as –).")
    if not ran:
        return out
    out.append(
        _lead(
            {n: m["gpus_saved"] for n, m in ran.items()},
            "the most GPUs saved",
            False,
            lambda v: f"{v:.2f}",
        )
    )
    out.append(
        _lead(
            {n: m["sla_attainment"] for n, m in ran.items()},
            "the most SLA windows met",
            False,
            lambda v: f"{100 * v:.1f}%",
            lambda v: f"{100 * v:.1f} points",
        )
    )
    out.append(
        _lead(
            {n: float(m["evictions"]) for n, m in ran.items()},
            "the fewest evictions",
            True,
            lambda v: f"{v:.0f}",
        )
    )
    modelled = {
        n: m["prediction_error"]["mean_abs"]
        for n, m in ran.items()
        if m["prediction_error"]["placements"]
    }
    if modelled:
        out.append(
            _lead(
                modelled,
                "the smallest prediction error",
                True,
                lambda v: f"{100 * v:.1f} points",
                lambda v: f"{100 * v:.1f} points",
            )
        )
    g, ff = ran.get("gleaner"), ran.get("first-fit")
    if g is not None and ff is not None:
        out.append(
            "Comparison with first-fit (no model, no SLA check): Gleaner saves "
            f"{g['gpus_saved']:.1f} GPUs against {ff['gpus_saved']:.1f}, meets "
            f"{100 * g['sla_attainment']:.1f}% of SLA windows against "
            f"{100 * ff['sla_attainment']:.1f}%, with {_count(g['evictions'], 'eviction')} against "
            f"{ff['evictions']}."
        )
    return out
