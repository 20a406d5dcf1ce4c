"""A forecast that knows the time of day: per-node summaries by hour, blended with the recent level.

Contract (pure; docs/perfmodel.md, "Time of day"). Online load follows a daily cycle, so the
trailing window a job is placed from says little about the hours the job will run in: placed
in the morning, the trailing night is idler than the day ahead. A :class:`DiurnalProfile`
keeps, per node, one :class:`~gleaner.perfmodel.summary.NodeSummary` per hour of the day
(UTC), so its size is bounded (24 summaries, each with a capped memory sketch) however long
the node has been observed:

- :meth:`DiurnalProfile.fold` adds one completed hour of one day to its slot; the hours of
  older days are first scaled by ``day_weight`` (an exponential forgetting per day, so a
  changed workload takes over within a few days). Summaries hold seconds, never ratios, so
  scaling (:func:`scaled`) changes the weight of a summary in a merge and nothing else.
- :func:`forecast` is the summary the model should be given for a placement decided at
  ``start`` that will run for ``horizon_seconds``: the hour slots covering the horizon, each
  weighted by the part of the horizon it covers, blended with the recent summary at weight
  ``recent_weight`` (the recent level: what the node does now, which the profile misses on
  a day unlike the others). Without any slot for the horizon it is the recent summary.

The result is an ordinary NodeSummary: every factor of the performance model (P_compute,
the pair overlap, the memory sketch) reads it unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.sketch import DEFAULT_MAX_STATES, MemoryHistogram
from gleaner.perfmodel.summary import NodeSummary

FloatArray = npt.NDArray[np.float64]

HOURS = 24
DEFAULT_DAY_WEIGHT = 0.7
"""Weight of the previous days' hour when a new day's hour is folded in."""
DEFAULT_RECENT_WEIGHT = 0.25
"""Share of the recent level in a forecast that has hour slots for its horizon."""


def scaled(summary: NodeSummary, factor: float) -> NodeSummary:
    """``summary`` with every duration multiplied by ``factor`` > 0: the same fractions and
    memory distribution, with ``factor`` times the weight in a :meth:`NodeSummary.merge`."""
    if not factor > 0 or not math.isfinite(factor):
        raise ValueError(f"scale factor must be positive and finite, got {factor}")
    enabled = summary.offline_enabled_seconds
    mem = summary.memory
    return replace(
        summary,
        window_seconds=summary.window_seconds * factor,
        online_busy_seconds=summary.online_busy_seconds * factor,
        offline_enabled_seconds=None if enabled is None else enabled * factor,
        pair_overlap_seconds=summary.pair_overlap_seconds * factor,
        pair_union_seconds=summary.pair_union_seconds * factor,
        memory=MemoryHistogram(mem.levels, mem.seconds * factor, mem.step_gib),
    )


def hour_of(t: datetime) -> int:
    """Hour of the day (0-23) of an aware datetime, in UTC."""
    return int((t.timestamp() // 3600) % HOURS)


@dataclass(frozen=True)
class DiurnalProfile:
    """One node's summaries by hour of the day (UTC), bounded to 24 (module docstring)."""

    node: str
    slots: tuple[NodeSummary | None, ...] = (None,) * HOURS
    day_weight: float = DEFAULT_DAY_WEIGHT

    def __post_init__(self) -> None:
        if len(self.slots) != HOURS:
            raise ValueError(f"a diurnal profile has {HOURS} hour slots, got {len(self.slots)}")
        if not 0 < self.day_weight <= 1:
            raise ValueError("day_weight must be in (0, 1]")

    def fold(self, hour: int, summary: NodeSummary) -> DiurnalProfile:
        """A copy with one completed hour of a new day added to slot ``hour`` (older days of
        that hour weighted by ``day_weight`` first). An empty summary changes nothing."""
        if not 0 <= hour < HOURS:
            raise ValueError(f"hour must be 0..23, got {hour}")
        if summary.node != self.node:
            raise ValueError(f"profile of {self.node} cannot take a summary of {summary.node}")
        if not summary.window_seconds > 0:
            return self
        old = self.slots[hour]
        new = summary if old is None else scaled(old, self.day_weight).merge(summary)
        slots = list(self.slots)
        slots[hour] = new
        return replace(self, slots=tuple(slots))

    @property
    def hours_known(self) -> int:
        """How many hour slots hold data."""
        return sum(1 for s in self.slots if s is not None and s.window_seconds > 0)


