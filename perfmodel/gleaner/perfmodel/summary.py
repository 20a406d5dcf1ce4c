"""Node summaries: one node's window reduced to what the performance model needs.

Contract. A ``NodeSummary`` holds seconds and counts, never ratios, so two windows of the
same node merge by addition (``merge``) and the scheduler never rescans raw samples:

- per GPU: online-busy seconds and, when an agent ran, offline-enabled (timeslice)
  seconds (``None`` without an agent: P_compute then falls back to 1 - busy fraction);
- per GPU pair: busy-overlap and busy-union seconds as symmetric [G, G] matrices
  (the diagonal holds each GPU's busy seconds; NaN marks a pair nobody measured);
- the joint harvestable-memory sketch (``gleaner.perfmodel.sketch``).

GPUs are always kept sorted by index; "position" means the place in that order.
Sources of summaries: raw samples (``from_samples``; ``gleaner.perfmodel.frames`` reads the
trace file format into them), counter totals plus memory samples (``from_totals``, what the
Prometheus source reads), and NodeTrace objects (``from_nodetrace``). ``to_nodetrace_status``
writes the NodeTrace status an agent or the simulator publishes.

From samples, every sample lasts the node's sample period (the median gap between its
timestamps, 1 s for a single timestamp, or ``sample_seconds``): expectations are plain
time averages over the window's samples, as docs/perfmodel.md says. Overlap of GPUs a and b is
sum min(b_a, b_b) and union sum max(b_a, b_b), times the period (exact for 0/1 samples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.sketch import DEFAULT_MAX_STATES, DEFAULT_STEP_GIB, MemoryHistogram

if TYPE_CHECKING:
    from gleaner.api import NodeTrace, NodeTraceStatus, TraceSource

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class TraceFormatError(ValueError):
    """A trace (file, frame or object) that does not follow the trace file format."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of a node's inventory."""

    index: int
    """GPU index on the node."""
    uuid: str = ""
    """GPU UUID (``GPU-...``); empty when the source does not know it (files)."""
    product: str = ""
    """Product name, e.g. ``NVIDIA H100 80GB HBM3``; empty when unknown."""
    memory_gib: float = 0.0
    """Total memory, GiB; 0 when unknown."""


@dataclass(frozen=True, eq=False)
class GpuEvents:
    """Per-GPU event counts of a window (all [n_gpus] int64); they merge by addition."""

    preemptions: IntArray
    online_requests: IntArray
    max_preemptions_per_request: IntArray
    """Merges by maximum, not sum."""
    reclamations: IntArray
    reclaimed_bytes: IntArray

    @classmethod
    def zeros(cls, n_gpus: int) -> GpuEvents:
        z = np.zeros(n_gpus, dtype=np.int64)
        return cls(z, z.copy(), z.copy(), z.copy(), z.copy())

    def merge(self, other: GpuEvents) -> GpuEvents:
        return GpuEvents(
            self.preemptions + other.preemptions,
            self.online_requests + other.online_requests,
            np.maximum(self.max_preemptions_per_request, other.max_preemptions_per_request),
            self.reclamations + other.reclamations,
            self.reclaimed_bytes + other.reclaimed_bytes,
        )


def _pair_matrices(busy: FloatArray, period: float) -> tuple[FloatArray, FloatArray]:
    """Overlap/union seconds [G, G] from busy samples [T, G] of ``period`` seconds each."""
    g = busy.shape[1]
    overlap = np.zeros((g, g))
    union = np.zeros((g, g))
    for a in range(g):
        col = busy[:, a : a + 1]
        rest = busy[:, a:]
        overlap[a, a:] = np.minimum(col, rest).sum(axis=0) * period
        union[a, a:] = np.maximum(col, rest).sum(axis=0) * period
    overlap = np.triu(overlap) + np.triu(overlap, 1).T
    union = np.triu(union) + np.triu(union, 1).T
    return overlap, union


def _to_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(float(ts), tz=UTC)


