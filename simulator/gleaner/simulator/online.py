"""The simulated cluster's online load, and what its agents would report about it.

Contract. :class:`OnlineCluster` holds per-GPU busy fractions and harvestable memory as
[GPUs, steps] arrays (numpy) plus the service layout (which GPUs serve one service and
its alignment ρ). :func:`generate_online` draws it from a :class:`ClusterScenario` (the
model in ``gleaner.simulator.cluster``'s docstring and docs/simulator.md: request rates
through the engine model's ``online_load``; deterministic for a given generator),
:func:`online_from_trace` reads it from a trace frame.
:func:`joint_idle` is the exact per-step fraction of time a GPU set is all idle (the
ground truth's compute part); :func:`node_summary` is the ``NodeSummary`` a node's agent
would report for a range of steps, times measured from ``EPOCH`` (simulated time 0).
Pure: arrays in, arrays and summaries out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from gleaner.api.nodetrace import gpu_uuid
from gleaner.perfmodel import DEFAULT_STEP_GIB, GpuSpec, MemoryHistogram, NodeSummary
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.latency import MODELS

FloatArray = npt.NDArray[np.float64]
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""Simulated time 0 (the end of the history, the start of the run)."""
EPOCH_SECONDS = EPOCH.timestamp()
"""The simulated clock starts here: ``EPOCH_SECONDS + t`` is simulated time t on the
scheduler's clock (epoch seconds, as on a live cluster)."""

GATE_EFFICIENCY_BY_BUSY: tuple[tuple[float, float], ...] = (
    (0.153, 0.990),
    (0.224, 0.984),
    (0.328, 0.973),
    (0.445, 0.956),
    (0.601, 0.921),
    (0.677, 0.893),
    (0.794, 0.809),
    (0.817, 0.793),
    (0.891, 0.656),
)
"""(online busy fraction, gate efficiency η) of the node-level simulation's ``gleaner`` run
on the default scenario's node (seed 7, 1200 s) at 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.25, 1.5
and 2.0 requests per second: the busier the online engine, the more of its idle time the
gate loses around arrivals (docs/simulator.md, "Cluster level": gate efficiency and load)."""
REFERENCE_BUSY = 0.328
"""The busy fraction of the default node-level run (0.3 requests per second)."""


@dataclass(frozen=True)
class GateEfficiency:
    """The ground truth's gate efficiency η: the share of a GPU's online-idle time the
    compute gate lets offline work run, as a function of that GPU's online busy fraction.

    ``at_reference`` is η measured at ``reference_busy`` (the node level's run, or the
    runner's default); with ``by_load`` the curve of :data:`GATE_EFFICIENCY_BY_BUSY`,
    scaled to pass through that point, gives η at other loads (at most 1), else η is
    ``at_reference`` at every load. Ground truth only: the predictor sees η through the
    offline-enabled seconds the agents report of the past."""

    at_reference: float
    reference_busy: float = REFERENCE_BUSY
    by_load: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.at_reference <= 1.0:
            raise ValueError("at_reference must be in (0, 1]")

    def at(self, busy: npt.ArrayLike) -> FloatArray:
        """η per element of ``busy`` (online busy fractions)."""
        b = np.asarray(busy, dtype=np.float64)
        if not self.by_load:
            return np.full(b.shape, self.at_reference)
        xs = [x for x, _ in GATE_EFFICIENCY_BY_BUSY]
        ys = [y for _, y in GATE_EFFICIENCY_BY_BUSY]
        rel = np.interp(b, xs, ys) / float(np.interp(self.reference_busy, xs, ys))
        return np.asarray(np.minimum(1.0, self.at_reference * rel), dtype=np.float64)

    def enabled(self, busy: npt.ArrayLike) -> FloatArray:
        """The offline-enabled share per element of ``busy``: idle × η."""
        b = np.asarray(busy, dtype=np.float64)
        return np.asarray((1.0 - b) * self.at(b), dtype=np.float64)


def as_gate(gate_efficiency: float | GateEfficiency) -> GateEfficiency:
    """A constant η (a float) as a :class:`GateEfficiency`, or the given one."""
    if isinstance(gate_efficiency, GateEfficiency):
        return gate_efficiency
    return GateEfficiency(float(gate_efficiency), by_load=False)