def horizon_hours(start: datetime, horizon_seconds: float) -> list[tuple[int, float]]:
    """(hour of day, seconds of the horizon in it) for [start, start + horizon), in order;
    an hour of the day met twice (a horizon over a day) appears twice."""
    if not horizon_seconds > 0:
        raise ValueError("horizon_seconds must be > 0")
    out: list[tuple[int, float]] = []
    t = start
    end = start + timedelta(seconds=horizon_seconds)
    while t < end:
        ts = t.timestamp()
        next_hour = (math.floor(ts / 3600) + 1) * 3600
        seconds = min(next_hour, end.timestamp()) - ts
        out.append((hour_of(t), seconds))
        t = t + timedelta(seconds=seconds)
    return out


def forecast(
    profile: DiurnalProfile,
    recent: NodeSummary,
    start: datetime,
    horizon_seconds: float,
    recent_weight: float = DEFAULT_RECENT_WEIGHT,
) -> NodeSummary:
    """The summary to predict from for [start, start + horizon) (module docstring).

    Each hour slot of the horizon is scaled to the seconds of the horizon it covers, so
    the seasonal part is the time-weighted mean of those hours; the recent summary is then
    scaled so that it makes ``recent_weight`` of the blend. Hours without a slot are left
    out (the others stand in for them); no slot at all returns ``recent`` unchanged.
    """
    if not 0 <= recent_weight <= 1:
        raise ValueError("recent_weight must be in [0, 1]")
    parts: list[NodeSummary] = []
    for hour, seconds in horizon_hours(start, horizon_seconds):
        slot = profile.slots[hour]
        if slot is not None and slot.window_seconds > 0:
            parts.append(scaled(slot, seconds / slot.window_seconds))
    if not parts or recent_weight >= 1:
        return recent
    seasonal = _merge_all(parts)
    if recent_weight <= 0 or not recent.window_seconds > 0:
        return replace(seasonal, last_report_time=recent.last_report_time or start)
    weight = seasonal.window_seconds * recent_weight / (1.0 - recent_weight)
    blended = seasonal.merge(scaled(recent, weight / recent.window_seconds))
    # The forecast is as fresh as the recent data (stale-node checks read this).
    return replace(blended, last_report_time=recent.last_report_time or start)


def worst_hours(
    profile: DiurnalProfile,
    recent: NodeSummary,
    start: datetime,
    horizon_seconds: float,
    recent_weight: float = DEFAULT_RECENT_WEIGHT,
    busy_scale: float = 1.0,
    mean: NodeSummary | None = None,
) -> NodeSummary:
    """The summary to *admit* a job by that runs [start, start + horizon): each GPU at its
    busiest hour of the horizon, its online load scaled by ``busy_scale``.

    Every hour of the horizon is first forecast on its own (:func:`forecast` over that
    hour, blended with the recent level at ``recent_weight``); each GPU then takes the
    highest online-busy share of those hours, times ``busy_scale`` >= 1 (at most 1: the
    spread of windows above the forecast that admission must cover,
    ``gleaner.perfmodel.admission.load_scale``), and its offline-enabled share shrinks in
    proportion to the idle share left. The pair overlap and the memory sketch are those of
    the whole horizon. A job admitted on it meets its SLA in the worst hour the profile
    knows for each of its GPUs, not just on average: a long job placed at night is judged
    by the day's peak it will run into. Without any slot for the horizon the recent
    summary stands in for every hour. It is a lower bound for admission, not a prediction
    of the mean: :func:`forecast` is that (``mean``: that forecast when the caller has
    it already, to skip computing it again).
    """
    if busy_scale < 1.0 or not math.isfinite(busy_scale):
        raise ValueError(f"busy_scale must be >= 1 and finite, got {busy_scale}")
    whole = mean or forecast(profile, recent, start, horizon_seconds, recent_weight)
    if not whole.window_seconds > 0:
        return whole

    # Each hour's forecast on its own is its slot blended with the recent level at
    # recent_weight (the recent level alone without a slot): fractions, no sketch merges.
    def fractions(s: NodeSummary) -> tuple[FloatArray, FloatArray]:
        return s.online_busy_seconds / s.window_seconds, s.enabled_or_estimate() / s.window_seconds

    has_recent = recent.window_seconds > 0
    recent_busy, recent_enabled = fractions(recent) if has_recent else fractions(whole)
    w = recent_weight if has_recent else 0.0
    hour_busy: list[FloatArray] = []
    hour_enabled: list[FloatArray] = []
    for hour, _ in horizon_hours(start, horizon_seconds):
        slot = profile.slots[hour]
        if slot is None or not slot.window_seconds > 0:
            hour_busy.append(recent_busy)
            hour_enabled.append(recent_enabled)
            continue
        slot_busy, slot_enabled = fractions(slot)
        hour_busy.append((1.0 - w) * slot_busy + w * recent_busy)
        hour_enabled.append((1.0 - w) * slot_enabled + w * recent_enabled)
    busy = np.max(hour_busy, axis=0)
    enabled = np.min(hour_enabled, axis=0)
    scaled_busy = np.minimum(1.0, busy * busy_scale)
    idle = 1.0 - busy
    enabled = np.where(idle > 0, enabled * (1.0 - scaled_busy) / np.maximum(idle, 1e-12), 0.0)
    window = whole.window_seconds
    busy_s = scaled_busy * window
    overlap = whole.pair_overlap_seconds.copy()
    union = whole.pair_union_seconds.copy()
    np.fill_diagonal(overlap, busy_s)
    np.fill_diagonal(union, busy_s)
    return replace(
        whole,
        online_busy_seconds=busy_s,
        offline_enabled_seconds=None if whole.offline_enabled_seconds is None else enabled * window,
        pair_overlap_seconds=overlap,
        pair_union_seconds=union,
    )


