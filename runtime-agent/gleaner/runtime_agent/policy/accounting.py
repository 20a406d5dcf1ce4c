"""Node accounting: what the agent saw, as cumulative seconds and counts (pure).

Contract. :class:`Accounting` integrates piecewise-constant signals of one node's GPUs over
time, fed in non-decreasing time order:

- online busy level per GPU (0..1; 0/1 from the shims, fractions when replaying a trace),
- offline enabled level per GPU (0..1),
- harvestable memory per GPU (bytes),

and counts events (preemptions, finished online requests with their preemption counts,
reclamations with bytes and invalidated KV blocks). Values hold from the time they are set
until the next change. The integrals are lazy but exact: a change of one GPU's level
integrates only what that level feeds (its own total, the pairs and jobs it belongs to) up
to the change; everything else is integrated when read (``totals``, ``snapshot``,
``advance``). An edge therefore costs the same on a node of 8 GPUs as on one of 1. Derived
totals, all cumulative since ``start``:

- per GPU: offline-enabled seconds, online-busy seconds, counts as above;
- per GPU pair (a < b): busy overlap ``∫ min(b_a, b_b) dt`` and union ``∫ max(b_a, b_b) dt``
  (exact for 0/1 levels; the trace-file rule for fractions);
- per offline job: timeslice seconds ``∫ min over the job's GPUs of enabled dt`` (a
  multi-GPU job runs in lockstep, so it progresses only while all its GPUs are enabled);
- per GPU: time-weighted harvestable-memory histogram over fixed byte buckets (Prometheus).

The joint harvestable-memory sketch (NodeTrace ``status.memory``) is perfmodel's
:class:`~gleaner.perfmodel.MemoryHistogram`: every interval of constant harvestable memory
becomes one sample (the vector of the GPUs' harvestable GiB, lasting that interval), floored
to ``memory_step_gib`` and capped at ``max_memory_states`` states by perfmodel's documented
coarsening. Sketches merge but do not subtract, so unlike the other totals a snapshot's
``memory`` covers only its own interval ``(memory_since, at]``: from the previous snapshot
(or ``start``) to the snapshot.

:meth:`Accounting.snapshot` copies the totals and starts the next memory interval;
:func:`window_between` subtracts the cumulative totals of two snapshots and merges the memory
sketches of the snapshots in between, so a reporter that missed reports (API outage) still
covers the whole gap with its next one. :func:`window_summary` turns a window into perfmodel's
:class:`~gleaner.perfmodel.NodeSummary`, whose ``to_nodetrace_status`` writes the NodeTrace
status (:func:`to_nodetrace_status` does both). No I/O, no clocks.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt

from gleaner.api import GpuInfo, NodeTraceStatus, TraceSource
from gleaner.api.nodetrace import MAX_MEMORY_STATES
from gleaner.api.units import GIB
from gleaner.perfmodel import DEFAULT_STEP_GIB, GpuEvents, GpuSpec, MemoryHistogram, NodeSummary

HARVESTABLE_BUCKETS_GIB: tuple[float, ...] = (
    0.0,
    1.0,
    2.0,
    4.0,
    8.0,
    12.0,
    16.0,
    24.0,
    32.0,
    48.0,
    64.0,
    80.0,
    96.0,
    128.0,
    160.0,
    192.0,
)
"""Upper bounds (GiB) of the harvestable-memory histogram buckets (then +Inf)."""

_MEMORY_FOLD = 1024
"""Closed memory intervals buffered before they are folded into the sketch."""


@dataclass(slots=True)
class GpuTotals:
    """Cumulative totals of one GPU."""

    offline_enabled_s: float = 0.0
    online_busy_s: float = 0.0
    preemptions: int = 0
    online_requests: int = 0
    max_preemptions_per_request: int = 0
    request_preemptions: dict[int, int] = field(default_factory=dict)
    """preemptions seen by a request → how many finished requests saw that many."""
    reclamations: int = 0
    reclaimed_bytes: int = 0
    kv_blocks_invalidated: int = 0
    harvestable_bucket_s: list[float] = field(
        default_factory=lambda: [0.0] * (len(HARVESTABLE_BUCKETS_GIB) + 1)
    )
    """Seconds with harvestable memory in each bucket (not cumulative; last is +Inf)."""
    harvestable_byte_s: float = 0.0
    """∫ harvestable bytes dt (the histogram's sum)."""


@dataclass(slots=True)
class PairTotals:
    overlap_s: float = 0.0
    union_s: float = 0.0


@dataclass(slots=True)
class Totals:
    """Everything :class:`Accounting` counted from ``start`` to ``at``."""

    start: float
    at: float
    gpus: dict[int, GpuTotals]
    pairs: dict[tuple[int, int], PairTotals]
    job_timeslice_s: dict[str, float]
    """``namespace/name`` → timeslice seconds."""
    memory: MemoryHistogram
    """Joint harvestable-memory sketch of ``(memory_since, at]`` (columns in GPU order)."""
    memory_since: float
    """Start of the memory sketch's interval: the previous snapshot, or ``start``."""

    @property
    def seconds(self) -> float:
        return self.at - self.start

    @property
    def memory_step_gib(self) -> float:
        """The memory sketch's effective step (GiB per level)."""
        return self.memory.step_gib


@dataclass(slots=True)
class Accounting:
    """Cumulative accounting of one node; see the module docstring."""

    gpus: Sequence[int]
    start: float = 0.0
    memory_step_gib: float = DEFAULT_STEP_GIB
    max_memory_states: int = MAX_MEMORY_STATES
    _now: float = 0.0
    _busy: dict[int, float] = field(default_factory=dict)
    _enabled: dict[int, float] = field(default_factory=dict)
    _harvestable: dict[int, int] = field(default_factory=dict)
    _bucket_of: dict[int, int] = field(default_factory=dict)
    """GPU → histogram bucket of its harvestable memory now (looked up once per change)."""
    _busy_at: dict[int, float] = field(default_factory=dict)
    """GPU → the time its ``online_busy_s`` is integrated up to (the same for the other
    stamps below: integrated up to then, the levels unchanged since)."""
    _enabled_at: dict[int, float] = field(default_factory=dict)
    _free_at: dict[int, float] = field(default_factory=dict)
    _pair_at: dict[tuple[int, int], float] = field(default_factory=dict)
    _pairs_of: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    """GPU → the pairs it belongs to."""
    _jobs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _job_at: dict[str, float] = field(default_factory=dict)
    _jobs_of: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """GPU → the offline jobs placed on it."""
    _totals: Totals = field(init=False)
    _mem_vectors: list[tuple[int, ...]] = field(default_factory=list)
    """Harvestable bytes per GPU of each closed interval of the current memory interval."""
    _mem_seconds: list[float] = field(default_factory=list)
    _mem_open_at: float = 0.0
    """When the current harvestable vector started (it has lasted until now)."""
    _mem_sketch: MemoryHistogram | None = None
    """Closed intervals folded so far (since ``_mem_since``)."""
    _mem_since: float = 0.0

    def __post_init__(self) -> None:
        if self.memory_step_gib <= 0:
            raise ValueError("memory_step_gib must be positive")
        if self.max_memory_states < 1:
            raise ValueError("max_memory_states must be >= 1")
        self.gpus = tuple(sorted(set(self.gpus)))
        start = self._now = self._mem_open_at = self.start
        self._busy = dict.fromkeys(self.gpus, 0.0)
        self._enabled = dict.fromkeys(self.gpus, 0.0)
        self._harvestable = dict.fromkeys(self.gpus, 0)
        self._bucket_of = dict.fromkeys(self.gpus, _bucket(0))
        self._busy_at = dict.fromkeys(self.gpus, start)
        self._enabled_at = dict.fromkeys(self.gpus, start)
        self._free_at = dict.fromkeys(self.gpus, start)
        pairs = _pairs(self.gpus)
        self._pair_at = dict.fromkeys(pairs, start)
        self._pairs_of = {g: tuple(pr for pr in pairs if g in pr) for g in self.gpus}
        self._jobs_of = dict.fromkeys(self.gpus, ())
        self._mem_since = start
        self._mem_sketch = self._empty_sketch()
        self._totals = Totals(
            start=start,
            at=start,
            gpus={g: GpuTotals() for g in self.gpus},
            pairs={pair: PairTotals() for pair in pairs},
            job_timeslice_s={},
            memory=self._mem_sketch,
            memory_since=start,
        )

    @property
    def totals(self) -> Totals:
        """The live cumulative totals (``memory``: the current interval's sketch so far)."""
        self._integrate_all()
        tot = self._tot()
        tot.memory = self._memory_sketch()
        tot.memory_since = self._mem_since
        return tot

    @property
    def now(self) -> float:
        return self._now

    # -- levels ---------------------------------------------------------------------------

    def set_online_busy(self, t: float, gpu: int, level: float | bool) -> None:
        if not self._now >= t > -math.inf:  # later, or not finite (_move raises)
            self._move(t)
        # The shims' 0/1 levels without a call; anything else is checked by _level.
        x = 1.0 if level == 1.0 else 0.0 if level == 0.0 else _level(level)
        try:
            old = self._busy[gpu]
        except KeyError:
            raise self._unknown(gpu) from None
        if x != old:
            self._integrate_busy(gpu)
            self._busy[gpu] = x

    def set_offline_enabled(self, t: float, gpu: int, level: float | bool) -> None:
        if not self._now >= t > -math.inf:
            self._move(t)
        x = 1.0 if level == 1.0 else 0.0 if level == 0.0 else _level(level)
        try:
            old = self._enabled[gpu]
        except KeyError:
            raise self._unknown(gpu) from None
        if x != old:
            self._integrate_enabled(gpu)
            self._enabled[gpu] = x

    def set_harvestable(self, t: float, gpu: int, free_bytes: int) -> None:
        if not self._now >= t > -math.inf:
            self._move(t)
        g = self._gpu(gpu)
        value = max(0, int(free_bytes))
        if value == self._harvestable[g]:
            return
        self._integrate_free(g)
        self._close_memory_interval()
        self._harvestable[g] = value
        self._bucket_of[g] = _bucket(value)

    def set_offline_jobs(self, t: float, jobs: Mapping[str, Iterable[int]]) -> None:
        """The offline jobs on this node now: ``namespace/name`` → GPU indices."""
        self.advance(t)
        self._jobs = {
            job: tuple(sorted(g for g in gpus if g in self._busy)) for job, gpus in jobs.items()
        }
        self._job_at = dict.fromkeys(self._jobs, self._now)
        self._jobs_of = {
            g: tuple(j for j, gpus in self._jobs.items() if g in gpus) for g in self.gpus
        }
        for job in self._jobs:
            self._tot().job_timeslice_s.setdefault(job, 0.0)

    def offline_jobs(self) -> dict[str, tuple[int, ...]]:
        return dict(self._jobs)

    def online_busy_level(self, gpu: int) -> float:
        return self._busy[gpu]

    def offline_enabled_level(self, gpu: int) -> float:
        return self._enabled[gpu]

    def harvestable_bytes(self, gpu: int) -> int:
        return self._harvestable[gpu]

    # -- events ---------------------------------------------------------------------------

    def add_preemption(self, gpu: int, count: int = 1) -> None:
        try:
            self._totals.gpus[gpu].preemptions += count
        except KeyError:
            raise self._unknown(gpu) from None

    def add_online_request(self, gpu: int, preemptions: int) -> None:
        """An online request on ``gpu`` finished having seen ``preemptions`` preemptions."""
        try:
            g = self._totals.gpus[gpu]
        except KeyError:
            raise self._unknown(gpu) from None
        g.online_requests += 1
        g.request_preemptions[preemptions] = g.request_preemptions.get(preemptions, 0) + 1
        g.max_preemptions_per_request = max(g.max_preemptions_per_request, preemptions)

    def add_reclamation(self, gpu: int, reclaimed_bytes: int, blocks_invalidated: int) -> None:
        g = self._tot().gpus[self._gpu(gpu)]
        g.reclamations += 1
        g.reclaimed_bytes += reclaimed_bytes
        g.kv_blocks_invalidated += blocks_invalidated

    # -- time -----------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Integrate the current levels up to ``t`` (earlier times: up to now)."""
        if not self._now >= t > -math.inf:
            self._move(t)
        self._integrate_all()

    def snapshot(self, t: float | None = None) -> Totals:
        """A copy of the totals up to ``t`` (default: the last event); starts a new memory
        interval, so keep every snapshot a window will span (see :func:`window_between`)."""
        self.advance(self._now if t is None else t)
        tot = self._tot()
        sketch = self._memory_sketch()
        tot.memory = self._empty_sketch()  # immutable: shared with the copy, not deep-copied
        out = copy.deepcopy(tot)
        out.memory = sketch
        out.memory_since = self._mem_since
        self._mem_vectors.clear()
        self._mem_seconds.clear()
        self._mem_open_at = self._now
        self._mem_sketch = self._empty_sketch()
        self._mem_since = self._now
        tot.memory, tot.memory_since = self._mem_sketch, self._mem_since
        return out

    # -- internals ------------------------------------------------------------------------

    def _tot(self) -> Totals:
        return self._totals

    def _gpu(self, gpu: int) -> int:
        if gpu not in self._busy:
            raise self._unknown(gpu)
        return gpu

    def _unknown(self, gpu: int) -> KeyError:
        return KeyError(f"GPU {gpu} is not in this node's inventory {list(self.gpus)}")

    def _move(self, t: float) -> None:
        """Now is ``t`` if later (nothing is integrated yet); raises if ``t`` is not finite."""
        if not math.isfinite(t):
            raise ValueError("time must be finite")
        if t > self._now:
            self._now = t

    def _integrate_busy(self, g: int) -> None:
        """Integrate what GPU ``g``'s busy level feeds up to now (it is about to change)."""
        now, busy = self._now, self._busy
        tot = self._totals
        dt = now - self._busy_at[g]
        if dt > 0:
            tot.gpus[g].online_busy_s += busy[g] * dt
            self._busy_at[g] = now
        pair_at, pairs = self._pair_at, tot.pairs
        for pair in self._pairs_of[g]:
            dt = now - pair_at[pair]
            if dt > 0:
                a, b = pair
                ba, bb = busy[a], busy[b]
                pt = pairs[pair]
                # min and max without the builtins' call (this runs at every busy edge)
                if ba < bb:
                    pt.overlap_s += ba * dt
                    pt.union_s += bb * dt
                else:
                    pt.overlap_s += bb * dt
                    pt.union_s += ba * dt
                pair_at[pair] = now

    def _integrate_enabled(self, g: int) -> None:
        """Integrate what GPU ``g``'s enabled level feeds up to now (it is about to change)."""
        now, enabled = self._now, self._enabled
        tot = self._totals
        dt = now - self._enabled_at[g]
        if dt > 0:
            tot.gpus[g].offline_enabled_s += enabled[g] * dt
            self._enabled_at[g] = now
        jobs = self._jobs_of[g]
        if jobs:
            slices, job_at = tot.job_timeslice_s, self._job_at
            for job in jobs:
                dt = now - job_at[job]
                if dt > 0:
                    level = 1.0  # min over the job's GPUs (it has g, so at least one)
                    for x in self._jobs[job]:
                        if enabled[x] < level:
                            level = enabled[x]
                    slices[job] = slices.get(job, 0.0) + level * dt
                    job_at[job] = now

    def _integrate_free(self, g: int) -> None:
        """Integrate GPU ``g``'s harvestable memory up to now (it is about to change)."""
        dt = self._now - self._free_at[g]
        if dt > 0:
            gt = self._tot().gpus[g]
            gt.harvestable_byte_s += self._harvestable[g] * dt
            gt.harvestable_bucket_s[self._bucket_of[g]] += dt
            self._free_at[g] = self._now

    def _integrate_all(self) -> None:
        """Integrate every level up to now."""
        now = self._now
        tot = self._tot()
        for g in self.gpus:
            self._integrate_busy(g)
            self._integrate_enabled(g)
            self._integrate_free(g)
        for job in self._jobs:  # a job placed on no GPU has timeslice 0
            self._job_at[job] = now
        tot.at = now

    def _empty_sketch(self) -> MemoryHistogram:
        return MemoryHistogram.empty(len(self.gpus), self.memory_step_gib)

    def _close_memory_interval(self) -> None:
        """The harvestable vector is about to change: its interval becomes one sample."""
        open_s = self._now - self._mem_open_at
        if open_s > 0 and self.gpus:
            self._mem_vectors.append(tuple(self._harvestable[g] for g in self.gpus))
            self._mem_seconds.append(open_s)
        self._mem_open_at = self._now
        if len(self._mem_vectors) >= _MEMORY_FOLD:
            self._mem_sketch = self._fold(self._mem_vectors, self._mem_seconds)
            self._mem_vectors.clear()
            self._mem_seconds.clear()

    def _fold(
        self, vectors: Sequence[tuple[int, ...]], seconds: Sequence[float]
    ) -> MemoryHistogram:
        """The folded sketch merged with these samples (harvestable bytes, seconds each)."""
        assert self._mem_sketch is not None
        if not vectors:
            return self._mem_sketch
        free_gib = np.asarray(vectors, dtype=np.float64).reshape(len(vectors), -1) / GIB
        secs = np.asarray(seconds, dtype=np.float64)
        part = MemoryHistogram.from_samples(
            free_gib, secs, self.memory_step_gib, self.max_memory_states
        )
        return self._mem_sketch.merge(part, self.max_memory_states)

    def _memory_sketch(self) -> MemoryHistogram:
        """The current memory interval's sketch, the still-open interval included."""
        vectors, seconds = list(self._mem_vectors), list(self._mem_seconds)
        open_s = self._now - self._mem_open_at
        if open_s > 0 and self.gpus:
            vectors.append(tuple(self._harvestable[g] for g in self.gpus))
            seconds.append(open_s)
        return self._fold(vectors, seconds)


def _pairs(gpus: Sequence[int]) -> list[tuple[int, int]]:
    return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]