@dataclass
class OnlineCluster:
    """Per-GPU busy fractions and harvestable memory, [GPUs, steps], plus service layout."""

    node_names: list[str]
    gpus_per_node: int
    busy: FloatArray
    free_gib: FloatArray
    service: npt.NDArray[np.int64]
    """[GPUs] service id of each GPU."""
    alignment: FloatArray
    """[services] ρ of each service."""
    service_gpus: list[int]
    step_s: float
    t0_step: int
    """Index of simulated time 0 (steps before it are history)."""
    requests_per_s: FloatArray | None = None
    """[GPUs, steps] requests/s of the engine each GPU serves, which the busy fractions and
    the KV cache come from (None: replayed from a trace)."""

    @property
    def n_gpus(self) -> int:
        return int(self.busy.shape[0])

    def rows(self, node: int) -> slice:
        return slice(node * self.gpus_per_node, (node + 1) * self.gpus_per_node)


def _ar1(rng: np.random.Generator, n: int, steps: int, sigma: float, corr: float) -> FloatArray:
    phi = math.exp(-1.0 / corr)
    eps = rng.normal(0.0, sigma * math.sqrt(1 - phi * phi), size=(n, steps))
    out = np.empty((n, steps))
    out[:, 0] = rng.normal(0.0, sigma, size=n)
    for t in range(1, steps):
        out[:, t] = phi * out[:, t - 1] + eps[:, t]
    return out


def generate_online(cfg: ClusterScenario, rng: np.random.Generator) -> OnlineCluster:
    """Online busy fractions and free memory for every GPU over history + duration."""
    g_node = cfg.gpus_per_node
    steps = round((cfg.history_h + cfg.duration_h) * 3600 / cfg.step_s)
    t0 = round(cfg.history_h * 3600 / cfg.step_s)
    kinds = [k for k in cfg.services if k.gpus <= g_node]
    weights = np.array([k.share / k.gpus for k in kinds])
    weights /= weights.sum()
    service: list[int] = []
    service_gpus: list[int] = []
    align: list[float] = []
    for _ in range(cfg.nodes):
        left = g_node
        while left > 0:
            fits = [i for i, k in enumerate(kinds) if k.gpus <= left]
            w = weights[fits] / weights[fits].sum()
            kind = kinds[fits[int(rng.choice(len(fits), p=w))]]
            sid = len(service_gpus)
            service_gpus.append(kind.gpus)
            lo, hi = kind.alignment
            align.append(float(rng.uniform(lo, hi)))
            service.extend([sid] * kind.gpus)
            left -= kind.gpus
    n_s = len(service_gpus)
    svc = np.array(service, dtype=np.int64)
    load = cfg.load
    hours = (np.arange(steps) - t0) * cfg.step_s / 3600.0
    peak = rng.uniform(*load.peak_requests_per_s, size=n_s)
    phase = rng.uniform(-load.phase_spread_h / 2, load.phase_spread_h / 2, size=n_s)
    amp = load.diurnal_amplitude
    # Peak around 14:00 local, trough at night.
    shape = (
        1.0 - amp / 2 + amp / 2 * np.sin(2 * np.pi * (hours[None, :] - 8.0 - phase[:, None]) / 24.0)
    )
    base = peak[:, None] * shape
    burst = np.ones((n_s, steps))
    total_h = steps * cfg.step_s / 3600.0
    for s in range(n_s):
        for _ in range(int(rng.poisson(load.bursts_per_day * total_h / 24.0))):
            start = int(rng.integers(0, steps))
            length = max(1, int(rng.uniform(*load.burst_minutes) * 60 / cfg.step_s))
            burst[s, start : start + length] *= rng.uniform(*load.burst_factor)
    noise = np.exp(_ar1(rng, n_s, steps, load.noise_sigma, load.noise_corr_steps))
    # Requests/s per engine: one engine per service (tensor parallel) or, behind a load
    # balancer (ρ < 1), one per GPU with its own share of the rate.
    rate = (base * burst * noise)[svc]
    rho = np.array(align)
    partial = rho[svc] < 1.0
    if partial.any() and load.gpu_noise_sigma > 0:
        extra = np.exp(
            _ar1(rng, int(partial.sum()), steps, load.gpu_noise_sigma, load.noise_corr_steps)
        )
        rate[partial] = rate[partial] * extra
    # Busy fraction and KV cache from the engine model (requests/s in, Little's law), its
    # resident memory (weights and runtime) scaled to the service's model size.
    engine = MODELS[cfg.model]
    fixed = engine.resident_gib * rng.uniform(*load.resident_scale, size=n_s)[svc]
    prompt = load.prompt_tokens * rng.uniform(*load.prompt_scale, size=n_s)[svc]
    busy, kv_tokens = engine.online_load(rate, prompt[:, None], load.output_tokens, load.max_seqs)
    free = np.clip(cfg.usable_gib - fixed[:, None] - engine.kv_gib(1.0) * kv_tokens, 0.0, None)
    names = [f"gpu-node-{i:04d}" for i in range(cfg.nodes)]
    return OnlineCluster(
        names, g_node, busy, free, svc, rho, service_gpus, cfg.step_s, t0, requests_per_s=rate
    )


