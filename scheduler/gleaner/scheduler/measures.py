"""The headline measures, defined once for the dashboard, the operator and the simulator (pure).

Contract. Each function below is the one definition of a number that more than one part
of Gleaner shows; its docstring is that definition, and docs/dashboard.md repeats it. The
dashboard's cards and charts, the operator's ``/metrics`` and the simulator's report all
compute these numbers by calling them, never by re-deriving them:

- :func:`meets_sla`: one window of one job meets its SLA (the SLA monitor's rule);
- :func:`latest_window_met` / :func:`placement_met`: the verdict of a placed job's newest
  SLA window, judged over its ``spec.slaWindow`` exactly as the SLA monitor judges it (the
  operator's ``SLAMet``);
- :func:`sla_attainment`: the fraction of job-windows that met their SLA;
- :func:`job_fraction`: the throughput fraction a placed job is credited with;
- :func:`offline_throughput`: standalone-GPU equivalents of the offline work (GPUs saved);
- :func:`harvested_utilization`: the share of all GPU time given to offline work.

A time series or a run's total applies the same definition to each point (or to every
job-window of the run) and aggregates it as the docstring says.
"""

from __future__ import annotations

from collections.abc import Iterable

from gleaner.scheduler.monitor import (
    SLAHistory,
    SLAMonitorConfig,
    WindowObservation,
    aggregates,
    effective_sla_window,
    sla_windows,
    window_missed,
)


def meets_sla(fraction: float, sla: float, config: SLAMonitorConfig) -> bool:
    """A throughput fraction *meets* an SLA when the SLA monitor would not count it as a miss:
    ``fraction >= sla * (1 - tolerance)`` (the operator's ``SLAMet`` condition)."""
    return not window_missed(fraction, sla, config)


def latest_window_met(history: SLAHistory, config: SLAMonitorConfig) -> bool | None:
    """The verdict of ``history``'s newest SLA window as the SLA monitor's tick gave it (the
    operator's ``SLAMet``): its newest closed SLA window (``sla_windows``, the mean of its
    samples) when samples aggregate into longer SLA windows, else its newest sample (grace
    samples included, as the tick judges them). None: no SLA window has closed yet."""
    if aggregates(history, config):
        closed = sla_windows(history, config)
        last = closed[-1] if closed else None
    else:
        last = history.windows[-1] if history.windows else None
    return None if last is None else meets_sla(last.throughput_fraction, history.sla, config)


def placement_met(
    samples: Iterable[tuple[float, float]],
    sla: float,
    placed_at: float,
    sla_window_seconds: float | None,
    config: SLAMonitorConfig,
) -> bool | None:
    """:func:`latest_window_met` of one placement's observed samples ((end, fraction), epoch
    seconds; those ending before ``placed_at`` are another placement's and are ignored),
    judged over the job's ``spec.slaWindow`` capped as the monitor caps it."""
    windows = sorted(
        (WindowObservation(end, fraction) for end, fraction in samples if end > placed_at),
        key=lambda w: w.end,
    )
    history = SLAHistory(
        job="",
        sla=sla,
        node="",
        gpus=(),
        placed_at=placed_at,
        windows=tuple(windows),
        max_windows=max(1, len(windows)),
        sla_window_seconds=effective_sla_window(sla_window_seconds, config),
    )
    return latest_window_met(history, config)


def sla_attainment(met: Iterable[bool]) -> float | None:
    """*SLA attainment*: the fraction of job-windows that met their SLA.

    ``met`` holds one verdict (:func:`meets_sla`) per job-window: at one instant, one per
    placed job (its latest window on the current placement, else its prediction); over a
    run, one per SLA window of every placed job, grace windows included (the operator sets
    ``SLAMet`` for those too). None when there is nothing to judge.
    """
    verdicts = list(met)
    if not verdicts:
        return None
    return sum(1 for ok in verdicts if ok) / len(verdicts)


def job_fraction(observed: float | None, predicted: float | None) -> float | None:
    """The throughput fraction a placed job is credited with: the observed fraction of its
    current placement when measured, else the scheduler's prediction (None: neither)."""
    return observed if observed is not None else predicted


def offline_throughput(jobs: Iterable[tuple[float, int]]) -> float:
    """*Offline throughput*: Σ over placed jobs of throughput fraction × GPUs, given as
    (fraction, GPUs) pairs; in standalone-GPU equivalents, i.e. GPUs saved."""
    return float(sum(fraction * gpus for fraction, gpus in jobs))


def harvested_utilization(held_idle: Iterable[float], gpus: int) -> float | None:
    """*Harvested utilization*: Σ over GPUs that hold an offline job of their idle fraction
    (offline-enabled seconds over the window, the model's P_compute), divided by the number
    of all GPUs: the share of all GPU time given to offline work. None without GPUs."""
    if gpus <= 0:
        return None
    return float(sum(held_idle)) / gpus


__all__ = [
    "harvested_utilization",
    "job_fraction",
    "latest_window_met",
    "meets_sla",
    "offline_throughput",
    "placement_met",
    "sla_attainment",
]
