"""The SLA monitor's per-placement history, kept in an annotation of the OfflineJob (pure).

Contract: the scheduler's ``decide_sla`` needs the last n observed windows of the current
placement (``SLAHistory``). The operator keeps no state of its own, so the windows live in
the API server, in the job's annotation ``ANNOTATION_SLA_WINDOWS``: a
``gleaner.api.contract.SlaWindows`` document (read only through its parser), bounded to
what the k-of-n rule needs over the job's SLA window
(``gleaner.scheduler.monitor.samples_needed``, at least ``MAX_WINDOWS``). A history
recorded for another placement (different node, GPUs or decision time) is discarded, so
a rescheduled job starts clean. A restarted operator reads it back and decides exactly as
the old one would have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gleaner.api import DEFAULT_SLA_WINDOW, Placement
from gleaner.api.contract import ANNOTATION_SLA_WINDOWS, SlaWindows
from gleaner.api.units import parse_duration
from gleaner.scheduler.lifecycle import has_window as has_window  # re-exported
from gleaner.scheduler.monitor import (
    SLAHistory,
    SLAMonitorConfig,
    WindowObservation,
    effective_sla_window,
    samples_needed,
)

MAX_WINDOWS = 16


def spec_sla_window_seconds(spec: Mapping[str, Any]) -> float:
    """The job's ``spec.slaWindow`` in seconds (the default when absent or unreadable: the
    CRD validates it, so only an object written around the schema lands here)."""
    try:
        return parse_duration(str(spec.get("slaWindow") or DEFAULT_SLA_WINDOW))
    except ValueError:
        return parse_duration(DEFAULT_SLA_WINDOW)


def stored_windows(body: Mapping[str, Any]) -> str | None:
    """The job object's ``ANNOTATION_SLA_WINDOWS`` (what :func:`history_for` reads); None
    when it is absent or not a string."""
    meta = body.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = annotations.get(ANNOTATION_SLA_WINDOWS) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else None


def history_for(
    job_key: str,
    sla: float,
    placement: Placement,
    annotation: str | None,
    sla_window_seconds: float | None = None,
    config: SLAMonitorConfig | None = None,
) -> SLAHistory:
    """The stored history of this placement (empty if none, unreadable or for another one),
    judged over ``sla_window_seconds`` capped by ``config`` (None: each sample is a window)."""
    placed_at = placement.decided_at.timestamp()
    keep = MAX_WINDOWS
    if config is not None:
        sla_window_seconds = effective_sla_window(sla_window_seconds, config)
        keep = max(MAX_WINDOWS, samples_needed(sla_window_seconds, config))
    base = SLAHistory(
        job=job_key,
        sla=sla,
        node=placement.node,
        gpus=tuple(placement.gpu_indices),
        placed_at=placed_at,
        predicted=placement.throughput_fraction,
        max_windows=keep,
        sla_window_seconds=sla_window_seconds,
    )
    stored = SlaWindows.parse(annotation)
    if stored is None:
        return base
    same = (
        stored.node == placement.node
        and list(stored.gpus) == list(placement.gpu_indices)
        and abs(stored.placed_at - placed_at) < 1e-3
    )
    if not same:
        return base
    windows = tuple(WindowObservation(end, frac) for end, frac in stored.windows)
    return replace(base, windows=windows[-keep:])


def dump_history(history: SLAHistory) -> str:
    """The annotation's value for ``history`` (fractions rounded to 6 digits: short)."""
    return SlaWindows(
        node=history.node,
        gpus=tuple(history.gpus),
        placed_at=history.placed_at,
        windows=tuple((w.end, round(w.throughput_fraction, 6)) for w in history.windows),
    ).dump()
