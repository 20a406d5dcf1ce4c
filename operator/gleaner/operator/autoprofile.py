"""Profile on submit: which profiling run comes next, and the status it leaves (pure).

Contract (docs/profiling.md, "Profile on submit"). A job whose ``spec.profileFrom`` has
``auto: true`` and whose ConfigMap does not exist needs a profile
(``validation.NeedsProfile``). It is measured by profiling Pods, one per KV-cache budget,
run one at a time, each built from the job's own template (:func:`build_profiling_pod`):
the engine container runs ``<command> bench throughput --kv-cache-memory-bytes=...
--output-json=/dev/termination-log`` (``gleaner.perfmodel.engine_args.bench_argv``, the
same command line as ``gleaner profile``), so the run's JSON comes back as the container's
termination message. The operator keeps no other state: the Pods of the current attempt
(``status.profilingAttempts``), named ``<job>-profile-<attempt>-<index>``, are the progress,
and a restarted operator reads them again. The stored ConfigMap names the engine image it
was measured with (``ANNOTATION_PROFILE_IMAGE``); :func:`stale_profile` says when the job
now runs another one, and the job is measured again under a new attempt.

:func:`next_step` looks at those Pods (:func:`runs_of`) and says what to do:

- :class:`Wait`: a run is in progress (or its Pod has not reported yet), or a finished
  run waits for the node agent's report that covers its end (at most
  ``ACCOUNTING_GRACE_S``; ``Wait.until``);
- :class:`Launch`: place and start run ``index`` at ``kv_gib``: the first ``runs`` budgets
  are ``perfmodel.profiling.initial_budgets``, then ``refine`` more from ``next_budget``
  (the measurement loop and the fit of ``gleaner profile``: one rule, one place);
- :class:`Store`: every run is in; the fit (``fit_profile``) gave the profile document to
  write to the ConfigMap, with its goodness of fit;
- :class:`Fail`: a run failed (its Pod failed: the termination message or reason says
  why), wrote no usable JSON, or the fit refused the runs. The attempt ends; the shell
  counts it and retries after the exponential backoff of SLA evictions
  (``gleaner.scheduler.monitor.backoff_seconds``).

Tokens per offline GPU-second. A profiling Pod is harvested work: it runs only while its
gate is open, so its wall-clock rate is a lower bound on a monopolised GPU's. Each agent
report (the NodeTrace window of the Pod's node) that overlaps the run adds the overlap and
the gate-open seconds in it (:func:`count_window`, the window's share as the SLA monitor
observes it, ``observation.observe_from_nodetrace``) to the Pod's annotation
``ANNOTATION_PROFILE_GPU_TIME``; :func:`parse_run` converts the run with
``perfmodel.profiling.per_offline_second``. A run no report covered is kept as measured,
and the stored fit says how many were (:func:`measured_how`).

While profiling, the job's phase stays Pending; the ``Profiled`` condition shows progress
(:func:`profiling`, :func:`profiling_failed`, :func:`profiled`). Profiling Pods are placed
like any offline Pod (shim and gate injected by ``builders.build_offline_pod``) with a
provisional profile (:func:`provisional_profile`): they are harvested work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import yaml

from gleaner.api import (
    ConditionType,
    GpuSelector,
    OfflineJob,
    OfflineJobStatus,
    Placement,
    Profile,
    ProfileMeasurement,
)
from gleaner.api.common import Condition, ConditionStatus, find_condition, set_condition
from gleaner.api.contract import (
    ANNOTATION_PROFILE_FIT,
    ANNOTATION_PROFILE_GPU_TIME,
    ANNOTATION_PROFILE_IMAGE,
    ANNOTATION_PROFILE_KV_GIB,
    LABEL_JOB,
    LABEL_PROFILING_POOL,
    LABEL_PROFILING_RUN,
)
from gleaner.batch.pod import template_of
from gleaner.operator.builders import build_offline_pod, gpus_of_pod, owner_reference
from gleaner.operator.config import ProfilingPool
from gleaner.operator.observation import ObservedWindow
from gleaner.perfmodel.engine_args import JobEngine, bench_argv, job_engine
from gleaner.perfmodel.profiling import (
    NO_GPU_TIME,
    GpuTime,
    Measurement,
    fit_profile,
    fit_summary,
    initial_budgets,
    next_budget,
    per_offline_second,
    profile_document,
)

TERMINATION_LOG = "/dev/termination-log"
"""Where the run writes its JSON: the kubelet copies it into the termination message."""
DEFAULT_MAX_NUM_SEQS = 256
"""--max-num-seqs when the job's engine container sets none (as ``gleaner profile``)."""
MIN_GAP_FRACTION = 0.01
"""Refinement never splits an interval narrower than twice this share of the KV range."""
ACCOUNTING_GRACE_S = 120.0
"""How long a finished run waits for the agent's report that covers its end (the agent
reports every 15 s by default); then it counts with what was covered."""