def _level(value: float | bool) -> float:
    if value == 1.0 or value == 0.0:  # the shims' 0/1 levels, without float() and compares
        return 1.0 if value else 0.0
    x = float(value)
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"level must be within [0, 1], got {x}")
    return x


def _bucket(free_bytes: int) -> int:
    gib = free_bytes / GIB
    for i, le in enumerate(HARVESTABLE_BUCKETS_GIB):
        if gib <= le:
            return i
    return len(HARVESTABLE_BUCKETS_GIB)


def window_between(
    before: Totals | None,
    after: Totals,
    between: Sequence[Totals] = (),
    *,
    max_memory_states: int = MAX_MEMORY_STATES,
) -> Totals:
    """The totals of the window from ``before`` (None: from the start) to ``after``.

    ``between`` are the snapshots taken after ``before`` and before ``after``, in order: the
    window's memory sketch is the merge of their and ``after``'s interval sketches. Raises
    ValueError when snapshots are out of order or one is missing (the intervals do not chain).
    """
    chain = [*between, after]
    prev = after.start if before is None else before.at
    for snap in chain:
        if snap.at < prev:
            raise ValueError("snapshots out of order")
        if not math.isclose(snap.memory_since, prev, rel_tol=0.0, abs_tol=1e-9):
            raise ValueError(
                f"missing snapshot: a memory interval starts at {snap.memory_since}, "
                f"the previous one ended at {prev}"
            )
        prev = snap.at
    memory = chain[0].memory.capped(max_memory_states)
    for snap in chain[1:]:
        memory = memory.merge(snap.memory, max_memory_states)
    if before is None:
        out = copy.deepcopy(after)
        out.memory, out.memory_since = memory, after.start
        return out
    gpus: dict[int, GpuTotals] = {}
    for g, a in after.gpus.items():
        b = before.gpus.get(g, GpuTotals())
        rp = {
            k: v - b.request_preemptions.get(k, 0)
            for k, v in a.request_preemptions.items()
            if v - b.request_preemptions.get(k, 0) > 0
        }
        gpus[g] = GpuTotals(
            offline_enabled_s=max(0.0, a.offline_enabled_s - b.offline_enabled_s),
            online_busy_s=max(0.0, a.online_busy_s - b.online_busy_s),
            preemptions=a.preemptions - b.preemptions,
            online_requests=a.online_requests - b.online_requests,
            max_preemptions_per_request=max(rp, default=0),
            request_preemptions=rp,
            reclamations=a.reclamations - b.reclamations,
            reclaimed_bytes=a.reclaimed_bytes - b.reclaimed_bytes,
            kv_blocks_invalidated=a.kv_blocks_invalidated - b.kv_blocks_invalidated,
            harvestable_bucket_s=[
                max(0.0, x - y)
                for x, y in zip(a.harvestable_bucket_s, b.harvestable_bucket_s, strict=True)
            ],
            harvestable_byte_s=max(0.0, a.harvestable_byte_s - b.harvestable_byte_s),
        )
    pairs = {
        k: PairTotals(
            overlap_s=max(0.0, p.overlap_s - before.pairs.get(k, PairTotals()).overlap_s),
            union_s=max(0.0, p.union_s - before.pairs.get(k, PairTotals()).union_s),
        )
        for k, p in after.pairs.items()
    }
    jobs = {
        j: max(0.0, s - before.job_timeslice_s.get(j, 0.0))
        for j, s in after.job_timeslice_s.items()
    }
    return Totals(
        start=before.at,
        at=after.at,
        gpus=gpus,
        pairs=pairs,
        job_timeslice_s=jobs,
        memory=memory,
        memory_since=before.at,
    )


