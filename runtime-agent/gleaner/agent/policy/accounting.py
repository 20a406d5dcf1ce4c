"""Node accounting: what the agent saw, as cumulative seconds and counts (pure).

Contract. :class:`Accounting` integrates piecewise-constant signals of one node's GPUs over
time, fed in non-decreasing time order:

- online busy level per GPU (0..1; 0/1 from the shims, fractions when replaying a trace),
- offline enabled level per GPU (0..1),
- harvestable memory per GPU (bytes),

and counts events (preemptions, finished online requests with their preemption counts,
reclamations with bytes and invalidated KV blocks). Values hold from the time they are set
until the next change. Derived totals, all cumulative since ``start``:

- per GPU: offline-enabled seconds, online-busy seconds, counts as above;
- per GPU pair (a < b): busy overlap ``∫ min(b_a, b_b) dt`` and union ``∫ max(b_a, b_b) dt``
  (exact for 0/1 levels; the trace-file rule for fractions);
- per offline job: timeslice seconds ``∫ min over the job's GPUs of enabled dt`` (a
  multi-GPU job runs in lockstep, so it progresses only while all its GPUs are enabled);
- the joint harvestable-memory sketch: seconds per state, a state being the vector of every
  GPU's harvestable GiB floored to ``memory_step_gib`` (NodeTrace ``status.memory``);
- per GPU: time-weighted harvestable-memory histogram over fixed byte buckets.

:meth:`Accounting.snapshot` copies the totals; :func:`window_between` subtracts two
snapshots, so a reporter that missed reports (API outage) still covers the whole gap with
its next one. :func:`to_nodetrace_status` turns a window into the NodeTrace status.
No I/O, no clocks.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gleaner.api import (
    GpuInfo,
    GpuPair,
    GpuTrace,
    MemorySketch,
    MemoryState,
    NodeTraceStatus,
    TraceSource,
    TraceWindow,
)
from gleaner.api.nodetrace import MAX_MEMORY_STATES

GIB = 1 << 30

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
    memory_states: dict[tuple[int, ...], float]
    """Joint harvestable memory: levels (GiB = level · step) → seconds."""
    memory_step_gib: float

    @property
    def seconds(self) -> float:
        return self.at - self.start


@dataclass(slots=True)
class Accounting:
    """Cumulative accounting of one node; see the module docstring."""

    gpus: Sequence[int]
    start: float = 0.0
    memory_step_gib: float = 0.5
    _now: float = 0.0
    _busy: dict[int, float] = field(default_factory=dict)
    _enabled: dict[int, float] = field(default_factory=dict)
    _harvestable: dict[int, int] = field(default_factory=dict)
    _jobs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _totals: Totals | None = None

    def __post_init__(self) -> None:
        if self.memory_step_gib <= 0:
            raise ValueError("memory_step_gib must be positive")
        self.gpus = tuple(sorted(set(self.gpus)))
        self._now = self.start
        self._busy = dict.fromkeys(self.gpus, 0.0)
        self._enabled = dict.fromkeys(self.gpus, 0.0)
        self._harvestable = dict.fromkeys(self.gpus, 0)
        self._totals = Totals(
            start=self.start,
            at=self.start,
            gpus={g: GpuTotals() for g in self.gpus},
            pairs={pair: PairTotals() for pair in _pairs(self.gpus)},
            job_timeslice_s={},
            memory_states={},
            memory_step_gib=self.memory_step_gib,
        )

    @property
    def totals(self) -> Totals:
        assert self._totals is not None
        return self._totals

    @property
    def now(self) -> float:
        return self._now

    # -- levels ---------------------------------------------------------------------------

    def set_online_busy(self, t: float, gpu: int, level: float | bool) -> None:
        self.advance(t)
        self._busy[self._gpu(gpu)] = _level(level)

    def set_offline_enabled(self, t: float, gpu: int, level: float | bool) -> None:
        self.advance(t)
        self._enabled[self._gpu(gpu)] = _level(level)

    def set_harvestable(self, t: float, gpu: int, free_bytes: int) -> None:
        self.advance(t)
        self._harvestable[self._gpu(gpu)] = max(0, int(free_bytes))

    def set_offline_jobs(self, t: float, jobs: Mapping[str, Iterable[int]]) -> None:
        """The offline jobs on this node now: ``namespace/name`` → GPU indices."""
        self.advance(t)
        self._jobs = {
            job: tuple(sorted(g for g in gpus if g in self._busy)) for job, gpus in jobs.items()
        }
        for job in self._jobs:
            self.totals.job_timeslice_s.setdefault(job, 0.0)

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
        self.totals.gpus[self._gpu(gpu)].preemptions += count

    def add_online_request(self, gpu: int, preemptions: int) -> None:
        """An online request on ``gpu`` finished having seen ``preemptions`` preemptions."""
        g = self.totals.gpus[self._gpu(gpu)]
        g.online_requests += 1
        g.request_preemptions[preemptions] = g.request_preemptions.get(preemptions, 0) + 1
        g.max_preemptions_per_request = max(g.max_preemptions_per_request, preemptions)

    def add_reclamation(self, gpu: int, reclaimed_bytes: int, blocks_invalidated: int) -> None:
        g = self.totals.gpus[self._gpu(gpu)]
        g.reclamations += 1
        g.reclaimed_bytes += reclaimed_bytes
        g.kv_blocks_invalidated += blocks_invalidated

    # -- time -----------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Integrate the current levels up to ``t`` (earlier times are ignored)."""
        if not math.isfinite(t):
            raise ValueError("time must be finite")
        dt = t - self._now
        if dt <= 0:
            return
        tot = self.totals
        for g in self.gpus:
            gt = tot.gpus[g]
            gt.offline_enabled_s += self._enabled[g] * dt
            gt.online_busy_s += self._busy[g] * dt
            free = self._harvestable[g]
            gt.harvestable_byte_s += free * dt
            gt.harvestable_bucket_s[_bucket(free)] += dt
        for (a, b), pt in tot.pairs.items():
            ba, bb = self._busy[a], self._busy[b]
            pt.overlap_s += min(ba, bb) * dt
            pt.union_s += max(ba, bb) * dt
        for job, gpus in self._jobs.items():
            level = min((self._enabled[g] for g in gpus), default=0.0)
            tot.job_timeslice_s[job] = tot.job_timeslice_s.get(job, 0.0) + level * dt
        if self.gpus:
            state = tuple(
                math.floor(self._harvestable[g] / GIB / self.memory_step_gib + 1e-9)
                for g in self.gpus
            )
            tot.memory_states[state] = tot.memory_states.get(state, 0.0) + dt
        self._now = t
        tot.at = t

    def snapshot(self, t: float | None = None) -> Totals:
        """A copy of the totals, integrated up to ``t`` (default: the last event)."""
        if t is not None:
            self.advance(t)
        return copy.deepcopy(self.totals)

    def _gpu(self, gpu: int) -> int:
        if gpu not in self._busy:
            raise KeyError(f"GPU {gpu} is not in this node's inventory {list(self.gpus)}")
        return gpu