def online_from_trace(frame: Any, history_h: float) -> OnlineCluster:
    """An :class:`OnlineCluster` from a trace frame (validated by the perfmodel).

    Each node's GPUs are treated as one aligned service (ρ = 1: the trace format's overlap
    rule). The first ``history_h`` hours (at most half the trace) are history.
    """
    nodes = sorted(str(n) for n in frame["node"].unique())
    times = np.sort(frame["timestamp"].unique())
    if times.size < 4:
        raise ValueError("trace: need at least 4 timestamps")
    step = float(np.median(np.diff(times)))
    g_node = int(frame["gpu"].max()) + 1
    n = len(nodes) * g_node
    busy = np.zeros((n, times.size))
    free = np.zeros((n, times.size))
    t_index = {float(t): i for i, t in enumerate(times)}
    node_index = {name: i for i, name in enumerate(nodes)}
    rows = frame["node"].astype(str).map(node_index).to_numpy() * g_node + frame[
        "gpu"
    ].to_numpy().astype(int)
    cols = frame["timestamp"].map(t_index).to_numpy()
    busy[rows, cols] = frame["online_busy"].to_numpy(dtype=float)
    free[rows, cols] = frame["free_memory_gib"].to_numpy(dtype=float)
    service = np.repeat(np.arange(len(nodes)), g_node).astype(np.int64)
    t0 = min(round(history_h * 3600 / step), times.size // 2)
    return OnlineCluster(
        nodes, g_node, busy, free, service, np.ones(len(nodes)), [g_node] * len(nodes), step, t0
    )


def joint_idle(online: OnlineCluster, rows: list[int], t: slice) -> FloatArray:
    """Per step, the fraction of time all GPUs ``rows`` are online-idle."""
    b = online.busy[rows, t]
    svc = online.service[rows]
    out = np.ones(b.shape[1])
    for s in np.unique(svc):
        part = b[svc == s]
        rho = float(online.alignment[s])
        aligned = 1.0 - part.max(axis=0)
        indep = np.prod(1.0 - part, axis=0)
        out *= rho * aligned + (1.0 - rho) * indep
    return out


def node_summary(
    online: OnlineCluster,
    node: int,
    start: int,
    end: int,
    gate_efficiency: float | GateEfficiency,
) -> NodeSummary:
    """The NodeSummary the node's agent would report for steps [start, end): offline-enabled
    seconds are what the gate enabled (idle × η at each step's load)."""
    r = online.rows(node)
    b = online.busy[r, start:end].T  # [T, G]
    g = b.shape[1]
    step = online.step_s
    svc = online.service[r]
    rho = np.where(svc[:, None] == svc[None, :], online.alignment[svc][:, None], 0.0)
    mins = np.minimum(b[:, :, None], b[:, None, :]).sum(axis=0)
    prods = np.einsum("ta,tb->ab", b, b)
    overlap = (rho * mins + (1.0 - rho) * prods) * step
    busy_s = b.sum(axis=0) * step
    union = busy_s[:, None] + busy_s[None, :] - overlap
    np.fill_diagonal(overlap, busy_s)
    np.fill_diagonal(union, busy_s)
    idle_s = as_gate(gate_efficiency).enabled(b).sum(axis=0) * step
    specs = tuple(
        GpuSpec(
            index=i,
            uuid=gpu_uuid(online.node_names[node], i),
            product="NVIDIA H100 80GB HBM3",
            memory_gib=80.0,
        )
        for i in range(g)
    )
    window_start = EPOCH + timedelta(seconds=(start - online.t0_step) * step)
    window_end = EPOCH + timedelta(seconds=(end - online.t0_step) * step)
    return NodeSummary(
        node=online.node_names[node],
        gpus=specs,
        window_seconds=(end - start) * step,
        online_busy_seconds=busy_s,
        offline_enabled_seconds=idle_s,
        pair_overlap_seconds=overlap,
        pair_union_seconds=union,
        memory=MemoryHistogram.from_samples(
            online.free_gib[r, start:end].T, step, DEFAULT_STEP_GIB
        ),
        last_report_time=window_end,
        window_start=window_start,
        window_end=window_end,
    )