@dataclass(frozen=True)
class RunAccounting:
    """The agent's accounting of one run so far (the Pod's ``ANNOTATION_PROFILE_GPU_TIME``)."""

    gpu_time: GpuTime = NO_GPU_TIME
    through: datetime | None = None
    """End of the last agent report counted (None: none yet)."""

    def to_annotation(self) -> str:
        doc: dict[str, object] = {
            "wallSeconds": round(self.gpu_time.wall_seconds, 3),
            "offlineSeconds": round(self.gpu_time.offline_seconds, 3),
        }
        if self.through is not None:
            doc["through"] = self.through.isoformat()
        return json.dumps(doc, sort_keys=True)

    @staticmethod
    def from_annotation(raw: str | None) -> RunAccounting:
        """The annotation's accounting; none (zero) when it is missing or unreadable."""
        if not raw:
            return RunAccounting()
        try:
            doc = json.loads(raw)
            through = doc.get("through")
            return RunAccounting(
                GpuTime(float(doc["wallSeconds"]), float(doc["offlineSeconds"])),
                None if through is None else datetime.fromisoformat(str(through)),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return RunAccounting()


NO_ACCOUNTING = RunAccounting()


@dataclass(frozen=True)
class ProfilingRun:
    """What one profiling Pod says."""

    index: int
    kv_gib: float
    phase: str
    """The Pod's phase (Pending, Running, Succeeded, Failed, or '')."""
    message: str
    """The engine container's termination message (the run's JSON when it succeeded)."""
    reason: str = ""
    """Why the Pod failed, when it did (container reason and exit code)."""
    started: datetime | None = None
    """When its engine container started (None: not yet, or not reported)."""
    finished: datetime | None = None
    """When its engine container ended (None: not yet, or not reported)."""
    accounting: RunAccounting = NO_ACCOUNTING
    """The agent's accounting of the run so far."""
    shared: bool = True
    """Whether it ran on a GPU shared with online inference, under the gate."""

    @property
    def accounted(self) -> bool:
        """Whether the agent's reports cover the run to its end (always, when not shared)."""
        if not self.shared:
            return True
        through = self.accounting.through
        return self.finished is not None and through is not None and through >= self.finished


@dataclass(frozen=True)
class Wait:
    """A run is in progress, or its accounting is awaited until ``until``."""

    until: datetime | None = None


@dataclass(frozen=True)
class Launch:
    """Place and start run ``index`` at ``kv_gib`` GiB of KV cache per GPU."""

    index: int
    kv_gib: float
    total: int
    """How many runs the measurement takes at most (for progress messages)."""


@dataclass(frozen=True)
class Store:
    """The profile is measured: write ``document`` (the fields of spec.profile)."""

    document: dict[str, object]
    fit: dict[str, object]


@dataclass(frozen=True)
class Fail:
    """The attempt failed; ``message`` says why."""

    message: str


Step = Wait | Launch | Store | Fail


def profiling_pod_name(job: str, attempt: int, index: int) -> str:
    """Deterministic name: a run is created once (check-before-create, 409 = it exists)."""
    return f"{job}-profile-{attempt}-{index}"


def run_label(attempt: int, index: int) -> str:
    return f"{attempt}-{index}"


def _engine_index(containers: Sequence[Mapping[str, Any]]) -> int:
    """The engine container, as ``job_engine`` picks it: the first mentioning vllm."""
    for i, c in enumerate(containers):
        words = [str(w) for w in [*(c.get("command") or []), *(c.get("args") or [])]]
        if any("vllm" in w for w in words):
            return i
    return 0


def _terminated(pod: Mapping[str, Any], container: str | None) -> Mapping[str, Any]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is not None and cs.get("name") != container:
            continue
        term = (cs.get("state") or {}).get("terminated")
        if isinstance(term, dict):
            return term
    return {}


def run_of_pod(pod: Mapping[str, Any], attempt: int) -> ProfilingRun | None:
    """The run a profiling Pod of ``attempt`` holds; None for any other Pod."""
    meta = pod.get("metadata") or {}
    label = str((meta.get("labels") or {}).get(LABEL_PROFILING_RUN) or "")
    head, _, tail = label.partition("-")
    if head != str(attempt) or not tail.isdigit():
        return None
    try:
        kv = float((meta.get("annotations") or {}).get(ANNOTATION_PROFILE_KV_GIB) or "nan")
    except ValueError:
        return None
    if not kv > 0:
        return None
    containers = (pod.get("spec") or {}).get("containers") or []
    engine = str(containers[0].get("name")) if containers else None
    term = _terminated(pod, engine)
    phase = str((pod.get("status") or {}).get("phase") or "")
    reason = ""
    if term:
        reason = f"{term.get('reason') or 'Error'} (exit code {term.get('exitCode', '?')})"
    elif phase == "Failed":
        reason = str((pod.get("status") or {}).get("reason") or "Failed")
    started = _time(term.get("startedAt")) if term else _time(_running_since(pod, engine))
    return ProfilingRun(
        int(tail),
        kv,
        phase,
        str(term.get("message") or ""),
        reason,
        started=started,
        finished=_time(term.get("finishedAt")) if term else None,
        accounting=RunAccounting.from_annotation(
            (meta.get("annotations") or {}).get(ANNOTATION_PROFILE_GPU_TIME)
        ),
        shared=(meta.get("labels") or {}).get(LABEL_PROFILING_POOL) != "true",
    )


def _running_since(pod: Mapping[str, Any], container: str | None) -> object:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is None or cs.get("name") == container:
            running = (cs.get("state") or {}).get("running")
            if isinstance(running, dict):
                return running.get("startedAt")
    return None


def _time(raw: object) -> datetime | None:
    if isinstance(raw, datetime):
        return raw
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw))
    except ValueError:
        return None


