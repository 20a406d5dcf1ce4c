"""The headline measures, defined once for the dashboard, the operator and the simulator (pure).

Contract. Each function below is the one definition of a number that more than one part
of Gleaner shows; its docstring is that definition, and docs/dashboard.md repeats it. The
dashboard's cards and charts, the operator's ``/metrics`` and the simulator's report all
compute these numbers by calling them, never by re-deriving them:

- :func:`meets_sla`: one window of one job meets its SLA (the SLA monitor's rule);
- :func:`sla_attainment`: the fraction of job-windows that met their SLA;
- :func:`job_fraction`: the throughput fraction a placed job is credited with;
- :func:`offline_throughput`: standalone-GPU equivalents of the offline work (GPUs saved);
- :func:`harvested_utilization`: the share of all GPU time given to offline work.

A time series or a run's total applies the same definition to each point (or to every
job-window of the run) and aggregates it as the docstring says.
"""

from __future__ import annotations

from collections.abc import Iterable

from gleaner.scheduler.monitor import SLAMonitorConfig, window_missed


def meets_sla(fraction: float, sla: float, config: SLAMonitorConfig) -> bool:
    """A throughput fraction *meets* an SLA when the SLA monitor would not count it as a miss:
    ``fraction >= sla * (1 - tolerance)`` (the operator's ``SLAMet`` condition)."""
    return not window_missed(fraction, sla, config)


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
    "meets_sla",
    "offline_throughput",
    "sla_attainment",
]