def _pairs(gpus: Sequence[int]) -> list[tuple[int, int]]:
    return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]


def _level(value: float | bool) -> float:
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


def window_between(before: Totals | None, after: Totals) -> Totals:
    """The totals of the window from ``before`` (None: from the start) to ``after``."""
    if before is None:
        return copy.deepcopy(after)
    if before.at > after.at:
        raise ValueError("snapshots out of order")
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
    states = {
        st: s - before.memory_states.get(st, 0.0)
        for st, s in after.memory_states.items()
        if s - before.memory_states.get(st, 0.0) > 1e-9
    }
    return Totals(
        start=before.at,
        at=after.at,
        gpus=gpus,
        pairs=pairs,
        job_timeslice_s=jobs,
        memory_states=states,
        memory_step_gib=after.memory_step_gib,
    )


def cap_states(
    states: Mapping[tuple[int, ...], float], step_gib: float, max_states: int = MAX_MEMORY_STATES
) -> tuple[dict[tuple[int, ...], float], float]:
    """Double the step (halving levels with floor division) until at most ``max_states``."""
    out = dict(states)
    while len(out) > max_states:
        merged: dict[tuple[int, ...], float] = {}
        for st, s in out.items():
            key = tuple(x // 2 for x in st)
            merged[key] = merged.get(key, 0.0) + s
        out = merged
        step_gib *= 2
    return out, step_gib


def harvestable_quantile(window: Totals, q: float) -> float | None:
    """Lower ``q``-quantile (GiB) of the pooled per-GPU harvestable memory of a window."""
    pairs: list[tuple[int, float]] = []
    for st, s in window.memory_states.items():
        pairs.extend((lvl, s) for lvl in st)
    if not pairs:
        return None
    pairs.sort()
    total = sum(s for _, s in pairs)
    acc = 0.0
    for lvl, s in pairs:
        acc += s
        if acc >= q * total - 1e-12 * total:
            return lvl * window.memory_step_gib
    return pairs[-1][0] * window.memory_step_gib


def to_nodetrace_status(
    window: Totals,
    *,
    inventory: Sequence[GpuInfo],
    wall_start: datetime,
    wall_end: datetime,
    offline_jobs: Mapping[int, str] | None = None,
    source: TraceSource = TraceSource.AGENT,
    agent_version: str = "",
) -> NodeTraceStatus:
    """The NodeTrace status of one window (``offline_jobs``: GPU → ``namespace/name``)."""
    jobs = dict(offline_jobs or {})
    seconds = max(window.seconds, 1e-9)
    per_gpu = [
        GpuTrace(
            index=g,
            offline_enabled_seconds=min(t.offline_enabled_s, seconds),
            online_busy_seconds=min(t.online_busy_s, seconds),
            preemptions=t.preemptions,
            online_requests=t.online_requests,
            max_preemptions_per_request=t.max_preemptions_per_request,
            reclamations=t.reclamations,
            reclaimed_bytes=t.reclaimed_bytes,
            offline_job=jobs.get(g),
        )
        for g, t in sorted(window.gpus.items())
    ]
    pairs = [
        GpuPair(
            gpu_a=a,
            gpu_b=b,
            overlap_seconds=min(p.overlap_s, p.union_s),
            union_seconds=p.union_s,
        )
        for (a, b), p in sorted(window.pairs.items())
    ]
    states, step = cap_states(window.memory_states, window.memory_step_gib)
    sketch = MemorySketch(
        step_gi_b=step,
        states=[
            MemoryState(free_gi_b=[lvl * step for lvl in st], seconds=s)
            for st, s in sorted(states.items())
            if s > 0
        ],
    )
    n = len(per_gpu)
    idle = (
        sum(t.offline_enabled_seconds for t in per_gpu) / (n * seconds) if n and seconds else None
    )
    p10 = harvestable_quantile(window, 0.10)
    return NodeTraceStatus(
        source=source,
        agent_version=agent_version,
        last_report_time=wall_end,
        gpus=list(inventory),
        window=TraceWindow(start=wall_start, end=wall_end, seconds=seconds),
        per_gpu=per_gpu,
        pairs=pairs,
        memory=sketch,
        idle_fraction=None if idle is None else min(1.0, max(0.0, idle)),
        harvestable_memory_p10_gi_b=p10,
        offline_jobs=len(set(jobs.values())),
    )
