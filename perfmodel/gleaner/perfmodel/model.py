"""The performance model (docs/perfmodel.md, "The math"): three factors and their product.

For an offline job w on node N, GPU set G of size k:

    Thrput(w, N) / Thrput(w, max) = P_compute * P_memory * P_multi

- P_compute = offline-enabled seconds / window (without an agent: 1 - online-busy
  fraction), the minimum over G;
- P_memory = (E[Thrput_w(M)] - MAC_w * E[max(0, M_req - M)]) / Thrput_w(M_max), clipped
  to [0, 1], with M(t) = min over G of the GPUs' harvestable memory (the tightest GPU);
  expectations are time averages read from the joint memory sketch;
- P_multi = min over pairs in G of overlap / union busy seconds (1 for k = 1; a pair
  that was never busy scores 1, an unmeasured pair 0).

A k-GPU job is admissible only if every pair scores >= ``ModelConfig.min_pair_overlap``;
it is feasible iff the product >= its throughput SLA and every admission rule holds. Both
rules are decided, and worded, by ``gleaner.perfmodel.admission`` (the scheduler's filters
call the same functions); ``predict`` computes the factors and asks it for the verdict.
Everything here is pure: summaries in, numbers and reasons out. Malformed requests
(unknown GPU, duplicate GPUs, empty window, SLA outside (0, 1]) raise ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel import admission
from gleaner.perfmodel.profile import JobProfile
from gleaner.perfmodel.summary import NodeSummary

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

BASELINE_MODEL: Literal["valve"] = "valve"


@dataclass(frozen=True)
class ModelConfig:
    """Knobs of the performance model; the defaults are docs/perfmodel.md's ("The math")."""

    min_pair_overlap: float = 0.95
    """Admission: every GPU pair of a multi-GPU job needs overlap/union >= this."""
    model: Literal["valve"] = BASELINE_MODEL
    """Which model predicts; "valve" is the paper's baseline (the only one so far)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_pair_overlap <= 1.0:
            raise ValueError("min_pair_overlap must be within [0, 1]")


@dataclass(frozen=True)
class Prediction:
    """A job's predicted throughput on a GPU set, with every factor and the verdict."""

    job: str
    node: str
    gpus: tuple[int, ...]
    compute: float
    memory: float
    multi_gpu: float
    throughput_fraction: float
    """compute * memory * multi_gpu."""
    tokens_per_second: float
    """throughput_fraction * standalone tokens/s."""
    sla: float
    feasible: bool
    reasons: tuple[str, ...] = field(default=())
    """Human-readable: why it is (in)feasible, the limiting factor, failed rules."""

    def to_json(self) -> dict[str, Any]:
        """Exactly the ``gleaner predict`` JSON keys (docs/perfmodel.md), in that order."""
        return {
            "job": self.job,
            "node": self.node,
            "gpus": list(self.gpus),
            "compute": self.compute,
            "memory": self.memory,
            "multi_gpu": self.multi_gpu,
            "throughput_fraction": self.throughput_fraction,
            "tokens_per_second": self.tokens_per_second,
            "sla": self.sla,
            "feasible": self.feasible,
            "reasons": list(self.reasons),
        }


def _require_window(node: NodeSummary) -> None:
    if not node.window_seconds > 0:
        raise ValueError(f"node {node.node}: the trace window is empty (no samples)")


def compute_factors(node: NodeSummary) -> FloatArray:
    """P_compute of every GPU of ``node`` (position order), each within [0, 1]."""
    return node.compute_fractions()


def compute_factor(node: NodeSummary, gpus: Sequence[int]) -> float:
    """P_compute of GPU set ``gpus`` (indices): the minimum over the set."""
    pos = node.positions(gpus)
    if not pos:
        raise ValueError("a GPU set needs at least one GPU")
    return float(compute_factors(node)[pos].min())


def memory_factor(profile: JobProfile, node: NodeSummary, gpus: Sequence[int]) -> float:
    """P_memory of GPU set ``gpus`` with M(t) = min over the set (0 with no memory data)."""
    return memory_factor_at(profile, node, node.positions(gpus))


def memory_factor_at(profile: JobProfile, node: NodeSummary, positions: Sequence[int]) -> float:
    """``memory_factor`` of the GPUs at ``positions`` of the node (not checked here: the
    scheduler passes its own tables' positions)."""
    values, seconds = node.memory.tightest(positions)
    return profile.memory_factor_of(values, seconds)


def pair_scores(node: NodeSummary) -> FloatArray:
    """[G, G] overlap / union per pair: 1 where never busy, 0 where not measured."""
    ov = node.pair_overlap_seconds
    un = node.pair_union_seconds
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(un > 0, ov / np.where(un > 0, un, 1.0), 1.0)
    score = np.where(np.isnan(ov) | np.isnan(un), 0.0, score)
    return np.clip(np.asarray(score, dtype=np.float64), 0.0, 1.0)