def count_window(
    accounting: RunAccounting, window: ObservedWindow, run: ProfilingRun
) -> RunAccounting | None:
    """``accounting`` with one agent report added: the part of its window that overlaps the
    run and no earlier report covered, at the window's gate-open share (the observed
    fraction, memory aside: ``observe_from_nodetrace`` with a memory factor of 1). None
    when the report adds nothing (counted already, or the run has not started)."""
    if run.started is None or (accounting.through is not None and window.end <= accounting.through):
        return None
    begin = window.end - timedelta(seconds=window.seconds)
    lo = max(begin, run.started, accounting.through or begin)
    hi = window.end if run.finished is None else min(window.end, run.finished)
    overlap = max(0.0, (hi - lo).total_seconds())
    share = min(1.0, max(0.0, window.throughput_fraction))
    return RunAccounting(accounting.gpu_time.plus(overlap, overlap * share), window.end)


def node_gpus_of(pod: Mapping[str, Any]) -> tuple[str, list[int]] | None:
    """(node, GPU indices) a profiling Pod runs on (as any offline Pod)."""
    return gpus_of_pod(dict(pod))


def runs_of(pods: Sequence[Mapping[str, Any]], job: str, attempt: int) -> list[ProfilingRun]:
    """The runs of ``job``'s ``attempt`` among ``pods``, by index."""
    runs = [
        r
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB) == job
        and (r := run_of_pod(p, attempt)) is not None
    ]
    return sorted(runs, key=lambda r: r.index)


