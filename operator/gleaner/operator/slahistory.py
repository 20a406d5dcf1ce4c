"""The SLA monitor's per-placement history, kept in an annotation of the OfflineJob (pure).

Contract: the scheduler's ``decide_sla`` needs the last n observed windows of the current
placement (``SLAHistory``). The operator keeps no state of its own, so the windows live in
the API server, in the job's annotation ``ANNOTATION_SLA_WINDOWS``: a
``gleaner.api.contract.SlaWindows`` document (read only through its parser), bounded to
``MAX_WINDOWS``. A history recorded for another placement (different node, GPUs or decision
time) is discarded, so a rescheduled job starts clean. A restarted operator reads it back
and decides exactly as the old one would have.
"""

from __future__ import annotations

from gleaner.api import Placement
from gleaner.api.contract import SlaWindows
from gleaner.scheduler.lifecycle import has_window as has_window  # re-exported
from gleaner.scheduler.monitor import SLAHistory, WindowObservation

MAX_WINDOWS = 16


def history_for(
    job_key: str, sla: float, placement: Placement, annotation: str | None
) -> SLAHistory:
    """The stored history of this placement (empty if none, unreadable or for another one)."""
    placed_at = placement.decided_at.timestamp()
    base = SLAHistory(
        job=job_key,
        sla=sla,
        node=placement.node,
        gpus=tuple(placement.gpu_indices),
        placed_at=placed_at,
        predicted=placement.throughput_fraction,
        max_windows=MAX_WINDOWS,
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
    return SLAHistory(
        job=base.job,
        sla=base.sla,
        node=base.node,
        gpus=base.gpus,
        placed_at=base.placed_at,
        predicted=base.predicted,
        windows=windows[-MAX_WINDOWS:],
        max_windows=MAX_WINDOWS,
    )


def dump_history(history: SLAHistory) -> str:
    """The annotation's value for ``history`` (fractions rounded to 6 digits: short)."""
    return SlaWindows(
        node=history.node,
        gpus=tuple(history.gpus),
        placed_at=history.placed_at,
        windows=tuple((w.end, round(w.throughput_fraction, 6)) for w in history.windows),
    ).dump()