def window_summary(
    window: Totals,
    *,
    node: str,
    inventory: Sequence[GpuInfo],
    wall_start: datetime,
    wall_end: datetime,
    offline_jobs: Mapping[int, str] | None = None,
) -> NodeSummary:
    """A window as perfmodel's :class:`~gleaner.perfmodel.NodeSummary` (GPUs by index).

    Seconds are clipped to the window (float sums may overshoot by an ulp); GPU specs come
    from ``inventory`` (``offline_jobs``: GPU → ``namespace/name``).
    """
    jobs = dict(offline_jobs or {})
    idx = sorted(window.gpus)
    pos = {g: p for p, g in enumerate(idx)}
    inv = {g.index: g for g in inventory}
    specs = tuple(
        GpuSpec(index=g, uuid=inv[g].uuid, product=inv[g].product, memory_gib=inv[g].memory_gi_b)
        if g in inv
        else GpuSpec(index=g)
        for g in idx
    )
    seconds = max(window.seconds, 0.0)
    per = [window.gpus[g] for g in idx]
    busy = np.array([min(t.online_busy_s, seconds) for t in per], dtype=np.float64)
    enabled = np.array([min(t.offline_enabled_s, seconds) for t in per], dtype=np.float64)
    n = len(idx)
    overlap = np.full((n, n), np.nan)
    union = np.full((n, n), np.nan)
    np.fill_diagonal(overlap, busy)
    np.fill_diagonal(union, busy)
    for (a, b), p in window.pairs.items():
        i, j = pos[a], pos[b]
        overlap[i, j] = overlap[j, i] = p.overlap_s
        union[i, j] = union[j, i] = p.union_s

    def counts(values: Iterable[int]) -> npt.NDArray[np.int64]:
        return np.fromiter(values, dtype=np.int64, count=n)

    events = GpuEvents(
        preemptions=counts(t.preemptions for t in per),
        online_requests=counts(t.online_requests for t in per),
        max_preemptions_per_request=counts(t.max_preemptions_per_request for t in per),
        reclamations=counts(t.reclamations for t in per),
        reclaimed_bytes=counts(t.reclaimed_bytes for t in per),
    )
    return NodeSummary(
        node=node,
        gpus=specs,
        window_seconds=seconds,
        online_busy_seconds=busy,
        offline_enabled_seconds=enabled,
        pair_overlap_seconds=overlap,
        pair_union_seconds=union,
        memory=window.memory,
        last_report_time=wall_end,
        window_start=wall_start,
        window_end=wall_end,
        events=events,
        offline_jobs=tuple(jobs.get(g) for g in idx),
    )


def to_nodetrace_status(
    window: Totals,
    *,
    inventory: Sequence[GpuInfo],
    wall_start: datetime,
    wall_end: datetime,
    offline_jobs: Mapping[int, str] | None = None,
    source: TraceSource = TraceSource.AGENT,
    agent_version: str = "",
    node: str = "",
) -> NodeTraceStatus:
    """The NodeTrace status of one window (``offline_jobs``: GPU → ``namespace/name``).

    Written by perfmodel (:meth:`NodeSummary.to_nodetrace_status`), so what the agent
    publishes is exactly what the scheduler's reader (``NodeSummary.from_nodetrace``) expects.
    """
    summary = window_summary(
        window,
        node=node,
        inventory=inventory,
        wall_start=wall_start,
        wall_end=wall_end,
        offline_jobs=offline_jobs,
    )
    jobs = len(set((offline_jobs or {}).values()))
    return summary.to_nodetrace_status(
        source=source, agent_version=agent_version, offline_jobs=jobs, now=wall_end
    )