def parse_run(run: ProfilingRun, settings: ProfileMeasurement) -> Measurement:
    """The measurement in a finished run's JSON; ValueError says what is wrong with it.

    Output tokens are ``output_tokens`` when present, else ``num_requests × outputLen``;
    seconds are ``elapsed_time`` (the keys of ``vllm bench throughput --output-json``). On
    a shared GPU, seconds are then offline GPU-seconds (``per_offline_second`` with the
    run's accounting).
    """
    try:
        data = json.loads(run.message)
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        tokens = data.get("output_tokens")
        if tokens is None:
            tokens = int(data["num_requests"]) * settings.output_len
        seconds = float(data["elapsed_time"])
        measured = Measurement(
            kv_gib=run.kv_gib,
            memory_gib=settings.base_gi_b + run.kv_gib,
            output_tokens=float(tokens),
            seconds=seconds,
        )
    except (ValueError, KeyError, TypeError) as exc:
        first = (run.message.strip().splitlines() or ["empty"])[0][:200]
        raise ValueError(
            f"run {run.index} at {run.kv_gib:.3g} GiB KV wrote no usable JSON "
            f"(elapsed_time and num_requests or output_tokens) as its termination "
            f"message: {exc}; message: {first}"
        ) from exc
    if not run.shared:
        return measured
    return per_offline_second(measured, run.accounting.gpu_time)


def next_step(settings: ProfileMeasurement, runs: Sequence[ProfilingRun], now: datetime) -> Step:
    """What the measurement of one attempt needs next, from its runs so far.

    A finished run on a shared GPU waits for the agent's report past its end, until
    ``ACCOUNTING_GRACE_S`` after it (a run without an end time does not wait)."""
    total = settings.runs + settings.refine
    for r in runs:
        if r.phase == "Failed":
            tail = (r.message.strip().splitlines() or [""])[-1][:300]
            why = r.reason + (f": {tail}" if tail else "")
            return Fail(f"profiling run {r.index} at {r.kv_gib:.3g} GiB KV failed: {why}")
    if any(r.phase != "Succeeded" for r in runs):
        return Wait()
    waits = [
        r.finished + timedelta(seconds=ACCOUNTING_GRACE_S)
        for r in runs
        if r.finished is not None and not r.accounted
    ]
    if waits and max(waits) > now:
        return Wait(until=max(waits))
    try:
        measured = [parse_run(r, settings) for r in runs]
    except ValueError as exc:
        return Fail(str(exc))
    budgets = initial_budgets(settings.kv_min_gi_b, settings.kv_max_gi_b, settings.runs)
    if len(runs) < len(budgets):
        return Launch(len(runs), budgets[len(runs)], total)
    if len(runs) < total:
        gap = MIN_GAP_FRACTION * (settings.kv_max_gi_b - settings.kv_min_gi_b)
        kv = next_budget(measured, gap)
        if kv is not None:
            return Launch(len(runs), kv, total)
    try:
        report = fit_profile(measured)
        fit = {**fit_summary(report), **gpu_time_summary(runs)}
        return Store(profile_document(report), fit)
    except ValueError as exc:
        return Fail(f"the fit refused the runs: {exc}")


def gpu_time_summary(runs: Sequence[ProfilingRun]) -> dict[str, object]:
    """How the runs' seconds were counted, for the stored fit: ``monopolised`` runs (not
    shared), the ``offlineShare`` of the covered time the gate was open over the shared
    runs, and ``runsWithoutGpuTime`` (shared runs no agent report covered: as measured)."""
    shared = [r for r in runs if r.shared]
    covered = [r.accounting.gpu_time for r in shared if r.accounting.gpu_time.wall_seconds > 0]
    wall = sum(g.wall_seconds for g in covered)
    out: dict[str, object] = {
        "monopolisedRuns": len(runs) - len(shared),
        "runsWithoutGpuTime": len(shared) - len(covered),
    }
    if wall > 0:
        out["offlineShare"] = round(sum(g.offline_seconds for g in covered) / wall, 4)
    return out


