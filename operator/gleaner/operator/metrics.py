"""The operator's own Prometheus metrics, in a registry of their own.

Contract: ``OperatorMetrics(registry)`` registers exactly these families (names are a
contract: ``gleaner_operator_`` prefix) and nothing in the global default registry:

- ``gleaner_operator_jobs{phase}`` (gauge): OfflineJobs by phase, as of the last pass;
- ``gleaner_operator_placements_total`` (counter): Pods bound to a placement;
- ``gleaner_operator_evictions_total`` (counter): SLA evictions;
- ``gleaner_operator_unschedulable_total`` (counter): jobs found unschedulable in a pass;
- ``gleaner_operator_sla_windows_total{namespace,gpus,result}`` (counter): SLA windows the
  SLA monitor judged, ``result`` = ``met`` or ``missed``, by the job's namespace and GPUs.
  Attainment over any range is ``met`` ÷ all (``rate`` or ``increase`` of both), and by
  ``gpus`` it is what the users of jobs of each size see. A window is counted once, after
  the job's history annotation records its sample (a restarted operator skips samples
  already recorded); a crash between the two loses that count, never doubles it;
- ``gleaner_operator_scheduling_latency_seconds`` (histogram): wall time of one scheduling
  pass (list state, decide, bind);
- ``gleaner_operator_job_queue_latency_seconds`` (histogram): job creation to binding;
- ``gleaner_operator_job_throughput_sla{namespace,job}`` (gauge): each live OfflineJob's
  ``spec.throughputSLA``;
- ``gleaner_operator_job_observed_throughput_fraction{namespace,job}`` (gauge): the fraction
  of standalone throughput observed over the last SLA window, for bound jobs that have an
  observation of their current placement (``status.observed``);
- ``gleaner_operator_job_batch_requests{namespace,job,state}`` (gauge): a ``spec.batch``
  job's requests by ``state`` = ``done`` (answered), ``failed`` (refused, part of done),
  ``total`` (in its input), as its runner last reported (docs/batch.md);
- ``gleaner_operator_job_batch_projected_finish_timestamp_seconds{namespace,job}`` and
  ``gleaner_operator_job_batch_deadline_timestamp_seconds{namespace,job}`` (gauges, Unix
  time): when the batch finishes at its observed throughput, and its deadline (when set);
- ``gleaner_operator_sla_attainment`` (gauge): SLA attainment of the bound jobs, as of the
  last pass; NaN when no job is bound;
- ``gleaner_operator_offline_throughput`` (gauge): offline throughput of the bound jobs, in
  standalone-GPU equivalents, as of the last pass.

The two cluster gauges are the dashboard's headline numbers, computed by the shared
definitions (``gleaner.scheduler.measures``, docs/dashboard.md) from the jobs' status by
``cluster_measures`` (pure): each bound job is credited with its observed fraction, else
its predicted one, and counts as meeting its SLA when its newest SLA window (over its
``spec.slaWindow``, from the samples the SLA monitor keeps in the job) met it, exactly as
the monitor judged it (``gleaner.scheduler.measures.latest_window_met``); before its first
SLA window closes, when the fraction credited meets it.

The per-job series exist only while the job does (and, for the observed fraction, only
while it is bound and observed): ``sync_jobs`` replaces the whole set from a full list of
jobs (the scheduling pass), ``set_job`` updates one job (the SLA monitor), ``forget_job``
removes one (deletion). Dashboards compare the two gauges series by series
(``observed >= sla``): both carry the same labels. ``job_gauges(jobs)`` computes the values
from the API objects (pure).

Tests give each instance a fresh ``CollectorRegistry`` and read values with
``registry.get_sample_value``.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter

from gleaner.api import BatchProgress, OfflineJobStatus, Phase
from gleaner.operator.slahistory import history_for, spec_sla_window_seconds, stored_windows
from gleaner.scheduler import measures
from gleaner.scheduler.lifecycle import BOUND_PHASES
from gleaner.scheduler.monitor import SLAMonitorConfig

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BOUND = BOUND_PHASES

JobKey = tuple[str, str]
"""(namespace, job name)."""


def job_gauges(
    jobs: Mapping[JobKey, tuple[Mapping[str, Any], OfflineJobStatus]],
) -> tuple[dict[JobKey, float], dict[JobKey, float]]:
    """(SLA per job, observed fraction per bound and observed job) from jobs' spec and status.

    Jobs being deleted and jobs whose SLA is not a number in (0, 1] (an invalid spec) have
    no SLA series.
    """
    sla: dict[JobKey, float] = {}
    observed: dict[JobKey, float] = {}
    for key, (body, status) in jobs.items():
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            continue
        raw = (body.get("spec") or {}).get("throughputSLA")
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw <= 1:
            continue
        sla[key] = float(raw)
        if status.phase in BOUND and status.observed is not None:
            observed[key] = status.observed.throughput_fraction
    return sla, observed


def cluster_measures(
    jobs: Mapping[JobKey, tuple[Mapping[str, Any], OfflineJobStatus]],
    config: SLAMonitorConfig,
) -> tuple[float | None, float]:
    """(SLA attainment, offline throughput) of the bound jobs, by the shared definitions.

    Jobs without a valid SLA (see :func:`job_gauges`) or without a placement are skipped.
    """
    sla, observed = job_gauges(jobs)
    met: list[bool] = []
    credited: list[tuple[float, int]] = []
    for key, (_, status) in jobs.items():
        placement = status.placement
        if key not in sla or status.phase not in BOUND or placement is None:
            continue
        fraction = measures.job_fraction(observed.get(key), placement.throughput_fraction)
        assert fraction is not None  # the prediction is always there
        # The newest SLA window of the placement over the job's slaWindow, as the SLA
        # monitor judged it (its SLAMet); before one closed, the fraction credited.
        body = jobs[key][0]
        history = history_for(
            "/".join(key),
            sla[key],
            placement,
            stored_windows(body),
            spec_sla_window_seconds(body.get("spec") or {}),
            config,
        )
        verdict = measures.latest_window_met(history, config)
        met.append(measures.meets_sla(fraction, sla[key], config) if verdict is None else verdict)
        credited.append((fraction, len(placement.gpu_indices)))
    return measures.sla_attainment(met), measures.offline_throughput(credited)


SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
"""The series a metric family of each type exports beside its samples' names."""


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every series name ``registry``'s families can export, including labelled families
    that have no labels set yet (no samples): what dashboards and alerts may name."""
    names: set[str] = set()
    for family in registry.collect():
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in SERIES_SUFFIXES.get(family.type, ("",))}
    return names


class OperatorMetrics:
    """Metric objects the handlers update (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.jobs = Gauge(
            "gleaner_operator_jobs",
            "OfflineJobs by phase (as of the last scheduling pass).",
            ["phase"],
            registry=self.registry,
        )
        self.placements = PromCounter(
            "gleaner_operator_placements",
            "Offline Pods bound to a placement.",
            registry=self.registry,
        )
        self.evictions = PromCounter(
            "gleaner_operator_evictions",
            "SLA evictions.",
            registry=self.registry,
        )
        self.unschedulable = PromCounter(
            "gleaner_operator_unschedulable",
            "Jobs found unschedulable by a scheduling pass.",
            registry=self.registry,
        )
        self.sla_windows = PromCounter(
            "gleaner_operator_sla_windows",
            "SLA windows judged by the SLA monitor, by result (met or missed), by the job's "
            "namespace and GPUs.",
            ["namespace", "gpus", "result"],
            registry=self.registry,
        )
        self.scheduling_latency = Histogram(
            "gleaner_operator_scheduling_latency_seconds",
            "Wall time of one scheduling pass (read state, decide, bind).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_latency = Histogram(
            "gleaner_operator_job_queue_latency_seconds",
            "Seconds from an OfflineJob's creation to its binding.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.job_sla = Gauge(
            "gleaner_operator_job_throughput_sla",
            "The OfflineJob's throughputSLA (fraction of standalone throughput).",
            ["namespace", "job"],
            registry=self.registry,
        )
        self.job_observed = Gauge(
            "gleaner_operator_job_observed_throughput_fraction",
            "Fraction of standalone throughput observed over the job's last SLA window.",
            ["namespace", "job"],
            registry=self.registry,
        )
        self.sla_attainment = Gauge(
            "gleaner_operator_sla_attainment",
            "SLA attainment: fraction of bound jobs whose latest window (else prediction) "
            "meets the SLA (docs/dashboard.md); NaN when none is bound.",
            registry=self.registry,
        )
        self.offline_throughput = Gauge(
            "gleaner_operator_offline_throughput",
            "Offline throughput of the bound jobs: sum of throughput fraction x GPUs "
            "(standalone-GPU equivalents, docs/dashboard.md).",
            registry=self.registry,
        )
        self.batch_requests = Gauge(
            "gleaner_operator_job_batch_requests",
            "A batch job's requests: done (answered), failed (refused), total (in its input).",
            ["namespace", "job", "state"],
            registry=self.registry,
        )
        self.batch_projected_finish = Gauge(
            "gleaner_operator_job_batch_projected_finish_timestamp_seconds",
            "When a batch job finishes at its observed throughput (Unix time).",
            ["namespace", "job"],
            registry=self.registry,
        )
        self.batch_deadline = Gauge(
            "gleaner_operator_job_batch_deadline_timestamp_seconds",
            "A batch job's deadline (Unix time).",
            ["namespace", "job"],
            registry=self.registry,
        )
        self._batch_keys: set[JobKey] = set()
        self.sla_attainment.set(math.nan)
        self._sla_keys: set[JobKey] = set()
        self._observed_keys: set[JobKey] = set()
        for phase in Phase:
            self.jobs.labels(phase=phase.value).set(0)

    def set_phases(self, phases: Iterable[Phase]) -> None:
        counts = Counter(phases)
        for phase in Phase:
            self.jobs.labels(phase=phase.value).set(counts.get(phase, 0))

    def set_cluster(self, attainment: float | None, throughput: float) -> None:
        """The cluster measures of the last pass (:func:`cluster_measures`)."""
        self.sla_attainment.set(math.nan if attainment is None else attainment)
        self.offline_throughput.set(throughput)

    def count_windows(self, namespace: str, gpus: int, judged: Iterable[bool]) -> None:
        """Count the SLA windows a tick judged (each True: met) for a job of ``gpus``."""
        for met in judged:
            self.sla_windows.labels(namespace, str(gpus), "met" if met else "missed").inc()

    def set_job(self, namespace: str, job: str, sla: float, observed: float | None) -> None:
        """One job's SLA and, when given, its observed fraction (None removes it)."""
        key = (namespace, job)
        self.job_sla.labels(namespace=namespace, job=job).set(sla)
        self._sla_keys.add(key)
        if observed is None:
            self._remove(self.job_observed, self._observed_keys, key)
        else:
            self.job_observed.labels(namespace=namespace, job=job).set(observed)
            self._observed_keys.add(key)

    def set_batch(
        self,
        namespace: str,
        job: str,
        progress: BatchProgress,
        deadline: datetime | None,
    ) -> None:
        """A batch job's progress series (from its status)."""
        for state, value in (
            ("done", progress.requests_done),
            ("failed", progress.requests_failed),
            ("total", progress.requests_total),
        ):
            self.batch_requests.labels(namespace=namespace, job=job, state=state).set(value)
        for gauge, when in (
            (self.batch_projected_finish, progress.projected_finish),
            (self.batch_deadline, deadline),
        ):
            if when is not None:
                gauge.labels(namespace=namespace, job=job).set(when.timestamp())
            else:
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, job)
        self._batch_keys.add((namespace, job))

    def forget_job(self, namespace: str, job: str) -> None:
        """Remove a job's series (it was deleted)."""
        self._remove(self.job_sla, self._sla_keys, (namespace, job))
        self._remove(self.job_observed, self._observed_keys, (namespace, job))
        if (namespace, job) in self._batch_keys:
            self._batch_keys.discard((namespace, job))
            for state in ("done", "failed", "total"):
                with contextlib.suppress(KeyError):
                    self.batch_requests.remove(namespace, job, state)
            for gauge in (self.batch_projected_finish, self.batch_deadline):
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, job)

    def sync_jobs(self, sla: Mapping[JobKey, float], observed: Mapping[JobKey, float]) -> None:
        """Make the per-job series exactly these (from a full list of jobs)."""
        for gauge, keys, values in (
            (self.job_sla, self._sla_keys, sla),
            (self.job_observed, self._observed_keys, observed),
        ):
            for key in keys - set(values):
                self._remove(gauge, keys, key)
            for (namespace, job), value in values.items():
                gauge.labels(namespace=namespace, job=job).set(value)
                keys.add((namespace, job))

    @staticmethod
    def _remove(gauge: Gauge, keys: set[JobKey], key: JobKey) -> None:
        if key in keys:
            gauge.remove(*key)
            keys.discard(key)
