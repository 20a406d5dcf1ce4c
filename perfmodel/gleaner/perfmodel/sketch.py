"""The joint harvestable-memory sketch: a sparse histogram of per-GPU free memory states.

Contract. A node with G GPUs is, at every sample, in a *state*: the vector of each GPU's
harvestable memory, floored to ``step_gib``. The sketch keeps each distinct state once
with the seconds spent in it. Every expectation the model takes is a function of
M(t) = min over a GPU subset S of M_i(t), so from the sketch

    E_sketch[f(min_S M)] = sum_states seconds * f(min_S state) / sum seconds

Error bound. Flooring moves every M_i(t) down by less than ``step_gib`` and the minimum
over S with them, so for any L-Lipschitz f,  |E_sketch[f] - E_raw[f]| <= L * step_gib,
and for non-decreasing f (throughput) the sketch is never optimistic. For P_memory,
f(M) = (Thrput(M) - MAC * max(0, M_req - M)) / Thrput(M_max) has
L = (max curve slope + MAC) / Thrput(M_max), hence
|P_memory(sketch) - P_memory(raw)| <= (max slope + MAC) * step_gib / Thrput(M_max)
(clipping to [0, 1] only shrinks the gap).

Cap. At most ``max_states`` distinct states are kept (the NodeTrace CRD limit, 4096).
When a window has more, the step doubles (levels are halved with floor division, which
is *exactly* the floor of the raw data at twice the step) until the cap holds; the
sketch's ``step_gib`` is always the effective step, so the bound above stays true.
Merging sketches of different steps re-floors the finer one to the coarser step; when
one step is an integer multiple of the other this is exact, otherwise the bound becomes
L * (step_a + step_b).

States are stored as integer levels (GiB = level * step) in lexicographic order, so two
sketches of the same data compare equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_STEP_GIB = 0.5
DEFAULT_MAX_STATES = 4096
_EPS = 1e-9


def _unique_rows(levels: IntArray) -> tuple[IntArray, IntArray]:
    """Distinct rows of ``levels`` (lexicographic order) and, per input row, its distinct row."""
    n, g = levels.shape
    if n == 0:
        return levels.reshape(0, g), np.zeros(0, dtype=np.int64)
    if g == 0:
        return np.zeros((1, 0), dtype=np.int64), np.zeros(n, dtype=np.int64)
    lo = levels.min(axis=0)
    span = levels.max(axis=0) - lo + 1
    # Encode each row as one integer when it fits: one 1-D sort instead of a row sort.
    if float(np.prod(span.astype(np.float64))) < 2.0**62:
        mult = np.ones(g, dtype=np.int64)
        for j in range(g - 2, -1, -1):
            mult[j] = mult[j + 1] * span[j + 1]
        keys = (levels - lo) @ mult
        uniq, inverse = np.unique(keys, return_inverse=True)
        rows = (uniq[:, None] // mult[None, :]) % span[None, :] + lo[None, :]
        return rows.astype(np.int64), inverse.ravel().astype(np.int64)
    rows, inverse = np.unique(levels, axis=0, return_inverse=True)
    return rows.astype(np.int64), inverse.ravel().astype(np.int64)


def _aggregate(levels: IntArray, weights: FloatArray) -> tuple[IntArray, FloatArray]:
    """Distinct rows of ``levels`` (lexicographic order) with their summed weights."""
    n, g = levels.shape
    if n == 0:
        return levels.reshape(0, g), weights.reshape(0)
    if g == 0:
        return np.zeros((1, 0), dtype=np.int64), np.array([float(weights.sum())])
    rows, inverse = _unique_rows(levels)
    sums = np.bincount(inverse, weights=weights, minlength=rows.shape[0])
    return rows, sums.astype(np.float64)


def floor_levels(free_gib: npt.ArrayLike, step_gib: float) -> IntArray:
    """Free GiB -> integer levels floor(max(0, x) / step) (a tiny epsilon absorbs FP noise)."""
    x = np.maximum(np.asarray(free_gib, dtype=np.float64), 0.0)
    return np.floor(x / step_gib + _EPS).astype(np.int64)


@dataclass(frozen=True, eq=False)
class MemoryHistogram:
    """Sparse joint histogram of per-GPU harvestable memory (see the module docstring)."""

    levels: IntArray
    """[n_states, n_gpus] integer levels; GiB = level * step_gib (floored)."""
    seconds: FloatArray
    """[n_states] seconds spent in each state (> 0)."""
    step_gib: float
    """Effective quantization step, GiB: the error bound's unit."""

    def __post_init__(self) -> None:
        if self.levels.ndim != 2 or self.seconds.shape != (self.levels.shape[0],):
            raise ValueError("memory sketch: levels must be [states, gpus], seconds [states]")
        if not self.step_gib > 0:
            raise ValueError("memory sketch: step must be > 0")

    # -- construction -------------------------------------------------------------------

    @classmethod
    def empty(cls, n_gpus: int, step_gib: float = DEFAULT_STEP_GIB) -> MemoryHistogram:
        return cls(np.zeros((0, n_gpus), dtype=np.int64), np.zeros(0), float(step_gib))

    @classmethod
    def from_samples(
        cls,
        free_gib: npt.ArrayLike,
        sample_seconds: float | npt.ArrayLike,
        step_gib: float = DEFAULT_STEP_GIB,
        max_states: int = DEFAULT_MAX_STATES,
    ) -> MemoryHistogram:
        """From aligned samples ``free_gib`` [T, n_gpus], each lasting ``sample_seconds``."""
        x = np.asarray(free_gib, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError("free memory samples must be a [time, gpu] matrix")
        w = np.broadcast_to(np.asarray(sample_seconds, dtype=np.float64), (x.shape[0],))
        keep = w > 0
        levels, secs = _aggregate(floor_levels(x[keep], step_gib), np.ascontiguousarray(w[keep]))
        return cls(levels, secs, float(step_gib)).capped(max_states)

    @classmethod
    def from_states(
        cls,
        states_gib: npt.ArrayLike,
        seconds: npt.ArrayLike,
        step_gib: float,
        n_gpus: int,
        max_states: int = DEFAULT_MAX_STATES,
    ) -> MemoryHistogram:
        """From already-floored states in GiB (e.g. a NodeTrace's ``memory.states``)."""
        s = np.asarray(states_gib, dtype=np.float64).reshape(-1, n_gpus)
        w = np.asarray(seconds, dtype=np.float64).reshape(-1)
        # States are multiples of the step already; round instead of floor so that
        # 0.3 / 0.1 = 2.9999999 reads back as level 3.
        levels = np.maximum(np.round(s / step_gib), 0).astype(np.int64)
        keep = w > 0
        rows, secs = _aggregate(levels[keep], np.ascontiguousarray(w[keep]))
        return cls(rows, secs, float(step_gib)).capped(max_states)

    # -- shape --------------------------------------------------------------------------

    @property
    def n_gpus(self) -> int:
        return int(self.levels.shape[1])

    @property
    def n_states(self) -> int:
        return int(self.levels.shape[0])

    @property
    def total_seconds(self) -> float:
        return float(self.seconds.sum())

    def states_gib(self) -> FloatArray:
        """[n_states, n_gpus] floored free memory in GiB."""
        return self.levels.astype(np.float64) * self.step_gib

    def equals(self, other: MemoryHistogram, rtol: float = 1e-9) -> bool:
        """Same step, same states, same seconds (up to float rounding of the sums)."""
        return (
            abs(self.step_gib - other.step_gib) <= 1e-12 * max(1.0, self.step_gib)
            and self.levels.shape == other.levels.shape
            and bool(np.array_equal(self.levels, other.levels))
            and bool(np.allclose(self.seconds, other.seconds, rtol=rtol, atol=1e-9))
        )

    # -- coarsening and merging ---------------------------------------------------------

    def coarsened(self, step_gib: float) -> MemoryHistogram:
        """Re-floor to a coarser ``step_gib`` (>= the current step)."""
        if step_gib < self.step_gib * (1 - 1e-12):
            raise ValueError(f"cannot refine a sketch from step {self.step_gib} to {step_gib}")
        rows, secs = _aggregate(self._levels_at(step_gib), self.seconds)
        return MemoryHistogram(rows, secs, float(step_gib))

    def _levels_at(self, step_gib: float) -> IntArray:
        """Each state's levels re-floored to ``step_gib`` (>= the current step), not merged."""
        ratio = step_gib / self.step_gib
        if abs(ratio - round(ratio)) < 1e-9:
            return self.levels // round(ratio)
        return floor_levels(self.levels.astype(np.float64) * self.step_gib, step_gib)

    def capped(self, max_states: int = DEFAULT_MAX_STATES) -> MemoryHistogram:
        """Double the step until at most ``max_states`` states remain."""
        if max_states < 1:
            raise ValueError("max_states must be >= 1")
        sketch = self
        while sketch.n_states > max_states:
            sketch = sketch.coarsened(sketch.step_gib * 2)
        return sketch

    def merge(
        self, other: MemoryHistogram, max_states: int = DEFAULT_MAX_STATES
    ) -> MemoryHistogram:
        """The sketch of both windows together (seconds add; coarser step wins)."""
        if self.n_gpus != other.n_gpus:
            raise ValueError(f"cannot merge sketches of {self.n_gpus} and {other.n_gpus} GPUs")
        step = max(self.step_gib, other.step_gib)
        a = self if self.step_gib == step else self.coarsened(step)
        b = other if other.step_gib == step else other.coarsened(step)
        rows, secs = _aggregate(
            np.concatenate([a.levels, b.levels]), np.concatenate([a.seconds, b.seconds])
        )
        return MemoryHistogram(rows, secs, step).capped(max_states)

    @staticmethod
    def merge_all(
        sketches: Sequence[MemoryHistogram], max_states: int = DEFAULT_MAX_STATES
    ) -> MemoryHistogram:
        """The sketch of all windows together, in one aggregation: what merging them in
        order one by one gives (each level's seconds are added in the same order), without
        an aggregation per merge, as long as no intermediate merge would exceed
        ``max_states`` and the steps are equal."""
        if not sketches:
            raise ValueError("merge_all() needs at least one sketch")
        if len({m.n_gpus for m in sketches}) > 1:
            raise ValueError("cannot merge sketches of different GPU counts")
        step = max(m.step_gib for m in sketches)
        same = [m if m.step_gib == step else m.coarsened(step) for m in sketches]
        rows, secs = _aggregate(
            np.concatenate([m.levels for m in same]), np.concatenate([m.seconds for m in same])
        )
        return MemoryHistogram(rows, secs, step).capped(max_states)

    def select(self, positions: Sequence[int]) -> MemoryHistogram:
        """The joint sketch of a subset of GPUs (columns in ``positions`` order)."""
        rows, secs = _aggregate(self.levels[:, list(positions)], self.seconds)
        return MemoryHistogram(rows, secs, self.step_gib)

    # -- what the model reads -----------------------------------------------------------

    def tightest(self, positions: Sequence[int]) -> tuple[FloatArray, FloatArray]:
        """(M per state, seconds): M = min over ``positions`` of the floored free GiB."""
        pos = list(positions)
        if not pos:
            raise ValueError("tightest() needs at least one GPU")
        mins = self.levels[:, pos].min(axis=1) if self.n_states else np.zeros(0, np.int64)
        return mins.astype(np.float64) * self.step_gib, self.seconds

    def tightest_many(self, subsets: npt.ArrayLike) -> FloatArray:
        """[n_states, n_subsets] M per state for every row of ``subsets`` [n_subsets, k]."""
        idx = np.asarray(subsets, dtype=np.int64)
        if idx.ndim != 2 or idx.shape[1] == 0:
            raise ValueError("subsets must be a [n, k] array of GPU positions, k >= 1")
        mins: IntArray = self.levels[:, idx].min(axis=2)
        return mins.astype(np.float64) * self.step_gib

    def marginal(self, position: int) -> tuple[FloatArray, FloatArray]:
        """(distinct floored GiB, seconds) of one GPU, ascending."""
        col = self.levels[:, position]
        uniq, inverse = np.unique(col, return_inverse=True)
        secs = np.bincount(inverse.ravel(), weights=self.seconds, minlength=uniq.size)
        return uniq.astype(np.float64) * self.step_gib, secs.astype(np.float64)

    def quantile(self, q: float, positions: Sequence[int] | None = None) -> float | None:
        """Lower ``q``-quantile of the pooled per-GPU memory of ``positions`` (default all).

        Pooled means every GPU's marginal counts, each with its own seconds; the value is
        the smallest level whose cumulative share reaches ``q``. None when empty.
        """
        pos = list(range(self.n_gpus)) if positions is None else list(positions)
        if self.n_states == 0 or not pos:
            return None
        values = self.levels[:, pos].ravel().astype(np.float64) * self.step_gib
        weights = np.repeat(self.seconds, len(pos))
        order = np.argsort(values, kind="stable")
        cum = np.cumsum(weights[order])
        i = int(np.searchsorted(cum, q * cum[-1] - 1e-12 * cum[-1], side="left"))
        return float(values[order][min(i, values.size - 1)])


@dataclass(frozen=True, eq=False)
class MemoryStack:
    """Sketches laid out once on the states they hold together, so that weighted sums of
    them need no aggregation: :meth:`weighted` is :meth:`MemoryHistogram.merge_all` of the
    sketches with their seconds multiplied by one factor each, computed from the layout.

    Built by :meth:`of` (one aggregation); each :meth:`weighted` is one ``bincount`` per
    sketch. The seconds of every state are added in the order ``merge_all`` adds them, so
    where ``merge_all`` of the scaled sketches keeps one step (equal steps, at most
    ``max_states`` states together) both give the same floats, not only close ones."""

    rows: IntArray
    """[n_states, n_gpus] the states of all sketches at their coarsest step, in order."""
    step_gib: float
    index: tuple[IntArray, ...]
    """Per sketch, the row of each of its states in ``rows``."""
    seconds: tuple[FloatArray, ...]
    """Per sketch, its seconds per state (its own order)."""

    @classmethod
    def of(cls, sketches: Sequence[MemoryHistogram]) -> MemoryStack:
        if not sketches:
            raise ValueError("MemoryStack.of() needs at least one sketch")
        if len({m.n_gpus for m in sketches}) > 1:
            raise ValueError("cannot stack sketches of different GPU counts")
        step = max(m.step_gib for m in sketches)
        levels = [m.levels if m.step_gib == step else m._levels_at(step) for m in sketches]
        rows, inverse = _unique_rows(np.concatenate(levels))
        bounds = np.cumsum([m.n_states for m in sketches])[:-1]
        index = tuple(np.split(inverse, bounds))
        return cls(rows, float(step), index, tuple(m.seconds for m in sketches))

    def weighted(
        self, factors: Sequence[float], max_states: int = DEFAULT_MAX_STATES
    ) -> MemoryHistogram:
        """All sketches together, sketch i's seconds multiplied by ``factors[i]`` > 0."""
        if len(factors) != len(self.seconds):
            raise ValueError(f"{len(self.seconds)} sketches, {len(factors)} factors")
        n = self.rows.shape[0]
        total = np.zeros(n)
        for index, seconds, factor in zip(self.index, self.seconds, factors, strict=True):
            total = total + np.bincount(index, weights=seconds * factor, minlength=n)
        return MemoryHistogram(self.rows, total, self.step_gib).capped(max_states)