def measured_how(fit: Mapping[str, object]) -> str:
    """What the Profiled message says about the GPU the runs had, from the stored fit."""
    runs = int(str(fit.get("runs") or 0))
    mono = int(str(fit.get("monopolisedRuns") or 0))
    missing = int(str(fit.get("runsWithoutGpuTime") or 0))
    share = fit.get("offlineShare")
    if runs and mono == runs:
        return "on the dedicated profiling node pool (a GPU of its own: no correction)"
    parts = []
    if share is not None:
        parts.append(
            f"on a shared GPU, in tokens per offline GPU-second (the gate was open "
            f"{float(str(share)):.0%} of the runs' time)"
        )
    if missing:
        parts.append(
            f"{missing} of {runs} runs had no GPU time from the node's agent and count at "
            f"their wall-clock rate (a lower bound)"
        )
    return "; ".join(parts) or "at the wall-clock rate"


def provisional_profile(settings: ProfileMeasurement, kv_gib: float) -> Profile:
    """What the scheduler places a profiling run with: it needs ``baseGiB + kv_gib``.

    Throughput is unknown before the run, so it is 1 token/s at that memory and none at
    half of it: the scheduler's memory factor keeps the run where its budget fits.
    """
    need = settings.base_gi_b + kv_gib
    return Profile.model_validate(
        {
            "standaloneTokensPerSecond": 1.0,
            "requiredMemoryGiB": need,
            "memoryCurve": [
                {"memoryGiB": need / 2, "tokensPerSecond": 0.0},
                {"memoryGiB": need, "tokensPerSecond": 1.0},
            ],
        }
    )


def on_pool(job: OfflineJob, pool: ProfilingPool | None) -> OfflineJob:
    """The job as its profiling runs are placed: with a profiling pool, on the pool's nodes
    only (its ``gpuSelector.nodeSelector`` is the pool's; its GPU products still apply, so
    the profile is measured on the GPU it will run on)."""
    if pool is None:
        return job
    products = list(job.spec.gpu_selector.products) if job.spec.gpu_selector else []
    selector = GpuSelector(node_selector=dict(pool.node_selector), products=products)
    return job.model_copy(update={"spec": job.spec.model_copy(update={"gpu_selector": selector})})


def build_profiling_pod(
    job: OfflineJob,
    placement: Placement,
    attempt: int,
    launch: Launch,
    settings: ProfileMeasurement,
    pool: ProfilingPool | None = None,
) -> dict[str, Any]:
    """The Pod of one run: the job's offline Pod (gate, shim, GPUs), engine replaced.

    Only the engine container is kept (a sidecar that never exits would keep the run from
    finishing); it runs the benchmark with the job's model and throughput flags. Its
    termination message falls back to the log tail, so a failed engine says why. On a
    profiling ``pool`` it also carries the pool's node selector and tolerations, and the
    label ``LABEL_PROFILING_POOL`` (its run is not corrected for shared GPU time).
    """
    pod = build_offline_pod(job, placement, attempt)
    name = job.metadata.name
    pod["metadata"]["name"] = profiling_pod_name(name, attempt, launch.index)
    pod["metadata"]["labels"][LABEL_PROFILING_RUN] = run_label(attempt, launch.index)
    pod["metadata"]["annotations"][ANNOTATION_PROFILE_KV_GIB] = repr(launch.kv_gib)
    spec = pod["spec"]
    engine = _engine_of(job)
    container = dict(spec["containers"][_engine_index(spec["containers"])])
    container["command"] = bench_argv(
        settings.command,
        engine.model or "",
        launch.kv_gib,
        settings.input_len,
        settings.output_len,
        settings.num_prompts,
        engine.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        TERMINATION_LOG,
        engine.engine_args,
    )
    container.pop("args", None)
    container["terminationMessagePath"] = TERMINATION_LOG
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    spec["containers"] = [container]
    spec["restartPolicy"] = "Never"
    if pool is not None:
        pod["metadata"]["labels"][LABEL_PROFILING_POOL] = "true"
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **pool.node_selector}
        spec["tolerations"] = [*(spec.get("tolerations") or []), *map(dict, pool.tolerations)]
    return pod


def _engine_of(job: OfflineJob) -> JobEngine:
    spec = {"template": template_of(job), "gpus": job.spec.gpus}
    return job_engine({"metadata": {"name": job.metadata.name}, "spec": spec})


def engine_image(job: OfflineJob) -> str:
    """The image of the job's engine container (what a profile is measured with)."""
    containers = template_of(job)["spec"]["containers"]
    return str(containers[_engine_index(containers)].get("image") or "")


