"""How each cost term moves the node-level results, and where Gleaner stops winning.

Contract.

- :func:`sensitivity` re-runs a node scenario's ``online-only`` and ``gleaner`` runs with one
  cost term at a time switched off, at its default, and multiplied by ``factor`` (plus one run
  with every term off), and returns one row per (term, level): Gleaner's ΔTTFT and ΔTPOT
  (mean, over the same online-only reference) and offline tokens/s. Same seed, same requests:
  only the term moves. ``gleaner simulate --sensitivity`` prints it; docs/simulator.md holds
  the table of the default scenario.
- :func:`breakeven` finds the channel-disable latency (median of ``costs.disable``) at which
  Gleaner's mean ΔTTFT, and separately its mean ΔTPOT, reach the ``iteration`` baseline's
  (kernel-boundary preemption, which does not depend on that latency): a log-spaced search up
  to ``limit_ms``, then bisection. ``None`` for a metric means Gleaner still wins at the limit.

Pure given the scenario and the seed (every run is ``gleaner.simulator.node.run_node``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gleaner.simulator.costs import CostModel
from gleaner.simulator.node import NodeScenario, RunSpec, run_node

Adjust = Callable[[CostModel, float], CostModel]


def _scale_vmm(c: CostModel, f: float) -> CostModel:
    v = c.vmm
    vmm = v.model_copy(
        update={"unmap_us": v.unmap_us * f, "release_us": v.release_us * f, "map_us": v.map_us * f}
    )
    return c.model_copy(update={"vmm": vmm})


TERMS: dict[str, Adjust] = {
    "channel disable": lambda c, f: c.model_copy(update={"disable": c.disable.scaled(f)}),
    "channel re-enable": lambda c, f: c.model_copy(update={"enable": c.enable.scaled(f)}),
    "in-flight kernel": lambda c, f: c.model_copy(
        update={"inflight": c.inflight.model_copy(update={"save_ms": c.inflight.save_ms * f})}
    ),
    "resume warm-up": lambda c, f: c.model_copy(
        update={"resume_warmup_ms": c.resume_warmup_ms * f}
    ),
    "cache/TLB pollution": lambda c, f: c.model_copy(
        update={
            "pollution_ms": c.pollution_ms * f,
            "pollution_fraction": c.pollution_fraction * f,
        }
    ),
    "VMM per 2 MiB page": _scale_vmm,
    "KV recompute": lambda c, f: c.model_copy(update={"recompute_scale": c.recompute_scale * f}),
}
"""Each cost term and how to multiply it (0 switches it off)."""


def all_off(c: CostModel) -> CostModel:
    """The cost model with every term switched off."""
    for adjust in TERMS.values():
        c = adjust(c, 0.0)
    return c


_REF = RunSpec(name="online-only", compute="online-only", memory="none")
_GATE = RunSpec(name="gleaner", compute="gleaner", memory="gleaner")
_ITER = RunSpec(name="iteration", compute="iteration", memory="gleaner")


def _with(scenario: NodeScenario, costs: CostModel, runs: list[RunSpec]) -> NodeScenario:
    return scenario.model_copy(update={"costs": costs, "runs": runs})


def _row(term: str, level: str, res: dict[str, Any]) -> dict[str, Any]:
    g = res["runs"]["gleaner"]
    return {
        "term": term,
        "level": level,
        "ttft_increase": g["ttft_increase"]["mean"],
        "tpot_increase": g["tpot_increase"]["mean"],
        "offline_tokens_per_second": g["offline_tokens_per_second"],
        "online_cost_s": g["online_cost_s"],
        "offline_cost_s": g["offline_cost_s"],
    }


def sensitivity(
    scenario: NodeScenario,
    seed: int,
    factor: float = 4.0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows of the sensitivity table (see the module docstring)."""
    runs = [_REF, _GATE]
    base = scenario.costs
    rows = [_row("(none)", "all terms off", run_node(_with(scenario, all_off(base), runs), seed))]
    rows.append(_row("(all)", "defaults", run_node(_with(scenario, base, runs), seed)))
    for term, adjust in TERMS.items():
        if progress is not None:
            progress(term)
        for f, level in ((0.0, "off"), (factor, f"×{factor:g}")):
            res = run_node(_with(scenario, adjust(base, f), runs), seed)
            rows.append(_row(term, level, res))
    return rows


def breakeven(
    scenario: NodeScenario,
    seed: int,
    limit_ms: float = 100.0,
    steps: int = 5,
) -> dict[str, Any]:
    """The disable latency at which Gleaner stops beating ``iteration`` (module docstring)."""
    base = run_node(_with(scenario, scenario.costs, [_REF, _ITER, _GATE]), seed)
    ref, it = base["runs"]["online-only"], base["runs"]["iteration"]
    goal = {"ttft": it["ttft_increase"]["mean"], "tpot": it["tpot_increase"]["mean"]}
    dist = scenario.costs.disable
    start = dist.median_ms if dist.median_ms > 0 else 0.01

    def gleaner_at(median_ms: float) -> dict[str, float]:
        costs = scenario.costs.model_copy(update={"disable": dist.scaled(median_ms / start)})
        if dist.median_ms <= 0:
            costs = scenario.costs.model_copy(
                update={"disable": dist.model_copy(update={"median_ms": median_ms})}
            )
        g = run_node(_with(scenario, costs, [_GATE]), seed)["runs"]["gleaner"]
        return {
            k: g[f"{k}_s"]["mean"] / ref[f"{k}_s"]["mean"] - 1.0 if ref[f"{k}_s"]["mean"] else 0.0
            for k in ("ttft", "tpot")
        }

    seen: dict[float, dict[str, float]] = {
        start: {
            "ttft": base["runs"]["gleaner"]["ttft_increase"]["mean"],
            "tpot": base["runs"]["gleaner"]["tpot_increase"]["mean"],
        }
    }
    out: dict[str, Any] = {
        "iteration_ttft_increase": goal["ttft"],
        "iteration_tpot_increase": goal["tpot"],
        "default_disable_median_ms": dist.median_ms,
        "limit_ms": limit_ms,
    }
    for metric in ("ttft", "tpot"):
        lo = start
        if seen[lo][metric] >= goal[metric]:
            out[f"{metric}_ms"] = lo
            continue
        hi = None
        d = lo
        while d < limit_ms:
            d = min(limit_ms, d * 4)
            if d not in seen:
                seen[d] = gleaner_at(d)
            if seen[d][metric] >= goal[metric]:
                hi = d
                break
            lo = d
        if hi is None:
            out[f"{metric}_ms"] = None
            continue
        for _ in range(steps):
            mid = math.sqrt(lo * hi)
            seen[mid] = seen.get(mid) or gleaner_at(mid)
            if seen[mid][metric] >= goal[metric]:
                hi = mid
            else:
                lo = mid
        out[f"{metric}_ms"] = hi
    out["curve"] = [
        {"disable_median_ms": d, "ttft_increase": v["ttft"], "tpot_increase": v["tpot"]}
        for d, v in sorted(seen.items())
    ]
    return out