@dataclass(frozen=True, eq=False)
class NodeSummary:
    """One node's summarized window (see the module docstring)."""

    node: str
    """Node name."""
    gpus: tuple[GpuSpec, ...]
    """GPU inventory, sorted by index."""
    window_seconds: float
    """Seconds the window covers (0: empty window, nothing can be predicted)."""
    online_busy_seconds: FloatArray
    """[G] seconds the online workload was busy."""
    offline_enabled_seconds: FloatArray | None
    """[G] seconds offline channels were enabled; None without an agent."""
    pair_overlap_seconds: FloatArray
    """[G, G] symmetric; seconds both GPUs were busy online (NaN: not measured)."""
    pair_union_seconds: FloatArray
    """[G, G] symmetric; seconds at least one was busy online (NaN: not measured)."""
    memory: MemoryHistogram
    """Joint harvestable-memory sketch, columns in GPU position order."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Node labels (for gpuSelector), when the source knows them."""
    last_report_time: datetime | None = None
    """When the data was last refreshed (stale detection)."""
    window_start: datetime | None = None
    window_end: datetime | None = None
    events: GpuEvents | None = None
    """Per-GPU preemption/reclamation counts, when the source has them."""
    offline_jobs: tuple[str | None, ...] = ()
    """namespace/name of the offline job each GPU holds at report time (empty: unknown)."""

    def __post_init__(self) -> None:
        g = len(self.gpus)
        idx = [s.index for s in self.gpus]
        if idx != sorted(set(idx)):
            raise ValueError(f"node {self.node}: GPU indices must be distinct and sorted: {idx}")
        if self.online_busy_seconds.shape != (g,):
            raise ValueError(f"node {self.node}: online_busy_seconds must have {g} entries")
        if self.offline_enabled_seconds is not None and self.offline_enabled_seconds.shape != (g,):
            raise ValueError(f"node {self.node}: offline_enabled_seconds must have {g} entries")
        if self.pair_overlap_seconds.shape != (g, g) or self.pair_union_seconds.shape != (g, g):
            raise ValueError(f"node {self.node}: pair matrices must be {g}x{g}")
        if self.memory.n_gpus != g:
            raise ValueError(f"node {self.node}: memory sketch has {self.memory.n_gpus} GPUs")
        if not self.window_seconds >= 0:
            raise ValueError(f"node {self.node}: window_seconds must be >= 0")

    # -- lookups ------------------------------------------------------------------------

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(s.index for s in self.gpus)

    def position(self, index: int) -> int:
        """Position of GPU ``index`` in this summary; ValueError names the known GPUs."""
        for pos, spec in enumerate(self.gpus):
            if spec.index == index:
                return pos
        raise ValueError(f"node {self.node} has no GPU {index} (GPUs: {list(self.gpu_indices)})")

    def positions(self, indices: Sequence[int]) -> list[int]:
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU indices must be distinct: {list(indices)}")
        return [self.position(i) for i in indices]

    def events_or_zeros(self) -> GpuEvents:
        return self.events if self.events is not None else GpuEvents.zeros(self.n_gpus)

    # -- merging ------------------------------------------------------------------------

    def compute_fractions(self) -> FloatArray:
        """Per GPU (position order), the share of the window offline work could run.

        Offline-enabled seconds / window with an agent, else 1 - online-busy fraction;
        clipped to [0, 1]. This is the model's P_compute per GPU; it lives here, with the
        data it reads, so that the NodeTrace status (idleFraction) and the model
        (``gleaner.perfmodel.model``) share it without importing each other.
        ValueError when the window is empty.
        """
        if not self.window_seconds > 0:
            raise ValueError(f"node {self.node}: the trace window is empty (no samples)")
        if self.offline_enabled_seconds is not None:
            frac = self.offline_enabled_seconds / self.window_seconds
        else:
            frac = 1.0 - self.online_busy_seconds / self.window_seconds
        return np.clip(np.asarray(frac, dtype=np.float64), 0.0, 1.0)

    def enabled_or_estimate(self) -> FloatArray:
        """Offline-enabled seconds, or the no-agent estimate window - busy."""
        if self.offline_enabled_seconds is not None:
            return self.offline_enabled_seconds
        return np.maximum(0.0, self.window_seconds - self.online_busy_seconds)

    def merge(self, other: NodeSummary, max_states: int = DEFAULT_MAX_STATES) -> NodeSummary:
        """Both windows together: seconds and counts add, the memory sketches merge.

        When only one side has offline-enabled seconds, the other side contributes its
        no-agent estimate (window - busy), so P_compute stays the time-weighted mean.
        """
        if self.node != other.node:
            raise ValueError(f"cannot merge summaries of nodes {self.node} and {other.node}")
        if self.gpu_indices != other.gpu_indices:
            raise ValueError(
                f"node {self.node}: GPU inventories differ "
                f"({list(self.gpu_indices)} vs {list(other.gpu_indices)})"
            )
        if self.offline_enabled_seconds is None and other.offline_enabled_seconds is None:
            enabled: FloatArray | None = None
        else:
            enabled = self.enabled_or_estimate() + other.enabled_or_estimate()
        newer, older = (
            (other, self)
            if (other.last_report_time or _EPOCH) >= (self.last_report_time or _EPOCH)
            else (self, other)
        )
        events = (
            None
            if self.events is None and other.events is None
            else self.events_or_zeros().merge(other.events_or_zeros())
        )
        starts = [t for t in (self.window_start, other.window_start) if t is not None]
        ends = [t for t in (self.window_end, other.window_end) if t is not None]
        gpus = tuple(
            a if (a.uuid or a.product or a.memory_gib) else b
            for a, b in zip(newer.gpus, older.gpus, strict=True)
        )
        return NodeSummary(
            node=self.node,
            gpus=gpus,
            window_seconds=self.window_seconds + other.window_seconds,
            online_busy_seconds=self.online_busy_seconds + other.online_busy_seconds,
            offline_enabled_seconds=enabled,
            pair_overlap_seconds=self.pair_overlap_seconds + other.pair_overlap_seconds,
            pair_union_seconds=self.pair_union_seconds + other.pair_union_seconds,
            memory=self.memory.merge(other.memory, max_states),
            labels={**older.labels, **newer.labels},
            last_report_time=newer.last_report_time or older.last_report_time,
            window_start=min(starts) if starts else None,
            window_end=max(ends) if ends else None,
            events=events,
            offline_jobs=newer.offline_jobs or older.offline_jobs,
        )

    def equals(self, other: NodeSummary, rtol: float = 1e-9) -> bool:
        """Same node, GPUs and numbers (floats up to ``rtol``); for tests and dedup."""

        def close(a: FloatArray | None, b: FloatArray | None) -> bool:
            if a is None or b is None:
                return a is None and b is None
            return bool(np.allclose(a, b, rtol=rtol, atol=1e-9, equal_nan=True))

        return (
            self.node == other.node
            and self.gpu_indices == other.gpu_indices
            and abs(self.window_seconds - other.window_seconds)
            <= rtol * max(1.0, self.window_seconds)
            and close(self.online_busy_seconds, other.online_busy_seconds)
            and close(self.offline_enabled_seconds, other.offline_enabled_seconds)
            and close(self.pair_overlap_seconds, other.pair_overlap_seconds)
            and close(self.pair_union_seconds, other.pair_union_seconds)
            and self.memory.equals(other.memory, rtol)
        )

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_samples(
        cls,
        node: str,
        gpus: Sequence[GpuSpec | int],
        timestamps: npt.ArrayLike,
        online_busy: npt.ArrayLike,
        free_memory_gib: npt.ArrayLike,
        offline_enabled: npt.ArrayLike | None = None,
        *,
        sample_seconds: float | None = None,
        step_gib: float = DEFAULT_STEP_GIB,
        max_states: int = DEFAULT_MAX_STATES,
        labels: Mapping[str, str] | None = None,
    ) -> NodeSummary:
        """From aligned samples: ``timestamps`` [T] (s), the rest [T, G] in ``gpus`` order.

        ``gpus`` may be GpuSpecs or bare indices; columns are reordered by index.
        """
        specs = [g if isinstance(g, GpuSpec) else GpuSpec(index=int(g)) for g in gpus]
        order = sorted(range(len(specs)), key=lambda i: specs[i].index)
        ts = np.asarray(timestamps, dtype=np.float64).reshape(-1)
        n_t = ts.size

        def matrix(values: npt.ArrayLike, name: str) -> FloatArray:
            m = np.asarray(values, dtype=np.float64)
            if m.shape != (n_t, len(specs)):
                raise ValueError(f"{name} must be [{n_t}, {len(specs)}], got {list(m.shape)}")
            return np.ascontiguousarray(m[:, order])

        busy = matrix(online_busy, "online_busy")
        free = matrix(free_memory_gib, "free_memory_gib")
        enabled = None if offline_enabled is None else matrix(offline_enabled, "offline_enabled")
        if sample_seconds is not None:
            period = float(sample_seconds)
        elif n_t > 1:
            period = float(np.median(np.diff(np.sort(ts))))
        else:
            period = 1.0
        if not period > 0:
            raise ValueError(f"node {node}: timestamps must be distinct (sample period {period})")
        overlap, union = _pair_matrices(busy, period)
        start = _to_datetime(ts.min()) if n_t else None
        end = _to_datetime(ts.max() + period) if n_t else None
        return cls(
            node=node,
            gpus=tuple(specs[i] for i in order),
            window_seconds=n_t * period,
            online_busy_seconds=busy.sum(axis=0) * period,
            offline_enabled_seconds=None if enabled is None else enabled.sum(axis=0) * period,
            pair_overlap_seconds=overlap,
            pair_union_seconds=union,
            memory=MemoryHistogram.from_samples(free, period, step_gib, max_states),
            labels=dict(labels or {}),
            last_report_time=end,
            window_start=start,
            window_end=end,
        )

    @classmethod
    def from_totals(
        cls,
        node: str,
        gpus: Sequence[GpuSpec | int],
        window_seconds: float,
        online_busy_seconds: npt.ArrayLike,
        offline_enabled_seconds: npt.ArrayLike | None,
        pair_overlap_seconds: npt.ArrayLike | None,
        pair_union_seconds: npt.ArrayLike | None,
        memory_samples_gib: npt.ArrayLike,
        memory_sample_seconds: float,
        *,
        step_gib: float = DEFAULT_STEP_GIB,
        max_states: int = DEFAULT_MAX_STATES,
        labels: Mapping[str, str] | None = None,
        window_end: datetime | None = None,
    ) -> NodeSummary:
        """From counter increases over a window (what agent metrics give) and memory samples.

        Arrays are in ``gpus`` order; pair matrices are [G, G] (only the upper triangle is
        read; NaN or None: not measured). ``memory_samples_gib`` is [T, G] (a gauge sampled
        every ``memory_sample_seconds``).
        """
        specs = [g if isinstance(g, GpuSpec) else GpuSpec(index=int(g)) for g in gpus]
        order = np.array(sorted(range(len(specs)), key=lambda i: specs[i].index), dtype=np.int64)
        g = len(specs)

        def vector(values: npt.ArrayLike) -> FloatArray:
            v = np.asarray(values, dtype=np.float64).reshape(-1)
            if v.shape != (g,):
                raise ValueError(f"node {node}: expected {g} per-GPU values, got {v.size}")
            return v[order]

        def pairs(values: npt.ArrayLike | None, diagonal: FloatArray) -> FloatArray:
            if values is None:
                m = np.full((g, g), np.nan)
            else:
                m = np.asarray(values, dtype=np.float64)
                if m.shape != (g, g):
                    raise ValueError(f"node {node}: pair matrix must be {g}x{g}")
                m = m[np.ix_(order, order)]
            upper = np.where(np.triu(np.ones((g, g), dtype=bool), 1), m, 0.0)
            out = upper + upper.T
            np.fill_diagonal(out, diagonal)
            return np.asarray(out, dtype=np.float64)

        busy = vector(online_busy_seconds)
        mem = np.asarray(memory_samples_gib, dtype=np.float64)
        if mem.ndim != 2 or mem.shape[1] != g:
            raise ValueError(f"node {node}: memory samples must be [T, {g}]")
        end = window_end
        return cls(
            node=node,
            gpus=tuple(specs[i] for i in order),
            window_seconds=float(window_seconds),
            online_busy_seconds=busy,
            offline_enabled_seconds=(
                None if offline_enabled_seconds is None else vector(offline_enabled_seconds)
            ),
            pair_overlap_seconds=pairs(pair_overlap_seconds, busy),
            pair_union_seconds=pairs(pair_union_seconds, busy),
            memory=MemoryHistogram.from_samples(
                mem[:, order], memory_sample_seconds, step_gib, max_states
            ),
            labels=dict(labels or {}),
            last_report_time=end,
            window_start=None if end is None else end - timedelta(seconds=float(window_seconds)),
            window_end=end,
        )

    @classmethod
    def from_nodetrace(
        cls,
        trace: NodeTrace | Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        max_states: int = DEFAULT_MAX_STATES,
    ) -> NodeSummary:
        """From a NodeTrace (model or the API server's dict). No window: window_seconds 0."""
        from gleaner.api import NodeTrace as NodeTraceModel
        from gleaner.api.nodetrace import without_hours

        nt = (
            trace
            if isinstance(trace, NodeTraceModel)
            else NodeTraceModel.model_validate(without_hours(trace))
        )
        st = nt.status
        name = nt.spec.node_name or nt.metadata.name
        inventory = sorted(st.gpus, key=lambda gi: gi.index)
        specs = tuple(
            GpuSpec(index=gi.index, uuid=gi.uuid, product=gi.product, memory_gib=gi.memory_gi_b)
            for gi in inventory
        )
        # GPUs mentioned only in perGPU (no inventory entry) still count.
        known = {s.index for s in specs}
        extra = sorted({t.index for t in st.per_gpu} - known)
        specs = tuple(sorted((*specs, *(GpuSpec(index=i) for i in extra)), key=lambda s: s.index))
        pos = {s.index: p for p, s in enumerate(specs)}
        g = len(specs)
        busy = np.zeros(g)
        enabled = np.zeros(g)
        ev = GpuEvents.zeros(g)
        jobs: list[str | None] = [None] * g
        for t in st.per_gpu:
            p = pos[t.index]
            busy[p] = t.online_busy_seconds
            enabled[p] = t.offline_enabled_seconds
            ev.preemptions[p] = t.preemptions
            ev.online_requests[p] = t.online_requests
            ev.max_preemptions_per_request[p] = t.max_preemptions_per_request
            ev.reclamations[p] = t.reclamations
            ev.reclaimed_bytes[p] = t.reclaimed_bytes
            jobs[p] = t.offline_job
        overlap = np.full((g, g), np.nan)
        union = np.full((g, g), np.nan)
        np.fill_diagonal(overlap, busy)
        np.fill_diagonal(union, busy)
        for pair in st.pairs:
            if pair.gpu_a not in pos or pair.gpu_b not in pos:
                raise TraceFormatError(
                    f"NodeTrace {name}: pair {pair.gpu_a}-{pair.gpu_b} names an unknown GPU"
                )
            a, b = pos[pair.gpu_a], pos[pair.gpu_b]
            overlap[a, b] = overlap[b, a] = pair.overlap_seconds
            union[a, b] = union[b, a] = pair.union_seconds
        if st.memory is not None and st.memory.states:
            # States list free GiB in the *inventory* order of status.gpus, not by index.
            if any(len(s.free_gi_b) != len(st.gpus) for s in st.memory.states):
                raise TraceFormatError(
                    f"NodeTrace {name}: memory states must list {len(st.gpus)} GPUs "
                    "(inventory order)"
                )
            inv_cols = [pos[gi.index] for gi in st.gpus]
            states = np.zeros((len(st.memory.states), g))
            states[:, inv_cols] = np.array([s.free_gi_b for s in st.memory.states])
            memory = MemoryHistogram.from_states(
                states,
                [s.seconds for s in st.memory.states],
                st.memory.step_gi_b,
                g,
                max_states,
            )
        else:
            step = st.memory.step_gi_b if st.memory is not None else DEFAULT_STEP_GIB
            memory = MemoryHistogram.empty(g, step)
        window = st.window
        return cls(
            node=name,
            gpus=specs,
            window_seconds=0.0 if window is None else float(window.seconds),
            online_busy_seconds=busy,
            offline_enabled_seconds=enabled,
            pair_overlap_seconds=overlap,
            pair_union_seconds=union,
            memory=memory,
            labels=dict(labels or {}),
            last_report_time=st.last_report_time,
            window_start=None if window is None else window.start,
            window_end=None if window is None else window.end,
            events=ev,
            offline_jobs=tuple(jobs),
        )

    def to_nodetrace_status(
        self,
        source: TraceSource | str = "agent",
        agent_version: str = "",
        offline_jobs: int | None = None,
        now: datetime | None = None,
    ) -> NodeTraceStatus:
        """The NodeTrace status for this summary (idleFraction and p10 filled in).

        Without agent data the offline-enabled seconds written are the estimate
        window - busy, so a reader computes the same P_compute. Unknown UUIDs become
        ``unknown-<node>-<index>`` and unknown memory sizes the largest free memory seen
        (at least one step), because the CRD requires both.
        """
        from gleaner.api import (
            GpuInfo,
            GpuPair,
            GpuTrace,
            MemorySketch,
            MemoryState,
            NodeTraceStatus,
            TraceWindow,
        )
        from gleaner.api import TraceSource as ApiTraceSource

        now = now or datetime.now(UTC)
        end = self.window_end or self.last_report_time or now
        start = self.window_start or end - timedelta(seconds=self.window_seconds)
        states = self.memory.states_gib()
        gpus = []
        for p, s in enumerate(self.gpus):
            seen = float(states[:, p].max()) if self.memory.n_states else 0.0
            size = s.memory_gib if s.memory_gib > 0 else max(seen, self.memory.step_gib)
            gpus.append(
                GpuInfo(
                    index=s.index,
                    uuid=s.uuid or f"unknown-{self.node}-{s.index}",
                    product=s.product,
                    memory_gi_b=size,
                )
            )
        enabled = self.enabled_or_estimate()
        ev = self.events_or_zeros()
        per_gpu = [
            GpuTrace(
                index=s.index,
                offline_enabled_seconds=float(enabled[p]),
                online_busy_seconds=float(self.online_busy_seconds[p]),
                preemptions=int(ev.preemptions[p]),
                online_requests=int(ev.online_requests[p]),
                max_preemptions_per_request=int(ev.max_preemptions_per_request[p]),
                reclamations=int(ev.reclamations[p]),
                reclaimed_bytes=int(ev.reclaimed_bytes[p]),
                offline_job=self.offline_jobs[p] if p < len(self.offline_jobs) else None,
            )
            for p, s in enumerate(self.gpus)
        ]
        pairs = []
        for a in range(self.n_gpus):
            for b in range(a + 1, self.n_gpus):
                ov, un = self.pair_overlap_seconds[a, b], self.pair_union_seconds[a, b]
                if np.isnan(ov) or np.isnan(un):
                    continue
                pairs.append(
                    GpuPair(
                        gpu_a=self.gpus[a].index,
                        gpu_b=self.gpus[b].index,
                        overlap_seconds=float(min(ov, un)),
                        union_seconds=float(un),
                    )
                )
        sketch = MemorySketch(
            step_gi_b=self.memory.step_gib,
            states=[
                MemoryState(free_gi_b=[float(v) for v in row], seconds=float(sec))
                for row, sec in zip(states, self.memory.seconds, strict=True)
            ],
        )
        has_window = self.n_gpus and self.window_seconds
        idle = float(self.compute_fractions().mean()) if has_window else None
        jobs = (
            offline_jobs
            if offline_jobs is not None
            else sum(1 for j in set(self.offline_jobs) if j is not None)
        )
        return NodeTraceStatus(
            source=ApiTraceSource(str(source)),
            agent_version=agent_version,
            last_report_time=self.last_report_time or now,
            gpus=gpus,
            window=(
                TraceWindow(start=start, end=end, seconds=self.window_seconds)
                if self.window_seconds > 0
                else None
            ),
            per_gpu=per_gpu,
            pairs=pairs,
            memory=sketch,
            idle_fraction=idle,
            harvestable_memory_p10_gi_b=self.memory.quantile(0.10),
            offline_jobs=jobs,
        )

    def with_labels(self, labels: Mapping[str, str]) -> NodeSummary:
        return replace(self, labels=dict(labels))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
