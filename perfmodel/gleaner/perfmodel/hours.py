"""A node's time-of-day profile as NodeTrace ``status.hours``, and back (pure).

Contract (docs/api.md, "NodeTrace"; docs/perfmodel.md, "Time of day"). The agent keeps its
node's :class:`~gleaner.perfmodel.diurnal.DiurnalProfile` in the API server, so that it
survives restarts and the operator forecasts from the same history:

- :func:`profile_to_hours` writes each hour slot that holds data as one
  :class:`~gleaner.api.HourSummary`, through :meth:`NodeSummary.to_nodetrace_status` (the
  same per-GPU seconds, pairs and memory sketch as the status's own window). Each slot's
  memory sketch is first capped to ``hour_memory_states`` states (128 up to 8 GPUs, 64 for
  16; the step doubles until it fits, never optimistic), so ``hours`` is bounded: at most
  24 entries of bounded size.
- :func:`profile_to_weekend_hours` writes the weekend slots the same way, as
  ``status.weekendHours`` of a NodeHistory, each entry with its weekend ``days`` and its
  memory sketch capped to half as many states (:func:`weekend_memory_states`), so the
  weekend hours add at most about half again to the object.
- :func:`profile_from_status` reads them back, through :meth:`NodeSummary.from_nodetrace`
  with the status's GPU inventory. An entry that does not parse, or whose GPUs are not the
  node's inventory now (a GPU added or removed), is left out: that hour starts afresh.
  A later entry for the same hour replaces an earlier one.

- :func:`node_forecast` is the mean a scheduler's forecast starts from: perfmodel's
  :func:`~gleaner.perfmodel.diurnal.forecast` of the hours ahead blended with the latest
  report, carrying that report's GPUs, labels, event counts, offline jobs and window (only
  the load comes from the forecast); the report unchanged when the profile cannot serve it.
  :func:`node_admission` is what a scheduler admits by: each GPU at its busiest hour of the
  horizon (``worst_hours``) with the load spread, over that mean (the operator's rule and
  the simulator's ``gleaner`` policy's).

Reading back what was written gives the same profile (up to float rounding); the sketch cap
is applied on writing, so :func:`capped_profile` is what a reader will see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from gleaner.api import (
    GpuInfo,
    HourSummary,
    NodeHistoryStatus,
    NodeTrace,
    NodeTraceSpec,
    NodeTraceStatus,
    ObjectMeta,
)
from gleaner.api.nodetrace import hour_memory_states
from gleaner.perfmodel.diurnal import (
    DEFAULT_DAY_WEIGHT,
    DEFAULT_RECENT_WEIGHT,
    HOURS,
    MIN_WEEKEND_DAYS,
    DiurnalProfile,
    forecast,
    worst_hours,
)
from gleaner.perfmodel.summary import NodeSummary, TraceFormatError


def weekend_memory_states(gpus: int) -> int:
    """Most states of one weekend hour's memory sketch: half an hour's
    (``hour_memory_states``), so the weekend hours add at most about half again."""
    return max(1, hour_memory_states(gpus) // 2)


def capped_profile(profile: DiurnalProfile, max_states: int | None = None) -> DiurnalProfile:
    """``profile`` with every slot's memory sketch capped to ``max_states`` states (None:
    ``hour_memory_states`` of the slot's GPU count; weekend slots
    :func:`weekend_memory_states`, or half ``max_states``)."""

    def cap(
        slots: tuple[NodeSummary | None, ...], states: Callable[[int], int]
    ) -> tuple[NodeSummary | None, ...]:
        return tuple(
            None if s is None else replace(s, memory=s.memory.capped(states(s.n_gpus)))
            for s in slots
        )

    return replace(
        profile,
        slots=cap(profile.slots, lambda g: max_states or hour_memory_states(g)),
        weekend=cap(
            profile.weekend,
            lambda g: max(1, max_states // 2) if max_states else weekend_memory_states(g),
        ),
    )


def _entries(
    slots: tuple[NodeSummary | None, ...], days: tuple[int, ...] | None
) -> list[HourSummary]:
    out: list[HourSummary] = []
    for hour, slot in enumerate(slots):
        if slot is None or not slot.window_seconds > 0:
            continue
        status = slot.to_nodetrace_status()
        if status.window is None:
            continue
        out.append(
            HourSummary(
                hour=hour,
                window=status.window,
                per_gpu=status.per_gpu,
                pairs=status.pairs,
                memory=status.memory,
                days=None if days is None else max(1, days[hour]),
            )
        )
    return out


def profile_to_hours(profile: DiurnalProfile, max_states: int | None = None) -> list[HourSummary]:
    """One entry per (all-days) hour slot with data, in hour order (module docstring)."""
    return _entries(capped_profile(profile, max_states).slots, None)


def profile_to_weekend_hours(
    profile: DiurnalProfile, max_states: int | None = None
) -> list[HourSummary]:
    """One entry per weekend slot with data, in hour order, each with its weekend days
    (``status.weekendHours``; empty without any, which a merge patch writes as a list that
    clears what was stored, e.g. entries of another GPU inventory)."""
    capped = capped_profile(profile, max_states)
    return _entries(capped.weekend, capped.weekend_days)


def profile_from_status(
    node: str,
    status: NodeTraceStatus | NodeHistoryStatus,
    day_weight: float = DEFAULT_DAY_WEIGHT,
    weekend_min_days: int | None = MIN_WEEKEND_DAYS,
) -> DiurnalProfile:
    """The profile ``status.hours`` (and a NodeHistory's ``weekendHours``) holds, over
    ``status.gpus`` (a NodeHistory's, or an older agent's NodeTrace's); empty when it holds
    none (module docstring)."""
    inventory = sorted(status.gpus, key=lambda g: g.index)
    slots = _read_entries(node, inventory, status.hours)
    weekend_entries = status.weekend_hours if isinstance(status, NodeHistoryStatus) else None
    weekend = _read_entries(node, inventory, weekend_entries)
    days = [0] * HOURS
    for entry in weekend_entries or ():
        if weekend[entry.hour] is not None:
            days[entry.hour] = entry.days or 1
    return DiurnalProfile(
        node,
        tuple(slots),
        day_weight,
        weekend=tuple(weekend),
        weekend_days=tuple(days),
        weekend_min_days=weekend_min_days,
    )


def _read_entries(
    node: str, inventory: list[GpuInfo], entries: list[HourSummary] | None
) -> list[NodeSummary | None]:
    slots: list[NodeSummary | None] = [None] * HOURS
    indices = tuple(g.index for g in inventory)
    for entry in entries or ():
        one = NodeTrace(
            metadata=ObjectMeta(name=node),
            spec=NodeTraceSpec(node_name=node),
            status=NodeTraceStatus(
                gpus=inventory,
                window=entry.window,
                per_gpu=entry.per_gpu,
                pairs=entry.pairs,
                memory=entry.memory,
            ),
        )
        try:
            summary = NodeSummary.from_nodetrace(one)
        except (TraceFormatError, ValueError):
            continue
        if summary.gpu_indices != indices or not summary.window_seconds > 0:
            continue
        # A stored hour is history, not a fresh report: it carries no report time.
        slots[entry.hour] = replace(summary, last_report_time=None)
    return slots


def profile_from_nodetrace(
    trace: NodeTrace | Mapping[str, Any],
    day_weight: float = DEFAULT_DAY_WEIGHT,
    weekend_min_days: int | None = MIN_WEEKEND_DAYS,
) -> DiurnalProfile | None:
    """The profile of a NodeTrace or a NodeHistory (model or the API server's dict; a
    NodeTrace dict may carry its node's NodeHistory's ``hours`` and ``weekendHours``); None
    when it has no ``status.hours`` at all."""
    status: NodeTraceStatus | NodeHistoryStatus
    if isinstance(trace, NodeTrace):
        name, status = trace.spec.node_name or trace.metadata.name, trace.status
    else:
        raw = trace.get("status") or {}
        if not raw.get("hours"):
            return None
        name = (trace.get("spec") or {}).get("nodeName") or (trace.get("metadata") or {})["name"]
        # Only what the hours need: the rest of the status (its own memory sketch) is
        # read by NodeSummary.from_nodetrace.
        status = NodeHistoryStatus.model_validate(
            {
                "gpus": raw.get("gpus") or [],
                "hours": raw["hours"],
                "weekendHours": raw.get("weekendHours"),
            }
        )
    if not status.hours:
        return None
    return profile_from_status(str(name), status, day_weight, weekend_min_days)


def node_forecast(
    recent: NodeSummary,
    profile: DiurnalProfile,
    start: datetime,
    horizon_seconds: float,
    recent_weight: float = DEFAULT_RECENT_WEIGHT,
) -> NodeSummary:
    """The summary to predict from for [start, start + horizon) (module docstring)."""
    try:
        predicted = forecast(profile, recent, start, horizon_seconds, recent_weight)
    except ValueError:  # hours of another GPU inventory than the report's
        return recent
    return replace(
        predicted,
        gpus=recent.gpus,
        labels=recent.labels,
        events=recent.events,
        offline_jobs=recent.offline_jobs,
        window_start=recent.window_start,
        window_end=recent.window_end,
        last_report_time=recent.last_report_time,
    )


def node_admission(
    recent: NodeSummary,
    profile: DiurnalProfile,
    start: datetime,
    horizon_seconds: float,
    busy_scale: float = 1.0,
    recent_weight: float = DEFAULT_RECENT_WEIGHT,
    mean: NodeSummary | None = None,
) -> NodeSummary:
    """What a scheduler admits a job by for [start, start + horizon): perfmodel's
    :func:`~gleaner.perfmodel.diurnal.worst_hours` (each GPU at its busiest hour, its load
    scaled by ``busy_scale``) over :func:`node_forecast` (the report's GPUs, labels, events,
    jobs and window carried over; ``mean``: that forecast when the caller has it already);
    the report unchanged when the profile cannot serve it."""
    if mean is None:
        mean = node_forecast(recent, profile, start, horizon_seconds, recent_weight)
    try:
        return worst_hours(
            profile, recent, start, horizon_seconds, recent_weight, busy_scale, mean=mean
        )
    except ValueError:  # hours of another GPU inventory than the report's
        return recent


__all__ = [
    "capped_profile",
    "node_admission",
    "node_forecast",
    "profile_from_nodetrace",
    "profile_from_status",
    "profile_to_hours",
    "profile_to_weekend_hours",
    "weekend_memory_states",
]
