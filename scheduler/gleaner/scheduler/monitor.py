"""SLA monitor decisions: keep or evict a running offline job, backoff, give-up (pure).

Contract. The operator (or the simulator) measures, per window, the throughput a placed
job achieved as a fraction of its standalone throughput, and keeps the recent windows in
an :class:`SLAHistory`. :func:`decide_sla` answers *keep* or *evict* with hysteresis:

- **grace**: windows that end within ``grace_seconds`` of the placement are ignored (a
  fresh worker warms up: loads weights, fills its KV cache) and the job is kept;
- **k of n**: once out of grace, the job is evicted only when at least
  ``violation_windows`` (k) of its last ``history_windows`` (n) windows missed the SLA;
  a window *misses* when ``observed < sla * (1 - tolerance)``. One bad window never
  evicts on its own unless k = 1.

After an eviction the job is requeued away from the node it missed on:
:func:`plan_after_eviction` adds that node to the job's excluded nodes, and either sets
``next_attempt_after`` by exponential backoff (:func:`next_attempt_after`: ``base * 2^(e-1)``
capped at ``backoff_max_seconds`` for the e-th eviction) or gives up as Failed when the
eviction count reaches the job's ``maxEvictions``.

**SLA windows.** The monitor measures short *samples* (one per ``window_seconds``, the
operator's measuring interval), but a job's throughput SLA is judged over its own *SLA
window* (``spec.slaWindow``, tens of minutes by default: batch throughput is a rate over a
long stretch, and a short dip inside a stretch that met the SLA is not a miss).
:func:`sla_windows` groups the samples that ended after the grace period into consecutive
SLA windows aligned at the end of grace, ``(start + i*W, start + (i+1)*W]``; a window is
*closed* once samples cover it (or a later sample exists) and its fraction is the mean of
its samples. The k-of-n rule and every metric (``gleaner.scheduler.measures``) count
closed SLA windows. When the SLA window is not longer than a sample (or unset), every
sample is its own window, grace samples included, exactly as before SLA windows existed.
docs/scheduler.md ("SLA windows") describes the same rule.

Times are seconds (floats) on any clock the caller chooses (Unix time in the operator,
simulated time in the simulator). Nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum


@dataclass(frozen=True)
class SLAMonitorConfig:
    """How persistently a job must miss its SLA before it is evicted, and backoff."""

    window_seconds: float = 60.0
    """Length of one observation window, seconds (the operator's measuring interval)."""
    history_windows: int = 5
    """n: how many of the most recent windows the decision looks at."""
    violation_windows: int = 3
    """k: evict when at least this many of the last n windows missed the SLA."""
    grace_seconds: float = 300.0
    """Windows ending this soon after the placement are ignored (warm-up)."""
    tolerance: float = 0.02
    """Relative slack: a window misses only when observed < sla * (1 - tolerance)."""
    backoff_base_seconds: float = 30.0
    """Delay before the first re-placement attempt after an eviction, seconds."""
    backoff_max_seconds: float = 1800.0
    """Upper bound of the exponential backoff, seconds."""
    max_sla_window_seconds: float | None = None
    """Judge no job over a longer span than this (None: each job's ``spec.slaWindow``).
    For clusters and tests whose time runs in seconds: at or below ``window_seconds`` every
    sample is its own SLA window again."""

    def __post_init__(self) -> None:
        if self.history_windows < 1:
            raise ValueError("history_windows must be >= 1")
        if not 1 <= self.violation_windows <= self.history_windows:
            raise ValueError("violation_windows must be between 1 and history_windows")
        if self.window_seconds <= 0 or self.grace_seconds < 0:
            raise ValueError("window_seconds must be > 0 and grace_seconds >= 0")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if self.backoff_base_seconds < 0 or self.backoff_max_seconds < self.backoff_base_seconds:
            raise ValueError("need 0 <= backoff_base_seconds <= backoff_max_seconds")
        if self.max_sla_window_seconds is not None and self.max_sla_window_seconds <= 0:
            raise ValueError("max_sla_window_seconds must be > 0")


@dataclass(frozen=True)
class WindowObservation:
    """The throughput fraction a job achieved over one window ending at ``end``."""

    end: float
    throughput_fraction: float


@dataclass(frozen=True)
class SLAHistory:
    """What the monitor knows about one placement of one job (the SLA state)."""

    job: str
    """namespace/name."""
    sla: float
    """The job's throughputSLA."""
    node: str
    gpus: tuple[int, ...]
    placed_at: float
    """When this placement was decided (the grace period starts here)."""
    predicted: float = 0.0
    """The throughput fraction the scheduler predicted for this placement."""
    windows: tuple[WindowObservation, ...] = ()
    """Observed samples, oldest first (only the last ``max_windows`` are kept)."""
    max_windows: int = 64
    sla_window_seconds: float | None = None
    """The job's SLA window, seconds (``spec.slaWindow``); None: each sample is a window."""

    def observe(self, end: float, throughput_fraction: float) -> SLAHistory:
        """A copy with one more window (bounded; out-of-order windows are sorted in)."""
        windows = sorted(
            (*self.windows, WindowObservation(end, float(throughput_fraction))),
            key=lambda w: w.end,
        )
        return replace(self, windows=tuple(windows[-self.max_windows :]))

    def after_grace(self, grace_seconds: float) -> tuple[WindowObservation, ...]:
        """Windows that ended after the grace period."""
        return tuple(w for w in self.windows if w.end > self.placed_at + grace_seconds)


class SLAAction(StrEnum):
    KEEP = "keep"
    EVICT = "evict"


@dataclass(frozen=True)
class SLADecision:
    """The monitor's answer for one job at one time, with a human-readable reason."""

    action: SLAAction
    reason: str
    considered: int = 0
    """Windows the decision looked at (after grace, at most n)."""
    missed: int = 0
    """How many of them missed the SLA."""
    in_grace: bool = False

    @property
    def evict(self) -> bool:
        return self.action is SLAAction.EVICT


def window_missed(observed: float, sla: float, config: SLAMonitorConfig) -> bool:
    """Whether one window's observed fraction misses the SLA (with the tolerance)."""
    return observed < sla * (1.0 - config.tolerance)


def effective_sla_window(spec_seconds: float | None, config: SLAMonitorConfig) -> float | None:
    """The span a job is judged over: its ``spec.slaWindow`` capped by
    ``config.max_sla_window_seconds``."""
    cap = config.max_sla_window_seconds
    if spec_seconds is None:
        return cap
    return spec_seconds if cap is None else min(spec_seconds, cap)


def aggregates(history: SLAHistory, config: SLAMonitorConfig) -> bool:
    """Whether the SLA window of ``history`` spans several samples (else a sample is a window)."""
    w = history.sla_window_seconds
    return w is not None and w > config.window_seconds * (1.0 + 1e-9)


def sla_windows(history: SLAHistory, config: SLAMonitorConfig) -> tuple[WindowObservation, ...]:
    """The closed SLA windows of ``history`` after grace, oldest first (module docstring).

    Each is reported at the end of its span (``start + (i+1)*W``) with the mean fraction of
    its samples. Without aggregation (:func:`aggregates` false) these are the samples after
    grace, unchanged.
    """
    samples = history.after_grace(config.grace_seconds)
    if not aggregates(history, config):
        return samples
    assert history.sla_window_seconds is not None
    width = history.sla_window_seconds
    start = history.placed_at + config.grace_seconds
    buckets: dict[int, list[WindowObservation]] = {}
    for w in samples:
        # (start + i*W, start + (i+1)*W] holds bucket i; ceil keeps a sample ending
        # exactly on a boundary in the window it completes.
        i = max(0, math.ceil((w.end - start) / width - 1e-9) - 1)
        buckets.setdefault(i, []).append(w)
    last = max(buckets, default=-1)
    out: list[WindowObservation] = []
    for i in sorted(buckets):
        members = buckets[i]
        end = start + (i + 1) * width
        # Closed: the samples reach the window's end (half a sample of slack for a timer
        # that fires a little early), or a later window has begun (a gap left it short).
        closed = i < last or members[-1].end >= end - config.window_seconds / 2
        if closed:
            mean = sum(m.throughput_fraction for m in members) / len(members)
            out.append(WindowObservation(end, mean))
    return tuple(out)


def samples_needed(sla_window_seconds: float | None, config: SLAMonitorConfig) -> int:
    """How many samples a history must keep for the k-of-n rule over SLA windows (plus one
    window being filled); at least ``history_windows`` + 1."""
    per = 1
    if sla_window_seconds is not None and sla_window_seconds > config.window_seconds:
        per = math.ceil(sla_window_seconds / config.window_seconds)
    return (config.history_windows + 1) * per + 1


def decide_sla(history: SLAHistory, now: float, config: SLAMonitorConfig) -> SLADecision:
    """Keep or evict ``history.job`` at ``now`` (see the module docstring for the rule)."""
    grace_end = history.placed_at + config.grace_seconds
    if now < grace_end:
        return SLADecision(
            SLAAction.KEEP,
            f"in grace period for {grace_end - now:.0f}s more after placement",
            in_grace=True,
        )
    recent = sla_windows(history, config)[-config.history_windows :]
    missed = [w for w in recent if window_missed(w.throughput_fraction, history.sla, config)]
    k, n = config.violation_windows, config.history_windows
    if len(missed) >= k:
        mean = sum(w.throughput_fraction for w in recent) / len(recent)
        return SLADecision(
            SLAAction.EVICT,
            f"missed SLA {history.sla:.2f} in {len(missed)} of the last {len(recent)} windows "
            f"(observed mean {mean:.2f}, last {recent[-1].throughput_fraction:.2f}, "
            f"predicted {history.predicted:.2f})",
            considered=len(recent),
            missed=len(missed),
        )
    if not recent:
        reason = "no observation since the grace period ended"
    else:
        reason = f"missed SLA in {len(missed)} of the last {len(recent)} windows (evict at {k}/{n})"
    return SLADecision(SLAAction.KEEP, reason, considered=len(recent), missed=len(missed))


def backoff_seconds(eviction_count: int, config: SLAMonitorConfig) -> float:
    """Delay after the ``eviction_count``-th eviction: base * 2^(count-1), capped."""
    if eviction_count <= 0:
        return 0.0
    # Cap the exponent before raising to avoid float overflow on absurd counts.
    exponent = min(eviction_count - 1, 62)
    return float(min(config.backoff_max_seconds, config.backoff_base_seconds * 2.0**exponent))


def next_attempt_after(eviction_count: int, now: float, config: SLAMonitorConfig) -> float:
    """The earliest time the job may be placed again after its ``eviction_count``-th eviction."""
    return now + backoff_seconds(eviction_count, config)


@dataclass(frozen=True)
class EvictionPlan:
    """What happens to a job after an eviction: requeue with backoff, or give up."""

    eviction_count: int
    """Evictions so far, this one included."""
    failed: bool
    """True: the job reached maxEvictions and gives up as Failed."""
    next_attempt_after: float | None
    """No placement attempt before this time (None when failed)."""
    excluded_nodes: tuple[str, ...] = field(default_factory=tuple)
    """Nodes the job must not be placed on again (the one it missed on added)."""
    message: str = ""


def plan_after_eviction(
    node: str,
    previous_evictions: int,
    max_evictions: int,
    excluded_nodes: Iterable[str],
    now: float,
    config: SLAMonitorConfig,
) -> EvictionPlan:
    """Requeue away from ``node`` with backoff, or give up after ``max_evictions``.

    The job gives up when this eviction is its ``max_evictions``-th (so with the default
    of 3 it runs on at most three placements); 0 behaves like 1: the first eviction fails.
    """
    count = previous_evictions + 1
    excluded = tuple(dict.fromkeys([*excluded_nodes, node]))
    if count >= max_evictions:
        return EvictionPlan(
            count,
            failed=True,
            next_attempt_after=None,
            excluded_nodes=excluded,
            message=f"gave up after {count} SLA eviction(s) (maxEvictions {max_evictions})",
        )
    when = next_attempt_after(count, now, config)
    return EvictionPlan(
        count,
        failed=False,
        next_attempt_after=when,
        excluded_nodes=excluded,
        message=f"requeued away from {node}; next attempt in {when - now:.0f}s "
        f"(eviction {count} of at most {max_evictions})",
    )


def summarize(windows: Sequence[WindowObservation]) -> tuple[float, float, float]:
    """(mean, min, last) of the observed fractions; zeros when empty."""
    if not windows:
        return 0.0, 0.0, 0.0
    values = [w.throughput_fraction for w in windows]
    return sum(values) / len(values), min(values), values[-1]
