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

Day of week: weekends are often unlike weekdays, so a profile also keeps 24 **weekend
slots**, folded only with the hours of Saturdays and Sundays (UTC; :func:`is_weekend`), each
with a count of the weekend days folded into it. :meth:`DiurnalProfile.key` is the one rule
of which slot serves an hour: a weekend hour whose weekend slot holds at least
``weekend_min_days`` days (:data:`MIN_WEEKEND_DAYS`) is served by that slot, every other hour
(weekday hours, and weekend hours until then) by its all-days slot, as before. The all-days
slots are folded every day, so a profile without weekend data forecasts as it always did.

The result is an ordinary NodeSummary: every factor of the performance model (P_compute,
the pair overlap, the memory sketch) reads it unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.sketch import MemoryHistogram, MemoryStack
from gleaner.perfmodel.summary import NodeSummary

FloatArray = npt.NDArray[np.float64]

HOURS = 24
DEFAULT_DAY_WEIGHT = 0.7
"""Weight of the previous days' hour when a new day's hour is folded in."""
DEFAULT_RECENT_WEIGHT = 0.25
"""Share of the recent level in a forecast that has hour slots for its horizon."""
MIN_WEEKEND_DAYS = 2
"""Weekend days an hour's weekend slot must hold before it serves weekend forecasts: one
whole weekend (a Saturday and a Sunday), so that one odd day is at most half of it
(docs/scheduler.md, "Day of week")."""
STACKS_KEPT = 4
"""Hour sequences whose :class:`HourStack` a profile keeps (two per start hour: a start on
the hour and one within it cover different hours)."""


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


