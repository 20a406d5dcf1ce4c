"""Vectorized single-GPU scoring over a whole fleet (thousands of GPUs in one pass).

Contract. ``GpuFleet.from_summaries(nodes)`` flattens many NodeSummaries once into
per-GPU arrays: P_compute per GPU and every GPU's *marginal* memory distribution
(distinct floored GiB with their share of time) concatenated, with offsets. Scoring a
single-GPU job then costs one interpolation over all marginal values and one segmented
sum (``np.add.reduceat``), independent of how many nodes there are. Results equal
``compute_factor``/``memory_factor`` of ``gleaner.perfmodel.model`` for k = 1 (tested).
Multi-GPU sets need the joint sketch: use ``subset_factors`` per node for those.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.model import compute_factors
from gleaner.perfmodel.profile import JobProfile
from gleaner.perfmodel.summary import NodeSummary

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class GpuFleet:
    """Per-GPU rows over many nodes (row order: nodes in input order, GPUs by index)."""

    node_names: tuple[str, ...]
    """Distinct node names; ``node_ids`` index into it."""
    node_ids: IntArray
    """[n] node of each GPU row."""
    gpu_indices: IntArray
    """[n] GPU index on its node."""
    compute: FloatArray
    """[n] P_compute of each GPU."""
    memory_values: FloatArray
    """[m] concatenated marginal memory values, GiB."""
    memory_weights: FloatArray
    """[m] their time shares (each GPU's shares sum to 1, or one 0 when no data)."""
    offsets: IntArray
    """[n] start of each GPU's segment in memory_values."""

    @property
    def size(self) -> int:
        return int(self.node_ids.size)

    @classmethod
    def from_summaries(cls, nodes: Iterable[NodeSummary]) -> GpuFleet:
        names: list[str] = []
        node_ids: list[IntArray] = []
        gpu_idx: list[IntArray] = []
        compute: list[FloatArray] = []
        values: list[FloatArray] = []
        weights: list[FloatArray] = []
        lengths: list[int] = []
        for node in nodes:
            nid = len(names)
            names.append(node.node)
            node_ids.append(np.full(node.n_gpus, nid, dtype=np.int64))
            gpu_idx.append(np.asarray(node.gpu_indices, dtype=np.int64))
            compute.append(compute_factors(node))
            total = node.memory.total_seconds
            for p in range(node.n_gpus):
                if total > 0:
                    v, w = node.memory.marginal(p)
                    values.append(v)
                    weights.append(w / total)
                    lengths.append(v.size)
                else:
                    values.append(np.zeros(1))
                    weights.append(np.zeros(1))
                    lengths.append(1)
        offsets = np.zeros(len(lengths), dtype=np.int64)
        if lengths:
            offsets[1:] = np.cumsum(lengths)[:-1]

        def cat(parts: list[npt.NDArray[np.float64]] | list[IntArray], dtype: type) -> npt.NDArray:  # type: ignore[type-arg]
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        return cls(
            node_names=tuple(names),
            node_ids=cat(node_ids, np.int64),
            gpu_indices=cat(gpu_idx, np.int64),
            compute=cat(compute, np.float64),
            memory_values=cat(values, np.float64),
            memory_weights=cat(weights, np.float64),
            offsets=offsets,
        )

    def memory_factors(self, profile: JobProfile) -> FloatArray:
        """[n] P_memory of a single-GPU job on every GPU row."""
        if self.size == 0:
            return np.zeros(0)
        m = self.memory_values
        per_value = profile.throughput_at(m) - profile.memory_deficit_coefficient * np.maximum(
            0.0, profile.required_memory_gib - m
        )
        sums = np.add.reduceat(self.memory_weights * per_value, self.offsets)
        return np.clip(sums / profile.max_tokens_per_second, 0.0, 1.0)

    def throughput_fractions(self, profile: JobProfile) -> FloatArray:
        """[n] predicted fraction (P_compute * P_memory; P_multi = 1) for a 1-GPU job."""
        return self.compute * self.memory_factors(profile)


def memory_factors_single(profile: JobProfile, nodes: Iterable[NodeSummary]) -> FloatArray:
    """P_memory of a single-GPU job on every GPU of ``nodes`` (GpuFleet row order)."""
    return GpuFleet.from_summaries(nodes).memory_factors(profile)