def multi_gpu_factor(node: NodeSummary, gpus: Sequence[int]) -> float:
    """P_multi: minimum over pairs of ``gpus`` of overlap / union; 1 for one GPU."""
    pos = node.positions(gpus)
    if len(pos) < 2:
        return 1.0
    sub = pair_scores(node)[np.ix_(pos, pos)]
    return float(sub[np.triu_indices(len(pos), 1)].min())


def subset_factors(
    profile: JobProfile, node: NodeSummary, subsets: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(compute, memory, multi) for many GPU sets of one node at once.

    ``subsets`` is [n, k] of GPU *positions* (0..G-1), e.g. from itertools.combinations.
    """
    idx = np.asarray(subsets, dtype=np.int64)
    if idx.ndim != 2 or idx.shape[1] == 0:
        raise ValueError("subsets must be a [n, k] array of GPU positions, k >= 1")
    if idx.size and (idx.min() < 0 or idx.max() >= node.n_gpus):
        raise ValueError(f"node {node.node}: GPU positions must be within 0..{node.n_gpus - 1}")
    compute = compute_factors(node)[idx].min(axis=1)
    n, k = idx.shape
    memory = _subset_memory(profile, node, idx)
    if k < 2:
        multi = np.ones(n)
    else:
        scores = pair_scores(node)
        ia, ib = np.triu_indices(k, 1)
        multi = scores[idx[:, ia], idx[:, ib]].min(axis=1)
    return (
        np.asarray(compute, dtype=np.float64),
        np.asarray(memory, dtype=np.float64),
        np.asarray(multi, dtype=np.float64),
    )


def subset_memory(profile: JobProfile, node: NodeSummary, subsets: npt.ArrayLike) -> FloatArray:
    """P_memory of many GPU sets of one node at once (``subset_factors``' memory, alone).

    ``subsets`` is [n, k] of GPU *positions*; the positions are not checked here (the
    scheduler passes its own tables' positions).
    """
    return _subset_memory(profile, node, np.asarray(subsets, dtype=np.int64))


def _subset_memory(profile: JobProfile, node: NodeSummary, idx: IntArray) -> FloatArray:
    if not node.memory.n_states:
        return np.zeros(idx.shape[0])
    m = node.memory.tightest_many(idx)  # [states, n]
    w = node.memory.seconds
    total = float(w.sum())
    thr = profile.throughput_at(m)
    deficit = np.maximum(0.0, profile.required_memory_gib - m)
    value = (w @ thr - profile.memory_deficit_coefficient * (w @ deficit)) / total
    return np.asarray(np.clip(value / profile.max_tokens_per_second, 0.0, 1.0), dtype=np.float64)


def predict(
    profile: JobProfile,
    sla: float,
    node: NodeSummary,
    gpus: Sequence[int],
    config: ModelConfig = ModelConfig(),
    job: str = "",
    bias: float = 1.0,
) -> Prediction:
    """Predict job ``job`` (``profile``, throughput ``sla``) on ``gpus`` (indices) of ``node``.

    The factors and ``throughput_fraction`` are the model's own; the verdict (``feasible``,
    ``reasons``) is ``gleaner.perfmodel.admission``'s on the product corrected by ``bias``
    (the scheduler's learned multiplier; 1 without one).
    """
    if not 0.0 < sla <= 1.0:
        raise ValueError(f"throughput SLA must be within (0, 1], got {sla}")
    gpu_list = [int(g) for g in gpus]
    if not gpu_list:
        raise ValueError("a GPU set needs at least one GPU")
    _require_window(node)
    node.positions(gpu_list)  # unknown or duplicate GPUs raise here, with the known list

    compute = compute_factor(node, gpu_list)
    memory = memory_factor(profile, node, gpu_list)
    multi = multi_gpu_factor(node, gpu_list)
    product = compute * memory * multi
    tokens = product * profile.standalone_tokens_per_second

    corrected = float(admission.corrected(product, bias))
    factors = {"compute": compute, "memory": memory, "multi_gpu": multi}
    rule_failures = (
        admission.pair_reasons(node, gpu_list, pair_scores(node), config.min_pair_overlap)
        if len(gpu_list) > 1
        else []
    )
    reaches = bool(admission.reaches_sla(corrected, sla))
    reasons = [admission.sla_reason(corrected, sla, factors, bias)]
    note = admission.no_memory_samples(node)
    if note is not None:
        reasons.append(note)
    reasons.extend(rule_failures)
    return Prediction(
        job=job,
        node=node.node,
        gpus=tuple(gpu_list),
        compute=compute,
        memory=memory,
        multi_gpu=multi,
        throughput_fraction=product,
        tokens_per_second=tokens,
        sla=float(sla),
        feasible=bool(reaches and not rule_failures),
        reasons=tuple(reasons),
    )
