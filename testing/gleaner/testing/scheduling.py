"""Synthetic clusters and job queues for scheduler tests, benchmarks and demos.

Contract. Everything is built through the performance model's own constructors
(``NodeSummary.from_totals``), so the scheduler sees exactly what a real trace source
would give it. :func:`synthetic_node` makes one node whose GPUs are partitioned into
*online groups* (the GPUs one tensor-parallel online replica spans): GPUs of a group are
busy at the same time (pair overlap / union = 1), GPUs of different groups never
overlap (score 0). Busy fraction and harvestable memory are set per GPU.
:func:`synthetic_cluster` and :func:`synthetic_jobs` draw reproducible fleets and queues
from a seed (the benchmark's shapes: TP-8, TP-4, TP-2 and TP-1 online services; jobs of
1, 2, 4 and 8 GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.profile import JobProfile
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.scheduler.job import JobRequest

DEFAULT_PRODUCT = "NVIDIA H100 80GB HBM3"
FIXED_END = datetime(2026, 1, 1, tzinfo=UTC)
"""Default end of synthetic windows (tests compare against it)."""


def synthetic_node(
    name: str,
    busy: Sequence[float],
    groups: Sequence[Sequence[int]] = (),
    free_gib: float | Sequence[float] | Sequence[Sequence[float]] | npt.ArrayLike = 60.0,
    *,
    window_seconds: float = 3600.0,
    product: str | Sequence[str] = DEFAULT_PRODUCT,
    memory_gib: float = 80.0,
    labels: dict[str, str] | None = None,
    window_end: datetime = FIXED_END,
) -> NodeSummary:
    """One node: ``busy[i]`` online-busy fraction of GPU i; ``groups`` aligned GPU groups.

    ``free_gib`` is one value for all GPUs, one per GPU, or a [T, G] series of samples.
    GPUs in no group are aligned with nobody.
    """
    g = len(busy)
    busy_s = np.asarray(busy, dtype=np.float64) * window_seconds
    group_of = [-1] * g
    for gi, grp in enumerate(groups):
        for i in grp:
            group_of[i] = gi
    overlap = np.zeros((g, g))
    union = np.zeros((g, g))
    for a in range(g):
        for b in range(g):
            if a == b or (group_of[a] >= 0 and group_of[a] == group_of[b]):
                overlap[a, b] = min(busy_s[a], busy_s[b])
                union[a, b] = max(busy_s[a], busy_s[b])
            else:
                overlap[a, b] = 0.0
                union[a, b] = min(window_seconds, busy_s[a] + busy_s[b])
    free = np.asarray(free_gib, dtype=np.float64)
    if free.ndim == 0:
        free = np.full((1, g), float(free))
    elif free.ndim == 1:
        free = free.reshape(1, g)
    products = [product] * g if isinstance(product, str) else list(product)
    specs = [
        GpuSpec(index=i, uuid=f"GPU-{name}-{i}", product=products[i], memory_gib=memory_gib)
        for i in range(g)
    ]
    return NodeSummary.from_totals(
        name,
        specs,
        window_seconds,
        busy_s,
        None,
        overlap,
        union,
        free,
        window_seconds / free.shape[0],
        labels=labels,
        window_end=window_end,
    )


PROFILES: tuple[JobProfile, ...] = tuple(
    JobProfile(
        standalone_tokens_per_second=tps,
        required_memory_gib=req,
        curve_memory_gib=(req * 0.3, req * 0.6, req),
        curve_tokens_per_second=(tps * 0.3, tps * 0.7, tps),
        memory_deficit_coefficient=tps / req * 0.2,
    )
    for tps, req in ((2400, 20), (1800, 30), (1200, 40), (900, 50), (3000, 16), (600, 60))
)
"""A handful of distinct model profiles (real queues run a few models many times)."""


def synthetic_cluster(
    n_nodes: int, gpus_per_node: int = 8, seed: int = 0, samples: int = 24
) -> dict[str, NodeSummary]:
    """``n_nodes`` nodes with a mix of TP-8/4/2/1 online services and varying load."""
    rng = np.random.default_rng(seed)
    g = gpus_per_node
    shapes = [s for s in (8, 4, 2, 1) if s <= g]
    nodes: dict[str, NodeSummary] = {}
    for i in range(n_nodes):
        tp = int(rng.choice(shapes, p=_shape_weights(len(shapes))))
        groups = [list(range(s, min(s + tp, g))) for s in range(0, g, tp)]
        busy = np.zeros(g)
        free = np.zeros((samples, g))
        for grp in groups:
            level = rng.uniform(0.05, 0.75)
            base = rng.uniform(8.0, 64.0)
            wave = base + rng.normal(0.0, 6.0, size=samples)
            for j in grp:
                busy[j] = level
                free[:, j] = np.clip(wave - rng.uniform(0.0, 1.0), 0.0, 78.0)
        product = DEFAULT_PRODUCT if i % 4 else "NVIDIA A100-SXM4-80GB"
        name = f"node-{i:05d}"
        nodes[name] = synthetic_node(
            name,
            busy.tolist(),
            [grp for grp in groups if len(grp) > 1],
            free,
            product=product,
            labels={"gleaner.dev/pool": "a" if i % 2 else "b"},
        )
    return nodes


def _shape_weights(n: int) -> list[float]:
    weights = [0.3, 0.25, 0.25, 0.2][:n]
    total = sum(weights)
    return [w / total for w in weights]


def synthetic_jobs(n_jobs: int, seed: int = 0) -> list[JobRequest]:
    """A queue of ``n_jobs``: 1/2/4/8 GPUs (50/25/15/10%), SLA 0.2-0.9, a few selectors."""
    rng = np.random.default_rng(seed + 1)
    sizes = rng.choice([1, 2, 4, 8], size=n_jobs, p=[0.5, 0.25, 0.15, 0.1])
    jobs = []
    for i in range(n_jobs):
        products: tuple[str, ...] = ()
        selector: dict[str, str] = {}
        draw = rng.uniform()
        if draw < 0.1:
            products = (DEFAULT_PRODUCT,)
        elif draw < 0.15:
            selector = {"gleaner.dev/pool": "a"}
        jobs.append(
            JobRequest(
                key=f"bench/job-{i:05d}",
                profile=PROFILES[int(rng.integers(len(PROFILES)))],
                gpus=int(sizes[i]),
                sla=float(np.round(rng.uniform(0.2, 0.9), 2)),
                priority=int(rng.integers(0, 3)),
                node_selector=selector,
                products=products,
                arrival=float(i),
            )
        )
    return jobs


def simple_profile(
    standalone: float = 1000.0, required_gib: float = 40.0, min_gib: float = 10.0
) -> JobProfile:
    """A profile at full speed with >= ``required_gib`` free, 20% speed at ``min_gib``."""
    return JobProfile(
        standalone_tokens_per_second=standalone,
        required_memory_gib=required_gib,
        curve_memory_gib=(min_gib, required_gib),
        curve_tokens_per_second=(standalone * 0.2, standalone),
        memory_deficit_coefficient=0.0,
    )