def stale_profile(job: OfflineJob, configmap: Mapping[str, Any]) -> str | None:
    """Why a measured profile ConfigMap no longer fits the job (another engine image), or
    None. A ConfigMap without the image annotation (written by someone else) never is."""
    measured = ((configmap.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_PROFILE_IMAGE
    )
    image = engine_image(job)
    if measured is None or str(measured) == image:
        return None
    name = (configmap.get("metadata") or {}).get("name")
    return f"ConfigMap {name} was measured with image {measured}; the job runs {image}"


def missing_model(job: OfflineJob) -> str | None:
    """Why the job's template cannot be profiled, or None."""
    if not _engine_of(job).model:
        return (
            "spec.template: the engine container passes no --model (the profiling runs "
            "need it); set it or write the profile ConfigMap"
        )
    return None


def build_profile_configmap(job: OfflineJob, name: str, key: str, store: Store) -> dict[str, Any]:
    """The measured profile's ConfigMap, owned by the job (deleted with it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace or "default",
            "labels": {LABEL_JOB: job.metadata.name},
            "annotations": {
                ANNOTATION_PROFILE_FIT: json.dumps(store.fit, sort_keys=True),
                ANNOTATION_PROFILE_IMAGE: engine_image(job),
            },
            "ownerReferences": [owner_reference(job)],
        },
        "data": {key: yaml.safe_dump(store.document, sort_keys=False)},
    }


def _profiled_cond(
    status: OfflineJobStatus, ok: bool, reason: str, message: str, now: datetime
) -> list[Condition]:
    return set_condition(
        list(status.conditions),
        Condition(
            type=ConditionType.PROFILED.value,
            status=ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
            reason=reason,
            message=message,
            last_transition_time=now,
        ),
    )


def profiling_started(status: OfflineJobStatus) -> bool:
    """Whether the status already tells profiling's story (``Profiled=False``)."""
    cond = find_condition(status.conditions, ConditionType.PROFILED.value)
    return cond is not None and cond.status is ConditionStatus.FALSE


def profiling(status: OfflineJobStatus, message: str, now: datetime) -> OfflineJobStatus:
    """Profiling is under way (or waits for a GPU): ``Profiled=False``, reason Profiling.

    A job that was profiled before (its ConfigMap was deleted, or measured with another
    image) starts a new attempt: the old attempt's Pods hold the old measurement.
    """
    cond = find_condition(status.conditions, ConditionType.PROFILED.value)
    attempts = status.profiling_attempts
    if cond is not None and cond.status is ConditionStatus.TRUE:
        attempts += 1
    return status.model_copy(
        update={
            "profiling_attempts": attempts,
            "conditions": _profiled_cond(status, False, "Profiling", message, now),
        }
    )


def profiling_failed(
    status: OfflineJobStatus, message: str, now: datetime, retry_at: datetime
) -> OfflineJobStatus:
    """An attempt failed: count it, back off, say why (``ProfilingFailed``)."""
    return status.model_copy(
        update={
            "profiling_attempts": status.profiling_attempts + 1,
            "next_attempt_after": retry_at,
            "conditions": _profiled_cond(status, False, "ProfilingFailed", message, now),
        }
    )


def profiled(status: OfflineJobStatus, message: str, now: datetime) -> OfflineJobStatus:
    """The profile is stored: ``Profiled=True``; the job is placed normally from now on."""
    return status.model_copy(
        update={
            "next_attempt_after": None,
            "conditions": _profiled_cond(status, True, "Profiled", message, now),
        }
    )


__all__ = [
    "ACCOUNTING_GRACE_S",
    "Fail",
    "Launch",
    "ProfilingRun",
    "RunAccounting",
    "Step",
    "Store",
    "Wait",
    "build_profile_configmap",
    "build_profiling_pod",
    "count_window",
    "engine_image",
    "gpu_time_summary",
    "measured_how",
    "missing_model",
    "next_step",
    "node_gpus_of",
    "on_pool",
    "parse_run",
    "profiled",
    "profiling",
    "profiling_failed",
    "profiling_pod_name",
    "profiling_started",
    "provisional_profile",
    "run_of_pod",
    "runs_of",
    "stale_profile",
]
