"""Benchmark the scheduler (targets and results in docs/benchmarks.md).

One scheduling cycle places 1,000 pending jobs (1/2/4/8 GPUs: 50/25/15/10%, SLAs 0.2-0.9,
six model profiles, 15% with a gpuSelector) onto synthetic clusters of 2,500, 5,000 and
10,000 GPUs (8-GPU nodes running TP-8/4/2/1 online services, varying load and memory;
``gleaner.testing.scheduling``). The time covers the whole cycle: building the cluster
index (compute factors, pair scores, alignment graphs, aligned-set tables, the fleet
memory index) and placing or explaining every job.

Targets: < 2 s at 10,000 GPUs on one core, and time growing no worse than linearly in
GPUs: t(10,000) / t(2,500) <= 4. The process is pinned to one CPU; the reported time is
the process CPU time (equal to wall time on an idle core; on a shared machine the wall
time is also printed, and the best of the repeats is taken).

Run: ``python -m bench scheduler`` (``--quick``: one repeat).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from gleaner.scheduler import ClusterState, SchedulerConfig, schedule  # noqa: E402
from gleaner.testing.scheduling import synthetic_cluster, synthetic_jobs  # noqa: E402

JOBS = 1000
SIZES_GPUS = (2_500, 5_000, 10_000)
GPUS_PER_NODE = 8
SECONDS_TARGET = 2.0
RATIO_TARGET = 4.0


@dataclass(frozen=True)
class Run:
    gpus: int
    cpu_seconds: float
    wall_seconds: float
    placed: int
    unschedulable: int


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def measure(gpus: int, repeats: int) -> Run:
    nodes = synthetic_cluster(gpus // GPUS_PER_NODE, GPUS_PER_NODE, seed=1)
    jobs = synthetic_jobs(JOBS, seed=1)
    cluster = ClusterState(nodes)
    config = SchedulerConfig()
    best: Run | None = None
    for _ in range(repeats):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = schedule(jobs, cluster, config)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        run = Run(gpus, cpu, wall, len(result.placements), len(result.unschedulable))
        if best is None or run.cpu_seconds < best.cpu_seconds:
            best = run
    assert best is not None
    return best


def main(argv: list[str]) -> int:
    repeats = 1 if "--quick" in argv else 3
    pinned = _pin_one_core()
    print(f"scheduler: {JOBS} jobs per cycle, best of {repeats}, {pinned}")
    runs = [measure(g, repeats) for g in SIZES_GPUS]
    print(f"{'GPUs':>7} {'nodes':>6} {'placed':>7} {'unsched':>8} {'cpu s':>7} {'wall s':>7}")
    for r in runs:
        print(
            f"{r.gpus:>7} {r.gpus // GPUS_PER_NODE:>6} {r.placed:>7} {r.unschedulable:>8} "
            f"{r.cpu_seconds:>7.3f} {r.wall_seconds:>7.3f}"
        )
    largest, smallest = runs[-1], runs[0]
    ratio = largest.cpu_seconds / smallest.cpu_seconds
    ok_time = largest.cpu_seconds < SECONDS_TARGET
    ok_ratio = ratio <= RATIO_TARGET
    print(
        f"10,000 GPUs: {largest.cpu_seconds:.3f} s (target < {SECONDS_TARGET} s): "
        f"{'ok' if ok_time else 'MISSED'}"
    )
    print(
        f"ratio 2,500 -> 10,000 GPUs: {ratio:.2f}x (target <= {RATIO_TARGET}x, linear = 4x): "
        f"{'ok' if ok_ratio else 'MISSED'}"
    )
    return 0 if ok_time and ok_ratio else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
