"""Benchmark the performance model (targets and results in docs/benchmarks.md).

1. Summarize one day of 1-second samples of one 8-GPU node (691,200 rows, the trace file
   trace format) with ``summarize_samples``: target < 2 s and < 500 MB peak (tracemalloc,
   in a second run, so tracing does not slow the timed one). Two memory patterns: a
   realistic one (online memory moves in steps, GPUs of a tensor-parallel service move
   together) and a worst case (independent noise on every GPU, which forces the sketch
   to coarsen to stay within 4096 states).
2. Predict one single-GPU job against 10,000 GPU summaries (1,250 nodes x 8 GPUs):
   ``GpuFleet.throughput_fractions`` plus the SLA test and the best GPU, target < 50 ms on
   one core (median of repeats). Building the fleet index is reported separately (done
   once per trace refresh, not per job). For reference, a 2-GPU job over every GPU pair
   of all nodes with ``subset_factors``.

Run: ``python -m bench perfmodel`` (add ``--quick`` for a smaller smoke run).
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import pandas as pd

from gleaner.perfmodel import (
    GpuFleet,
    JobProfile,
    NodeSummary,
    subset_factors,
    summarize_samples,
)

SUMMARY_SECONDS_TARGET = 2.0
SUMMARY_MB_TARGET = 500.0
PREDICT_MS_TARGET = 50.0


def day_frame(seconds: int, gpus: int, pattern: str, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(seconds, dtype=np.float64) + 1_700_000_000.0
    # Online busy: bursts shared by the GPUs of one service, some per-GPU jitter.
    shared = (rng.random(seconds) < 0.35).astype(np.float64)
    busy = np.where(rng.random((seconds, gpus)) < 0.95, shared[:, None], rng.random((seconds, 1)))
    if pattern == "realistic":
        # Harvestable memory changes every ~minute (MIAD reservation steps), together.
        steps = np.repeat(rng.normal(0, 1.5, seconds // 60 + 1), 60)[:seconds]
        base = np.clip(30 + np.cumsum(steps) * 0.2, 4, 70)
        free = base[:, None] + rng.choice([0.0, 0.5, 1.0], size=(1, gpus))
    else:
        free = rng.uniform(0, 70, (seconds, gpus))
    return pd.DataFrame(
        {
            "timestamp": np.repeat(t, gpus),
            "node": "node-0",
            "gpu": np.tile(np.arange(gpus), seconds),
            "online_busy": busy.ravel(),
            "free_memory_gib": free.ravel(),
            "offline_enabled": 1.0 - busy.ravel(),
        }
    )


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def peak_mb(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def fleet_nodes(n_nodes: int, gpus: int, seed: int = 1) -> list[NodeSummary]:
    rng = np.random.default_rng(seed)
    nodes = []
    window = 3600.0
    for i in range(n_nodes):
        busy = rng.uniform(0.05, 0.9, gpus) * window
        overlap = np.minimum.outer(busy, busy) * rng.uniform(0.8, 1.0)
        union = np.maximum.outer(busy, busy)
        level = rng.uniform(5, 60)
        mem = np.clip(level + rng.normal(0, 3, (240, gpus)), 0, 80)
        nodes.append(
            NodeSummary.from_totals(
                f"node-{i}",
                list(range(gpus)),
                window,
                busy,
                window - busy,
                overlap,
                union,
                mem,
                15.0,
            )
        )
    return nodes


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    seconds = 3600 if quick else 86400
    n_nodes = 125 if quick else 1250
    rows: list[tuple[str, str, str, str]] = []
    ok = True

    for pattern in ("realistic", "worst-case"):
        frame = day_frame(seconds, 8, pattern)
        elapsed, result = timed(lambda frame=frame: summarize_samples(frame), 3)  # type: ignore[misc]
        summary = result["node-0"]  # type: ignore[index]
        mb = peak_mb(lambda frame=frame: summarize_samples(frame))  # type: ignore[misc]
        met = elapsed < SUMMARY_SECONDS_TARGET and mb < SUMMARY_MB_TARGET
        ok &= met
        rows.append(
            (
                f"summarize {seconds:,} s x 8 GPUs ({pattern})",
                f"{elapsed:.3f} s, peak {mb:.0f} MB",
                f"< {SUMMARY_SECONDS_TARGET:g} s, < {SUMMARY_MB_TARGET:g} MB",
                f"{'ok' if met else 'MISSED'}; {summary.memory.n_states} states, "
                f"step {summary.memory.step_gib:g} GiB",
            )
        )

    nodes = fleet_nodes(n_nodes, 8)
    build, fleet_obj = timed(lambda: GpuFleet.from_summaries(nodes), 1)
    fleet: GpuFleet = fleet_obj  # type: ignore[assignment]
    profile = JobProfile(1000.0, 24.0, (8.0, 16.0, 24.0), (300.0, 700.0, 1000.0), 5.0)

    def predict_all() -> int:
        fractions = fleet.throughput_fractions(profile)
        feasible = fractions >= 0.5
        return int(np.argmax(np.where(feasible, fractions, -1.0)))

    predict_s, _ = timed(predict_all, 21)
    met = predict_s * 1000 < PREDICT_MS_TARGET
    ok &= met
    rows.append(
        (
            f"predict 1-GPU job vs {fleet.size:,} GPUs",
            f"{predict_s * 1000:.2f} ms",
            f"< {PREDICT_MS_TARGET:g} ms",
            f"{'ok' if met else 'MISSED'}; {fleet.memory_values.size:,} marginal values",
        )
    )
    rows.append((f"build GpuFleet of {fleet.size:,} GPUs (once)", f"{build:.3f} s", "-", ""))
    pairs = np.array(list(itertools.combinations(range(8), 2)))
    pair_s, _ = timed(lambda: [subset_factors(profile, n, pairs) for n in nodes], 3)
    rows.append(
        (
            f"predict 2-GPU job vs {len(nodes) * len(pairs):,} GPU pairs",
            f"{pair_s * 1000:.1f} ms",
            "-",
            "subset_factors per node",
        )
    )

    width = [max(len(r[i]) for r in rows) for i in range(4)]
    header = ("measurement", "result", "target", "note")
    width = [max(w, len(h)) for w, h in zip(width, header, strict=True)]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, width, strict=True)))
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"(python {sys.version.split()[0]}, numpy {np.__version__}, OMP_NUM_THREADS={threads})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
