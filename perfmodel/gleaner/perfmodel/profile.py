"""A job's one-time profile as plain numbers: the memory–throughput curve of one GPU shard.

Contract: ``JobProfile`` is immutable and carries exactly what the model needs.
``throughput_at`` interpolates the curve linearly, is 0 below the first point and flat
above the last (docs/perfmodel.md, "The math"). ``memory_factor_of`` turns a weighted
set of harvestable-memory values M into P_memory:

    P_memory = (E[Thrput(M)] - MAC * E[max(0, M_req - M)]) / Thrput(M_max), clipped to [0, 1]

where Thrput(M_max) is the curve's last (largest) throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gleaner.api import Profile

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class JobProfile:
    """The one-time profile of an offline job, measured on monopolized GPUs."""

    standalone_tokens_per_second: float
    """Thrput_w,max: throughput on monopolized GPUs, tokens/s (whole job)."""
    required_memory_gib: float
    """M_req: memory per GPU the job needs to run at full speed, GiB."""
    curve_memory_gib: tuple[float, ...]
    """Memory per GPU of each curve point, GiB, strictly increasing."""
    curve_tokens_per_second: tuple[float, ...]
    """Throughput at each curve point, tokens/s, non-decreasing."""
    memory_deficit_coefficient: float = 0.0
    """MAC_w: tokens/s lost per GiB of expected memory deficit."""

    def __post_init__(self) -> None:
        mem = np.asarray(self.curve_memory_gib, dtype=np.float64)
        tps = np.asarray(self.curve_tokens_per_second, dtype=np.float64)
        if mem.ndim != 1 or mem.size < 1 or mem.size != tps.size:
            raise ValueError("memory curve needs at least one point and as many tokens as GiB")
        if not (np.all(np.isfinite(mem)) and np.all(np.isfinite(tps))):
            raise ValueError("memory curve values must be finite")
        if np.any(np.diff(mem) <= 0):
            raise ValueError("memory curve: memoryGiB must be strictly increasing")
        if np.any(np.diff(tps) < 0):
            raise ValueError("memory curve: tokensPerSecond must not decrease")
        if np.any(tps < 0) or self.standalone_tokens_per_second <= 0:
            raise ValueError("throughputs must be positive")
        if self.required_memory_gib <= 0 or self.memory_deficit_coefficient < 0:
            raise ValueError("requiredMemoryGiB must be > 0 and the deficit coefficient >= 0")

    @classmethod
    def from_api(cls, profile: Profile) -> JobProfile:
        """Build from the API model (``OfflineJob.spec.profile`` or a ConfigMap's profile)."""
        return cls(
            standalone_tokens_per_second=float(profile.standalone_tokens_per_second),
            required_memory_gib=float(profile.required_memory_gi_b),
            curve_memory_gib=tuple(float(p.memory_gi_b) for p in profile.memory_curve),
            curve_tokens_per_second=tuple(float(p.tokens_per_second) for p in profile.memory_curve),
            memory_deficit_coefficient=float(profile.memory_deficit_coefficient),
        )

    @property
    def max_tokens_per_second(self) -> float:
        """Thrput_w(M_max): the curve's throughput with unlimited memory (its last point)."""
        return self.curve_tokens_per_second[-1]

    def throughput_at(self, memory_gib: npt.ArrayLike) -> FloatArray:
        """Thrput_w(M): linear interpolation of the curve, 0 below its first point, flat above."""
        m = np.asarray(memory_gib, dtype=np.float64)
        xs = np.asarray(self.curve_memory_gib, dtype=np.float64)
        ys = np.asarray(self.curve_tokens_per_second, dtype=np.float64)
        out = np.interp(m, xs, ys, left=0.0, right=float(ys[-1]))
        # np.interp returns ys[0] exactly at xs[0]; strictly below it the job cannot run.
        return np.asarray(out, dtype=np.float64)

    def memory_factor_of(self, memory_gib: npt.ArrayLike, weights: npt.ArrayLike) -> float:
        """P_memory for harvestable memory ``memory_gib`` seen for ``weights`` seconds each.

        Returns 0.0 when the weights sum to zero (nothing observed: nothing promised).
        """
        m = np.asarray(memory_gib, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        total = float(w.sum())
        if total <= 0 or self.max_tokens_per_second <= 0:
            return 0.0
        expected_thr = float(np.dot(w, self.throughput_at(m))) / total
        expected_deficit = float(np.dot(w, np.maximum(0.0, self.required_memory_gib - m))) / total
        value = (
            expected_thr - self.memory_deficit_coefficient * expected_deficit
        ) / self.max_tokens_per_second
        return float(min(1.0, max(0.0, value)))
