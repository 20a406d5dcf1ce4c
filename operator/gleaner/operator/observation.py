"""Observed throughput of a running job, for the SLA monitor: the formulas (pure).

Contract. Nothing here does I/O: the functions take what the shells read (a NodeTrace, a
Prometheus result) and return an :class:`ObservedWindow`. The SLA monitor needs, per
window, the fraction of its standalone throughput a placed job achieved. Two sources:

- **NodeTrace** (default; pure ``observe_from_nodetrace``). The agent's NodeTrace of the
  job's node reports, per GPU, the seconds offline channels were enabled over its window,
  and per GPU pair the online busy overlap and union. The observed fraction is the
  performance model re-evaluated on that window with the memory factor as predicted::

      observed = P_compute_obs(G) * P_multi_obs(G) * P_memory_pred
      P_compute_obs(G) = min_{g in G} offlineEnabledSeconds_g / window.seconds
      P_multi_obs(G)   = min_{a<b in G} overlapSeconds_ab / unionSeconds_ab   (1 if |G| = 1)

  (the factors are computed by ``gleaner.perfmodel``; the memory factor is the placement's
  prediction because the NodeTrace tells what memory was harvestable, not what the job
  got). A window that ended before the placement was decided says nothing about the job
  and is ignored (None), as is a trace that lacks one of the job's GPUs.
- **Prometheus** (``--prometheus-url``; ``timeslice_query`` is the query, and
  ``fraction_from_vector`` and ``window_from_fraction`` reduce its answer; the shell
  ``gleaner.operator.sources.prometheus.observe_from_prometheus`` asks it): the per-job
  counter ``gleaner_offline_job_timeslice_seconds_total{namespace,job}`` gives the seconds
  the job's work actually ran on each of its GPUs; over the window::

      observed = min over the job's GPU series of rate(...[window]) * P_memory_pred
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gleaner.api import NodeTrace
from gleaner.api.nodetrace import without_hours
from gleaner.perfmodel import NodeSummary, compute_factor, multi_gpu_factor


@dataclass(frozen=True)
class ObservedWindow:
    """One observation: the fraction achieved over a window ending at ``end``."""

    end: datetime
    seconds: float
    throughput_fraction: float
    compute: float
    multi_gpu: float


def observe_from_nodetrace(
    trace: NodeTrace | dict[str, Any],
    gpus: list[int],
    predicted_memory: float,
    placed_at: datetime,
) -> ObservedWindow | None:
    """The observed fraction on ``gpus`` over the trace's window (see the module docstring)."""
    nt = trace if isinstance(trace, NodeTrace) else NodeTrace.model_validate(without_hours(trace))
    window = nt.status.window
    if window is None or window.seconds <= 0 or window.end <= placed_at:
        return None
    if not {g.index for g in nt.status.per_gpu} >= set(gpus):
        return None
    summary = NodeSummary.from_nodetrace(nt)
    if summary.offline_enabled_seconds is None:
        return None
    compute = compute_factor(summary, gpus)
    multi = multi_gpu_factor(summary, gpus)
    fraction = max(0.0, compute * multi * predicted_memory)
    return ObservedWindow(window.end, window.seconds, fraction, compute, multi)


def timeslice_query(namespace: str, job: str, window_seconds: float) -> str:
    """PromQL for the per-GPU fraction of time the job's work ran over the window."""
    seconds = max(1, round(window_seconds))
    return (
        f'rate(gleaner_offline_job_timeslice_seconds_total{{namespace="{namespace}",'
        f'job="{job}"}}[{seconds}s])'
    )


def fraction_from_vector(result: list[dict[str, Any]], predicted_memory: float) -> float | None:
    """Reduce an instant-vector result of ``timeslice_query`` (None: no series)."""
    values = []
    for sample in result:
        try:
            values.append(float(sample["value"][1]))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    if not values:
        return None
    return max(0.0, min(1.0, min(values))) * predicted_memory


def window_from_fraction(
    fraction: float, predicted_memory: float, end: datetime, window_seconds: float
) -> ObservedWindow:
    """The observation that a Prometheus ``fraction`` (memory factor included) stands for."""
    compute = fraction / predicted_memory if predicted_memory > 0 else 0.0
    return ObservedWindow(end, window_seconds, fraction, compute, 1.0)
