"""Benchmark ``gleaner profile``'s accuracy against its cost (docs/profiling.md, "How long a
profile takes, for which accuracy").

The engine is the fake ``vllm bench throughput`` (``gleaner.testing.vllm_bench``:
Llama-3.1-8B on an H100 per the engine model, 512/128-token prompts, ``max-num-seqs`` 256),
profiled over [0.5, 24] GiB of KV cache with several run counts and prompt counts. For each,
the worst gap between the fitted curve and the fake's steady-state curve (runs of 4,000
prompts) over 40 budgets, as a share of standalone throughput, and the engine seconds the
runs take on the virtual clock. Target: the default (6 + 2 runs of 1,000 prompts) within 8%.

Run: ``python -m bench profile`` (``--quick``: the default row only).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gleaner.perfmodel.engine import LLAMA31_8B_H100 as ENGINE
from gleaner.perfmodel.profiling import Measurement, fit_profile, measure
from gleaner.testing.vllm_bench import run_batch

PROMPT, OUTPUT, SEQS = 512, 128, 256
KV_MIN, KV_MAX = 0.5, 24.0
DEFAULT = (6, 2, 1000)
ERROR_TARGET = 0.08


def runner(num_prompts: int) -> Callable[[float], Measurement]:
    def run(kv: float) -> Measurement:
        r = run_batch(ENGINE, lambda t: kv, PROMPT, OUTPUT, num_prompts, SEQS)
        return Measurement(kv, ENGINE.weights_gib + kv, r.output_tokens, r.seconds)

    return run


def main(argv: list[str]) -> int:
    rows = (
        [DEFAULT]
        if "--quick" in argv
        else [
            (pts, refine, n)
            for n in (300, 1000, 2000)
            for pts, refine in ((4, 0), (4, 2), (6, 2), (8, 2), (10, 4))
        ]
    )
    grid = np.linspace(KV_MIN, KV_MAX, 40)
    steady = np.array([runner(4000)(float(kv)).tokens_per_second for kv in grid])
    print("| runs (initial + refined) | prompts per run | worst error | engine seconds |")
    print("|---|---|---|---|")
    failed = False
    for pts, refine, n in rows:
        rep = fit_profile(measure(runner(n), KV_MIN, KV_MAX, pts, refine, 0.25))
        fitted = rep.profile.throughput_at(ENGINE.weights_gib + grid)
        error = float(np.max(np.abs(fitted - steady))) / float(steady.max())
        seconds = sum(m.seconds for m in rep.measurements)
        print(f"| {pts} + {refine} | {n} | {error:.1%} | {seconds:.0f} |")
        if (pts, refine, n) == DEFAULT and error > ERROR_TARGET:
            failed = True
    print(f"target: default {DEFAULT[0]} + {DEFAULT[1]} runs within {ERROR_TARGET:.0%}")
    return 1 if failed else 0