def hour_busy(profile: DiurnalProfile, hour: int) -> FloatArray | None:
    """The online-busy share per GPU the profile forecasts for ``hour`` of the day (its
    slot alone, before the recent level is blended in); None without data for that hour."""
    slot = profile.slots[hour]
    if slot is None or not slot.window_seconds > 0:
        return None
    return np.asarray(slot.online_busy_seconds / slot.window_seconds, dtype=np.float64)


def report_ratios(profile: DiurnalProfile, report: NodeSummary) -> list[float]:
    """:func:`busy_ratios` of one reported window against what ``profile`` forecasts for
    the hour of its middle: the spread a :class:`~gleaner.perfmodel.admission.LoadSpread`
    learns. Empty without a window end or seconds, without data for that hour, or when the
    hour's GPUs are not the report's."""
    if report.window_end is None or not report.window_seconds > 0:
        return []
    middle = report.window_end - timedelta(seconds=report.window_seconds / 2)
    expected = hour_busy(profile, hour_of(middle))
    if expected is None or expected.shape != report.online_busy_seconds.shape:
        return []
    return busy_ratios(expected, report.online_busy_seconds / report.window_seconds)


def busy_ratios(forecast_busy: npt.ArrayLike, observed_busy: npt.ArrayLike) -> list[float]:
    """forecast / observed online-busy share of past windows, one per (GPU, window): the
    spread :func:`gleaner.perfmodel.admission.load_scale` reads. An idle window (observed
    below 1e-3) counts as 1e-3 (a large ratio: the forecast was not exceeded)."""
    f = np.asarray(forecast_busy, dtype=np.float64)
    o = np.maximum(np.asarray(observed_busy, dtype=np.float64), 1e-3)
    return [float(x) for x in np.ravel(np.maximum(f, 0.0) / o)]


def _merge_all(parts: Sequence[NodeSummary]) -> NodeSummary:
    """The parts merged in order; the memory sketches in one aggregation (most of the cost
    of a merge) when they share a step and fit the state cap together, else one by one."""
    memories = [p.memory for p in parts]
    if len(parts) < 3 or len({m.step_gib for m in memories}) > 1:
        return _merge_pairwise(parts)
    if sum(m.n_states for m in memories) > DEFAULT_MAX_STATES:
        return _merge_pairwise(parts)
    n_gpus = memories[0].n_gpus
    empty = MemoryHistogram.empty(n_gpus, memories[0].step_gib)
    out = _merge_pairwise([replace(p, memory=empty) for p in parts])
    return replace(out, memory=MemoryHistogram.merge_all(memories))


def _merge_pairwise(parts: Sequence[NodeSummary]) -> NodeSummary:
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out


__all__ = [
    "DEFAULT_DAY_WEIGHT",
    "DEFAULT_RECENT_WEIGHT",
    "HOURS",
    "DiurnalProfile",
    "busy_ratios",
    "forecast",
    "horizon_hours",
    "hour_busy",
    "hour_of",
    "report_ratios",
    "scaled",
    "worst_hours",
]