def is_weekend(t: datetime) -> bool:
    """Whether an aware datetime falls on a Saturday or Sunday, in UTC."""
    # 1970-01-01 was a Thursday: day 2 and 3 of each week counted from it are Sat and Sun.
    return int(t.timestamp() // 86400 + 3) % 7 >= 5


@dataclass(frozen=True)
class DiurnalProfile:
    """One node's summaries by hour of the day (UTC), bounded to 24 (module docstring)."""

    node: str
    slots: tuple[NodeSummary | None, ...] = (None,) * HOURS
    day_weight: float = DEFAULT_DAY_WEIGHT
    weekend: tuple[NodeSummary | None, ...] = (None,) * HOURS
    """Slots folded with weekend hours only (module docstring)."""
    weekend_days: tuple[int, ...] = (0,) * HOURS
    """Weekend days folded into each weekend slot."""
    weekend_min_days: int | None = MIN_WEEKEND_DAYS
    """Weekend days a weekend slot needs to serve a forecast (None: never, all-days only)."""
    _stacks: dict[tuple[int, ...], HourStack] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if len(self.slots) != HOURS:
            raise ValueError(f"a diurnal profile has {HOURS} hour slots, got {len(self.slots)}")
        if len(self.weekend) != HOURS or len(self.weekend_days) != HOURS:
            raise ValueError(f"a diurnal profile has {HOURS} weekend slots and day counts")
        if not 0 < self.day_weight <= 1:
            raise ValueError("day_weight must be in (0, 1]")

    def fold(self, hour: int, summary: NodeSummary, weekend: bool = False) -> DiurnalProfile:
        """A copy with one completed hour of a new day added to slot ``hour`` (older days of
        that hour weighted by ``day_weight`` first) and, for a weekend day, to weekend slot
        ``hour`` as well (its day count up by one). An empty summary changes nothing."""
        if not 0 <= hour < HOURS:
            raise ValueError(f"hour must be 0..23, got {hour}")
        if summary.node != self.node:
            raise ValueError(f"profile of {self.node} cannot take a summary of {summary.node}")
        if not summary.window_seconds > 0:
            return self

        def add(old: NodeSummary | None) -> NodeSummary:
            return summary if old is None else scaled(old, self.day_weight).merge(summary)

        slots = list(self.slots)
        slots[hour] = add(self.slots[hour])
        if not weekend:
            return replace(self, slots=tuple(slots))
        weekend_slots, days = list(self.weekend), list(self.weekend_days)
        weekend_slots[hour] = add(self.weekend[hour])
        days[hour] += 1
        return replace(
            self, slots=tuple(slots), weekend=tuple(weekend_slots), weekend_days=tuple(days)
        )

    def fold_at(self, when: datetime, summary: NodeSummary) -> DiurnalProfile:
        """:meth:`fold` of the hour that contains ``when`` (its hour of the day, and
        whether it is a weekend day)."""
        return self.fold(hour_of(when), summary, weekend=is_weekend(when))

    def without_hour(self, hour: int) -> DiurnalProfile:
        """A copy with all-days and weekend slot ``hour`` empty (that hour starts afresh)."""
        slots, weekend_slots, days = list(self.slots), list(self.weekend), list(self.weekend_days)
        slots[hour] = weekend_slots[hour] = None
        days[hour] = 0
        return replace(
            self, slots=tuple(slots), weekend=tuple(weekend_slots), weekend_days=tuple(days)
        )

    def key(self, hour: int, weekend: bool) -> int:
        """The slot that serves ``hour`` of a weekend day (``weekend``) or a weekday: ``hour``
        (the all-days slot), or ``HOURS + hour`` (the weekend slot) for a weekend hour whose
        weekend slot holds at least ``weekend_min_days`` days (module docstring)."""
        if (
            weekend
            and self.weekend_min_days is not None
            and self.weekend_days[hour] >= self.weekend_min_days
            and self.weekend[hour] is not None
        ):
            return HOURS + hour
        return hour

    def key_at(self, when: datetime) -> int:
        """:meth:`key` of the hour that contains ``when``."""
        return self.key(hour_of(when), is_weekend(when))

    def slot(self, key: int) -> NodeSummary | None:
        """The summary of slot ``key`` (:meth:`key`)."""
        return self.slots[key] if key < HOURS else self.weekend[key - HOURS]

    @property
    def hours_known(self) -> int:
        """How many (all-days) hour slots hold data."""
        return sum(1 for s in self.slots if s is not None and s.window_seconds > 0)

    def forget_stacks(self) -> None:
        """Drop the kept :class:`HourStack`s (the next forecasts build them again; what
        keeping them saves is measured by ``python -m bench hours``)."""
        self._stacks.clear()

    def stack(self, hours: Sequence[int]) -> HourStack:
        """The :class:`HourStack` of ``hours`` (slot keys, :meth:`key`, in horizon order), built
        on first use and kept with the profile (which never changes): the last
        ``STACKS_KEPT`` sequences, so every start within an hour shares one."""
        key = tuple(hours)
        stack = self._stacks.get(key)
        if stack is None:
            stack = HourStack.of(self, key)
            if len(self._stacks) >= STACKS_KEPT:
                del self._stacks[next(iter(self._stacks))]
            self._stacks[key] = stack
        return stack


@dataclass(frozen=True, eq=False)
class HourStack:
    """A profile's slots for one sequence of hours, laid out once for :func:`forecast` and
    :func:`worst_hours`: what stays the same for every start within one hour (the slots,
    their shares, their memory states), apart from what changes with the start (how many
    seconds of the horizon each hour covers) and with each report (the recent level).

    :meth:`seasonal` is the time-weighted merge of the slots, what merging each slot scaled
    to its seconds one by one gives (``NodeSummary.merge`` of :func:`scaled` slots), with
    the durations added in the same order; the memory sketch is
    :meth:`~gleaner.perfmodel.sketch.MemoryStack.weighted`."""

    hours: tuple[int, ...]
    """Slot keys (:meth:`DiurnalProfile.key`) in horizon order."""
    present: tuple[int, ...]
    """Positions in ``hours`` whose slot holds data."""
    slots: tuple[NodeSummary, ...]
    """Those slots, in order."""
    busy_share: FloatArray
    """[present, G] each slot's online-busy share."""
    enabled_share: FloatArray
    """[present, G] each slot's offline-enabled share (its estimate without an agent)."""
    template: NodeSummary | None
    """The slots merged as they are: the fields scaling leaves alone (GPUs, labels,
    report times, events, offline jobs)."""
    memory: MemoryStack | None

    @classmethod
    def of(cls, profile: DiurnalProfile, hours: tuple[int, ...]) -> HourStack:
        present = tuple(
            i
            for i, h in enumerate(hours)
            if (s := profile.slot(h)) is not None and s.window_seconds > 0
        )
        slots = tuple(profile.slot(hours[i]) for i in present)
        known = tuple(s for s in slots if s is not None)
        if not known:
            empty = np.zeros((0, 0))
            return cls(hours, (), (), empty, empty, None, None)
        busy = np.array([s.online_busy_seconds / s.window_seconds for s in known])
        enabled = np.array([s.enabled_or_estimate() / s.window_seconds for s in known])
        blank = MemoryHistogram.empty(known[0].n_gpus, known[0].memory.step_gib)
        template = known[0] if len(known) == 1 else replace(known[0], memory=blank)
        for s in known[1:]:
            template = template.merge(replace(s, memory=blank))
        return cls(
            hours,
            present,
            known,
            busy,
            enabled,
            template,
            MemoryStack.of([s.memory for s in known]),
        )

    def seasonal(self, seconds: Sequence[float]) -> NodeSummary | None:
        """The present slots, slot i scaled to ``seconds[i]`` of the horizon, merged in
        order (None without any)."""
        if self.template is None or self.memory is None:
            return None
        factors = [sec / s.window_seconds for sec, s in zip(seconds, self.slots, strict=True)]
        first, f = self.slots[0], factors[0]
        window = first.window_seconds * f
        busy = first.online_busy_seconds * f
        enabled = (
            None if first.offline_enabled_seconds is None else first.offline_enabled_seconds * f
        )
        overlap = first.pair_overlap_seconds * f
        union = first.pair_union_seconds * f
        for s, f in zip(self.slots[1:], factors[1:], strict=True):
            w = s.window_seconds * f
            b = s.online_busy_seconds * f
            e = None if s.offline_enabled_seconds is None else s.offline_enabled_seconds * f
            # NodeSummary.merge's rule: a side without enabled seconds adds its estimate.
            if enabled is not None or e is not None:
                mine = enabled if enabled is not None else np.maximum(0.0, window - busy)
                enabled = mine + (e if e is not None else np.maximum(0.0, w - b))
            window = window + w
            busy = busy + b
            overlap = overlap + s.pair_overlap_seconds * f
            union = union + s.pair_union_seconds * f
        return replace(
            self.template,
            window_seconds=window,
            online_busy_seconds=busy,
            offline_enabled_seconds=enabled,
            pair_overlap_seconds=overlap,
            pair_union_seconds=union,
            memory=self.memory.weighted(factors),
        )


def horizon_hours(start: datetime, horizon_seconds: float) -> list[tuple[int, float]]:
    """(hour of day, seconds of the horizon in it) for [start, start + horizon), in order;
    an hour of the day met twice (a horizon over a day) appears twice."""
    return [(hour, seconds) for hour, _, seconds in _pieces(start, horizon_seconds)]


def horizon_keys(
    profile: DiurnalProfile, start: datetime, horizon_seconds: float
) -> list[tuple[int, float]]:
    """(slot key, seconds of the horizon in it) for [start, start + horizon), in order: the
    slot of each hour is :meth:`DiurnalProfile.key` of its hour and day kind."""
    return [
        (profile.key(hour, weekend), seconds)
        for hour, weekend, seconds in _pieces(start, horizon_seconds)
    ]


def _pieces(start: datetime, horizon_seconds: float) -> tuple[tuple[int, bool, float], ...]:
    if not horizon_seconds > 0:
        raise ValueError("horizon_seconds must be > 0")
    return _horizon_pieces(start, float(horizon_seconds))


@functools.lru_cache(maxsize=64)
def _horizon_pieces(start: datetime, horizon_seconds: float) -> tuple[tuple[int, bool, float], ...]:
    # Kept: every node of a scheduling pass forecasts from the same start and horizon.
    out: list[tuple[int, bool, float]] = []
    t = start
    end = start + timedelta(seconds=horizon_seconds)
    while t < end:
        ts = t.timestamp()
        next_hour = (math.floor(ts / 3600) + 1) * 3600
        seconds = min(next_hour, end.timestamp()) - ts
        out.append((hour_of(t), is_weekend(t), seconds))
        t = t + timedelta(seconds=seconds)
    return tuple(out)


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
    pieces = horizon_keys(profile, start, horizon_seconds)
    stack = profile.stack([key for key, _ in pieces])
    seasonal = stack.seasonal([pieces[i][1] for i in stack.present])
    if seasonal is None or recent_weight >= 1:
        return recent
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
    stack = profile.stack([key for key, _ in horizon_keys(profile, start, horizon_seconds)])
    busy, enabled = recent_busy, recent_enabled
    if stack.present:  # the hours without a slot are the recent level itself
        slot_busy = (1.0 - w) * stack.busy_share + w * recent_busy
        slot_enabled = (1.0 - w) * stack.enabled_share + w * recent_enabled
        busy = np.max(slot_busy, axis=0)
        enabled = np.min(slot_enabled, axis=0)
        if len(stack.present) < len(stack.hours):
            busy = np.maximum(busy, recent_busy)
            enabled = np.minimum(enabled, recent_enabled)
    scaled_busy = np.minimum(1.0, busy * busy_scale)
    idle = 1.0 - busy
    enabled = np.where(idle > 0, enabled * (1.0 - scaled_busy) / np.maximum(idle, 1e-12), 0.0)
    return with_gpu_shares(
        whole, scaled_busy, None if whole.offline_enabled_seconds is None else enabled
    )


def with_gpu_shares(
    whole: NodeSummary, busy: FloatArray, enabled: FloatArray | None
) -> NodeSummary:
    """``whole`` with each GPU's online-busy and offline-enabled shares replaced (None: no
    enabled seconds), over the same window: how a bound that takes each GPU at its own worst
    time is written as a summary. The pair overlap and union stay the whole window's; their
    diagonals (a GPU with itself) are the new busy seconds."""
    window = whole.window_seconds
    busy_s = busy * window
    overlap = whole.pair_overlap_seconds.copy()
    union = whole.pair_union_seconds.copy()
    np.fill_diagonal(overlap, busy_s)
    np.fill_diagonal(union, busy_s)
    return replace(
        whole,
        online_busy_seconds=busy_s,
        offline_enabled_seconds=None if enabled is None else enabled * window,
        pair_overlap_seconds=overlap,
        pair_union_seconds=union,
    )


def hour_busy(profile: DiurnalProfile, hour: int, weekend: bool = False) -> FloatArray | None:
    """The online-busy share per GPU the profile forecasts for ``hour`` of a weekday or of
    a weekend day (the slot :meth:`DiurnalProfile.key` picks, alone, before the recent
    level is blended in); None without data for that hour."""
    slot = profile.slot(profile.key(hour, weekend))
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
    expected = hour_busy(profile, hour_of(middle), is_weekend(middle))
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


__all__ = [
    "DEFAULT_DAY_WEIGHT",
    "DEFAULT_RECENT_WEIGHT",
    "HOURS",
    "MIN_WEEKEND_DAYS",
    "STACKS_KEPT",
    "DiurnalProfile",
    "HourStack",
    "busy_ratios",
    "forecast",
    "horizon_hours",
    "horizon_keys",
    "hour_busy",
    "hour_of",
    "is_weekend",
    "report_ratios",
    "scaled",
    "with_gpu_shares",
    "worst_hours",
]
