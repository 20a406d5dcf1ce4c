"""Cluster-level simulation: hundreds to thousands of GPUs, a day of online load, a queue of
OfflineJobs placed by the real scheduler and watched by the real SLA monitor.

Contract. :func:`run_cluster` returns a JSON-ready dict with, per placement policy, the
harvested utilization gain, GPUs saved (offline throughput ÷ standalone), SLA attainment,
evictions, the performance model's prediction error, and cluster time series; plus the
objects behind the dashboard snapshot (NodeTraces, OfflineJobs, eviction reports).

Model (docs/simulator.md has the details):

- Online: services of 1, 2 or 4 GPUs (within a node). Each service's request rate follows a
  diurnal sine with its own phase and peak, multiplied by bursts (Poisson onsets, random
  factor and length) and lognormal AR(1) noise, on per-GPU time series at ``step_s``
  (numpy, [GPUs, steps]); the busy fraction and the KV cache of each GPU are the engine
  model's at that rate (``EngineModel.online_load``). A service has an *alignment* ρ: ρ = 1
  for tensor-parallel GPUs that are busy at the same instants (one engine); ρ < 1 for GPUs
  behind one load balancer (one engine each, with per-GPU rate noise) whose busy instants
  only partly coincide. Within a step, GPUs a, b of one service are jointly busy for
  ρ·min(b_a, b_b) + (1−ρ)·b_a·b_b of it; GPUs of different services independently.
- Harvestable memory per GPU: usable − the service's resident memory − the KV cache the
  engine model holds at that step's rate.
- Ground truth of an offline job on GPU set G: per step, the fraction of time *all* of G is
  offline-enabled (the joint idle fraction above, times the gate efficiency η at the
  busiest GPU of G: ``GateEfficiency``, falling with load as node-level runs measure it)
  times the memory factor at that step's tightest GPU. The
  model instead predicts from a trailing window of NodeSummaries (averages and overlap/union
  ratios), so its error is real: load drifts, and factors correlate.
- Placement: ``gleaner`` = ``gleaner.scheduler.decide`` on a ``SchedulingSnapshot`` (the
  summaries, occupancy, the learned bias, each job's eviction history) with its default
  config;
  ``no-multi-filter`` = the same without the ``PairOverlap`` filter; ``first-fit`` = the
  first node with enough free GPUs, no model; ``no-harvest`` = nothing offline; ``oracle``
  = ``gleaner`` admitting by the run's own future load (:class:`Foresight`), a bound.
- Lifecycle: the operator's (``gleaner.scheduler.lifecycle``): API phases, ``sla_tick``
  each window (grace, k of n), ``evict`` (requeue with backoff away from the node, or
  Failed) plus ``build_eviction_report``, ``may_attempt`` before a queued job is placed,
  and (``gleaner`` with ``move_before_peak``) ``should_move``: every ``move_check_s`` a
  running job whose node no longer admits it over the coming ``move_horizon_h`` moves to a
  node that admits it (a restart of ``move_restart_s``; not an SLA eviction); with the
  planned exit (``planned_exit``, ``PlannedExitRule``), large jobs no node admits over
  ``forecast_horizon_h`` are tried over ``planned_exit_admission_h``, and such a job
  whose node no longer admits it over the next ``planned_exit_horizon_h``, with no other
  node admitting it, goes back to the queue (``check_exit``; counted as a move).
- Measures: the dashboard's (``gleaner.scheduler.measures``, docs/dashboard.md), applied
  per step (harvested utilization, offline throughput) and per SLA window (attainment).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from gleaner.api import LeaveType, Phase, Placement
from gleaner.api.nodetrace import gpu_uuid
from gleaner.perfmodel import JobProfile, NodeSummary, predict
from gleaner.perfmodel.admission import LoadSpread
from gleaner.perfmodel.diurnal import (
    HOURS,
    DiurnalProfile,
    busy_ratios,
    forecast,
    hour_busy,
    is_weekend,
    with_gpu_shares,
)
from gleaner.scheduler import (
    DEFAULT_FILTERS,
    BiasTable,
    EvictionReport,
    JobRequest,
    PlacementDecision,
    PredictedFactors,
    SchedulerConfig,
    SchedulingSnapshot,
    SLAHistory,
    SLAMonitorConfig,
    build_eviction_report,
    decide,
)
from gleaner.scheduler.bias import NODE_LEVEL, feed
from gleaner.scheduler.lifecycle import (
    PlannedExitRule,
    advance,
    may_attempt,
    move_phases,
    sla_tick,
)
from gleaner.scheduler.lifecycle import evict as lifecycle_evict
from gleaner.scheduler.measures import (
    harvested_utilization,
    job_fraction,
    meets_sla,
    offline_throughput,
    sla_attainment,
)
from gleaner.scheduler.monitor import samples_needed
from gleaner.scheduler.move import check_exit, check_move
from gleaner.scheduler.risk import AdmissionRisk
from gleaner.simulator.cluster_scenario import ClusterScenario, PolicyName
from gleaner.simulator.latency import MODELS
from gleaner.simulator.offline import OfflineJobConfig, memory_curve
from gleaner.simulator.online import (
    EPOCH,
    EPOCH_SECONDS,
    REFERENCE_BUSY,
    GateEfficiency,
    OnlineCluster,
    as_gate,
    generate_online,
    joint_idle,
    node_summary,
)

FloatArray = npt.NDArray[np.float64]

LARGE_MODEL_WEIGHTS_GIB = 140.0
"""Weights of the 70B-class model that 4- and 8-GPU offline jobs run (BF16), GiB."""


# -- offline jobs -------------------------------------------------------------------------


@dataclass
class SimJob:
    key: str
    gpus: int
    sla: float
    profile: JobProfile
    work_tokens: float
    arrival: float
    max_evictions: int
    sla_window_s: float | None = None
    """The job's SLA window (``spec.slaWindow``), seconds; None: one monitor window."""
    done_tokens: float = 0.0
    phase: Phase = Phase.PENDING
    node: int | None = None
    rows: list[int] = field(default_factory=list)
    placed_at: float = 0.0
    predicted: PredictedFactors | None = None
    predicted_raw: float = 0.0
    predicted_mean: float = 0.0
    """The model on the mean forecast of the chosen GPUs (what prediction error measures;
    ``predicted_raw`` is the admission bound under the worst-hours forecast)."""
    decision: PlacementDecision | None = None
    """The scheduler's decision behind the latest placement (None under first-fit)."""
    status_placement: Placement | None = None
    """The operator's ``status.placement`` of that decision (what the bias table is fed
    against; None under first-fit)."""
    history: SLAHistory | None = None
    sla_met: bool | None = None
    """The SLAMet the monitor last set on the current placement: the verdict of its newest
    closed SLA window (None: none closed yet); ``latest_window_met`` of ``history``."""
    evictions: int = 0
    excluded: tuple[str, ...] = ()
    not_before: float | None = None
    finished_at: float | None = None
    truth: FloatArray | None = None
    """Per-step true throughput fraction on the current placement, from placed step on."""
    truth_step0: int = 0
    restart_steps: int = 0
    """Steps at the start of the current placement that a move's restart made nothing in
    (SLA windows count them; the prediction error, which judges the model, does not)."""
    stay_observed: list[float] = field(default_factory=list)
    windows_total: int = 0
    """SLA windows judged (closed windows of ``sla_window_s``; with no longer SLA window,
    every monitor window, grace windows included, as the operator's ``SLAMet``)."""
    windows_met: int = 0
    placements: list[dict[str, Any]] = field(default_factory=list)
    series: list[tuple[float, float]] = field(default_factory=list)
    planned_exit: bool = False
    """The current placement was made by the planned exit's shorter admission pass."""
    exited: bool = False
    """It left its last node by a planned exit: it pays the move's restart when placed
    again."""

    @property
    def moves(self) -> int:
        """Moves before a forecast peak, planned exits included (the operator's
        ``moveCount``): the stays that carry ``left`` (its record type, reason and observed
        mean)."""
        return sum(1 for stay in self.placements if "left" in stay)


def make_jobs(cfg: ClusterScenario, rng: np.random.Generator) -> list[SimJob]:
    """The OfflineJob queue: sizes, SLAs, profiles (from the latency model) and arrivals."""
    model = MODELS[cfg.model]
    n_gpus = cfg.nodes * cfg.gpus_per_node
    count = max(1, round(cfg.jobs.per_100_gpus * n_gpus / 100.0))
    sizes = [k for k in cfg.jobs.gpus if k <= cfg.gpus_per_node]
    p = np.array([cfg.jobs.gpus[k] for k in sizes])
    p /= p.sum()
    profiles: dict[int, JobProfile] = {}
    for k in sizes:
        # Weights per GPU shard: the engine model's (an 8B model) on 1–2 GPUs, a 70B-class
        # model on 4+. The curve spans what is left beside the smallest online service.
        weights = model.weights_gib / k if k <= 2 else LARGE_MODEL_WEIGHTS_GIB / k
        job = OfflineJobConfig(weights_gib=max(weights, 4.0))
        curve = memory_curve(model, job, cfg.usable_gib - model.resident_gib)
        scale = k * (0.85 if k > 1 else 1.0) * (0.12 if k >= 4 else 1.0) * (4 if k >= 4 else 1)
        tps = tuple(v * scale for v in curve.tokens_per_second)
        profiles[k] = JobProfile(
            standalone_tokens_per_second=tps[-1],
            required_memory_gib=curve.required_memory_gib,
            curve_memory_gib=curve.memory_gib,
            curve_tokens_per_second=tps,
            memory_deficit_coefficient=0.01 * tps[-1],
        )
    duration = cfg.duration_h * 3600.0
    lo, hi = cfg.jobs.arrival_window
    jobs: list[SimJob] = []
    arrivals = np.sort(rng.uniform(lo * duration, hi * duration, size=count))
    for i, t in enumerate(arrivals):
        k = sizes[int(rng.choice(len(sizes), p=p))]
        prof = profiles[k]
        sla = round(float(rng.uniform(*cfg.jobs.sla)) * 20) / 20
        hours = float(rng.uniform(*cfg.jobs.standalone_hours))
        jobs.append(
            SimJob(
                key=f"batch/job-{i:04d}",
                gpus=k,
                sla=max(0.05, sla),
                profile=prof,
                work_tokens=hours * 3600.0 * prof.standalone_tokens_per_second,
                arrival=float(t),
                max_evictions=cfg.jobs.max_evictions,
                sla_window_s=cfg.jobs.sla_window_s,
            )
        )
    return jobs


def _truth(online: OnlineCluster, job: SimJob, step0: int, eta: GateEfficiency) -> FloatArray:
    """True throughput fraction per step from ``step0`` on, for the job's placement: the
    joint idle share × η at the busiest of its GPUs (η falls with load) × the memory
    factor at its tightest GPU."""
    t = slice(step0, online.busy.shape[1])
    compute = joint_idle(online, job.rows, t) * eta.at(online.busy[job.rows, t]).min(axis=0)
    m = online.free_gib[job.rows, t].min(axis=0)
    prof = job.profile
    tp = np.interp(m, prof.curve_memory_gib, prof.curve_tokens_per_second)
    tp = np.where(m < prof.curve_memory_gib[0], 0.0, tp)
    deficit = np.maximum(0.0, prof.required_memory_gib - m)
    mem = np.clip((tp - prof.memory_deficit_coefficient * deficit) / tp_max(prof), 0.0, 1.0)
    out: FloatArray = compute * mem
    return out


def tp_max(prof: JobProfile) -> float:
    return float(prof.curve_tokens_per_second[-1])


# -- what the dashboard would show --------------------------------------------------------


def trailing_idle(
    online: OnlineCluster, window_steps: int, eta: float | GateEfficiency
) -> FloatArray:
    """[GPUs, steps + 1]: column ``s`` is each GPU's P_compute over the agent's trailing window
    of steps [max(0, s - window_steps), s), exactly what :func:`node_summary` reports
    (offline-enabled seconds over the window, clipped to [0, 1]); column 0 is 0."""
    g, steps = online.busy.shape
    cum = np.zeros((g, steps + 1))
    np.cumsum(as_gate(eta).enabled(online.busy), axis=1, out=cum[:, 1:])
    end = np.arange(steps + 1)
    start = np.maximum(0, end - max(1, window_steps))
    count = np.maximum(1, end - start)
    out: FloatArray = np.clip((cum[:, end] - cum[:, start]) / count, 0.0, 1.0)
    return out


def current_observed(job: SimJob) -> float | None:
    """The observed fraction the operator shows for a placed job: its last SLA window on the
    *current* placement (the operator clears ``status.observed`` when it places a job)."""
    if job.series and job.series[-1][0] > job.placed_at:
        return job.series[-1][1]
    return None


def dashboard_point(
    running: list[SimJob], idle: FloatArray, n_gpus: int, config: SLAMonitorConfig
) -> tuple[float, float, float | None]:
    """(harvested utilization, offline throughput, SLA attainment) of the running jobs, by
    the shared definitions (``gleaner.scheduler.measures``, docs/dashboard.md), so a
    simulation's charts end where its cards are: ``idle`` holds one trailing-window
    P_compute per GPU row; a job's fraction is its observed window of the current placement,
    else its prediction; a job meets its SLA as its newest SLA window did
    (``SimJob.sla_met``, the monitor's SLAMet: the dashboard's rule), else as its fraction
    does; attainment is None without running jobs."""
    held: list[float] = []
    credited: list[tuple[float, int]] = []
    met: list[bool] = []
    for job in running:
        held.extend(float(v) for v in idle[job.rows])
        predicted = min(1.0, job.predicted.throughput_fraction) if job.predicted else 0.0
        basis = job_fraction(current_observed(job), predicted)
        assert basis is not None
        credited.append((basis, job.gpus))
        # The newest SLA window of the placement, as the monitor judged it (else the basis).
        met.append(meets_sla(basis, job.sla, config) if job.sla_met is None else job.sla_met)
    harvested = harvested_utilization(held, max(1, n_gpus))
    assert harvested is not None
    return harvested, offline_throughput(credited), sla_attainment(met)


# -- placement policies -------------------------------------------------------------------


PlacedJob = tuple[SimJob, str, tuple[int, ...], PredictedFactors, float, PlacementDecision | None]
"""(job, node, GPUs, predicted factors, admission bound, the scheduler's decision or None)."""
Placer = Callable[
    [list[SimJob], dict[str, NodeSummary], dict[str, dict[int, str]], float],
    list[PlacedJob],
]


def _scheduler_placer(config: SchedulerConfig, bias: BiasTable) -> Placer:
    def place(
        pending: list[SimJob],
        summaries: dict[str, NodeSummary],
        occupied: dict[str, dict[int, str]],
        now: float,
    ) -> list[PlacedJob]:
        by_key = {j.key: j for j in pending}
        snapshot = _snapshot([_request(j) for j in pending], summaries, occupied, now, bias)
        result = decide(snapshot, config)
        return [_placed(by_key[d.job], d) for d in result.placements]

    return place


def _request(j: SimJob) -> JobRequest:
    """What the scheduler sees of a simulated job (as the operator builds it from a job)."""
    return JobRequest(
        key=j.key,
        profile=j.profile,
        gpus=j.gpus,
        sla=j.sla,
        excluded_nodes=frozenset(j.excluded),
        arrival=j.arrival,
        not_before=None if j.not_before is None else EPOCH_SECONDS + j.not_before,
        max_evictions=j.max_evictions,
        eviction_count=j.evictions,
    )


def _snapshot(
    requests: list[JobRequest],
    summaries: dict[str, NodeSummary],
    occupied: dict[str, dict[int, str]],
    now: float,
    bias: BiasTable,
) -> SchedulingSnapshot:
    return SchedulingSnapshot(
        jobs=requests,
        nodes=summaries,
        now=EPOCH + timedelta(seconds=now),
        occupied=occupied,
        bias=bias,
    )


def _placed(job: SimJob, d: PlacementDecision) -> PlacedJob:
    p = d.prediction
    f = PredictedFactors(p.compute, p.memory, p.multi_gpu, d.throughput_fraction)
    return (job, d.node, tuple(d.gpus), f, p.throughput_fraction, d)


def _first_fit(
    pending: list[SimJob],
    summaries: dict[str, NodeSummary],
    occupied: dict[str, dict[int, str]],
    now: float,
) -> list[PlacedJob]:
    """First node (name order) with enough free GPUs; no model, no SLA check."""
    taken = {n: set(o) for n, o in occupied.items()}
    out: list[PlacedJob] = []
    for job in sorted(pending, key=lambda j: j.arrival):
        if not may_attempt(job.not_before, now):
            continue
        for name, summ in summaries.items():
            if name in job.excluded:
                continue
            free = [i for i in summ.gpu_indices if i not in taken.get(name, set())]
            if len(free) >= job.gpus:
                gpus = tuple(free[: job.gpus])
                taken.setdefault(name, set()).update(gpus)
                out.append((job, name, gpus, PredictedFactors(1.0, 1.0, 1.0, 1.0), 1.0, None))
                break
    return out


# -- the simulation -----------------------------------------------------------------------


def run_policy(
    cfg: ClusterScenario,
    online: OnlineCluster,
    jobs: list[SimJob],
    policy: PolicyName,
    eta: GateEfficiency,
    progress: Callable[[int], None] | None = None,
    shared: dict[int, ForecastBase] | None = None,
) -> dict[str, Any]:
    """Simulate one placement policy over the whole run. ``shared`` carries the
    time-of-day forecasts (which no policy changes) from one policy's run to the next."""
    step = cfg.step_s
    t0 = online.t0_step
    n_steps = online.busy.shape[1] - t0
    win_steps = max(1, round(cfg.window_h * 3600 / step))
    refresh = max(1, round(cfg.summary_refresh_s / step))
    sched_every = max(1, round(cfg.schedule_interval_s / step))
    mon_every = max(1, round(cfg.monitor.window_s / step))
    move_every = max(1, round(cfg.move_check_s / step))
    mon = cfg.monitor.sla_monitor()
    forecast_mode = "trailing" if policy in ("paper", "no-diurnal") else cfg.forecast
    if policy == "no-worst-hours" and forecast_mode == "worst-hours":
        forecast_mode = "diurnal"
    # Proactive moves before a forecast peak need the time-of-day forecast to see one.
    moving = (
        cfg.move_before_peak
        and forecast_mode == "worst-hours"
        and policy not in ("no-move", "first-fit", "no-harvest")
    )
    moves = 0
    exits = 0
    exit_rule = planned_exit_rule(cfg, policy) if moving else None
    # The operator's rule: its bias table, fed with each window against the placement's
    # raw prediction (the admission bound under worst-hours), and the load spread of nodes
    # with hours at the same risk target.
    rule = admission_rule(cfg, policy)
    bias = BiasTable(rule.bias_config())
    sla_window_s = cfg.jobs.sla_window_s or cfg.monitor.window_s
    placer: Placer | None
    # The paper's model scores by best fit alone; Gleaner's policies keep the margin.
    margin = 0.0 if policy == "paper" else cfg.sla_margin
    filters = DEFAULT_FILTERS
    if policy == "no-multi-filter":
        filters = tuple(f for f in DEFAULT_FILTERS if f != "PairOverlap")
    sched_config = SchedulerConfig(filters=filters, sla_margin=margin)
    if policy == "first-fit":
        placer = _first_fit
    elif policy == "no-harvest":
        placer = None
    else:  # every other policy is the scheduler's, the ablations with one rule changed
        placer = _scheduler_placer(sched_config, bias)
    summaries: dict[str, NodeSummary] = {}
    means: dict[str, NodeSummary] = {}
    forecasts: Forecasts | None = None
    profiles = _Profiles(online)
    occupied: dict[str, dict[int, str]] = {}
    gpu_job: list[SimJob | None] = [None] * online.n_gpus
    offline_used = np.zeros(n_steps)
    offline_equiv = np.zeros(n_steps)
    sla_ok = np.full(n_steps, np.nan)
    reports: list[EvictionReport] = []
    preds: list[dict[str, float]] = []
    evictions = 0
    idle_now = trailing_idle(online, win_steps, eta) if placer is not None else None
    shown: list[tuple[float, float, float, float | None]] = []

    def show(t: float, s_end: int) -> None:
        assert idle_now is not None
        shown.append((t, *dashboard_point(running, idle_now[:, s_end], online.n_gpus, mon)))

    queue = sorted(jobs, key=lambda j: j.arrival)
    nxt = 0
    pending: list[SimJob] = []
    running: list[SimJob] = []

    def end_stay(job: SimJob, t_end: float, left: tuple[LeaveType, str] | None = None) -> None:
        """End the job's current stay at ``t_end``. ``left``: it leaves by a move or its
        planned exit, with this reason; the stay records it (what the operator writes into
        ``status.evictions``) with the stay's observed mean."""
        if job.placements:
            job.placements[-1]["end"] = t_end
        running_part = job.stay_observed[job.restart_steps :]
        observed = float(np.mean(running_part)) if running_part else None
        if observed is not None and job.predicted is not None:
            preds.append(
                {
                    "predicted": job.predicted_mean,
                    "observed": observed,
                    "gpus": float(job.gpus),
                }
            )
        if left is not None:
            how, reason = left
            job.placements[-1]["left"] = {
                "type": how.value,
                "reason": reason,
                "observed": 0.0 if observed is None else observed,
            }
        job.stay_observed = []
        for r in job.rows:
            gpu_job[r] = None
        if job.node is not None:
            name = online.node_names[job.node]
            occ = occupied.get(name, {})
            for r in job.rows:
                occ.pop(r - job.node * online.gpus_per_node, None)
        job.truth = None

    def start_stay(
        job: SimJob,
        node_name: str,
        gpus: tuple[int, ...],
        factors: PredictedFactors,
        raw: float,
        decision: PlacementDecision | None,
        now: float,
        s_abs: int,
        restart_steps: int,
    ) -> None:
        """Place ``job``; its first ``restart_steps`` steps make nothing (a restart). A
        moved job (``restart_steps`` > 0) gets no new grace period: its SLA windows go on
        from the move, the restart inside them."""
        node = online.node_names.index(node_name)
        job.node = node
        job.rows = [node * online.gpus_per_node + g for g in gpus]
        job.placed_at = now
        job.predicted = factors
        job.predicted_raw = raw
        # Kept for the recorded status: built from the decision as the operator does.
        if decision is not None:
            job.decision = decision
        job.status_placement = (
            None
            if job.decision is None
            else job.decision.to_placement(EPOCH + timedelta(seconds=now))
        )
        job.predicted_mean = predict(
            job.profile, job.sla, means.get(node_name, summaries[node_name]), gpus
        ).throughput_fraction
        # The simulated Pod starts at once: Scheduled, then Running.
        job.phase = advance(advance(job.phase, Phase.SCHEDULED), Phase.RUNNING)
        job.sla_met = None
        job.history = SLAHistory(
            job=job.key,
            sla=job.sla,
            node=node_name,
            gpus=gpus,
            placed_at=now - mon.grace_seconds if restart_steps > 0 else now,
            predicted=factors.throughput_fraction,
            max_windows=max(64, samples_needed(job.sla_window_s, mon)),
            sla_window_seconds=job.sla_window_s,
        )
        truth = _truth(online, job, s_abs, eta)
        truth[:restart_steps] = 0.0
        job.restart_steps = restart_steps
        job.truth = truth
        job.truth_step0 = s_abs
        job.placements.append({"t": now, "node": node_name, "gpus": list(gpus), "predicted": raw})
        occupied.setdefault(node_name, {}).update({g: job.key for g in gpus})
        for r in job.rows:
            gpu_job[r] = job

    def move_before_peak(now: float, s_abs: int) -> int:
        """Move each running job whose node no longer admits it over the coming
        ``move_horizon_h`` to a node that admits it by the placement rule
        (``gleaner.scheduler.move.check_move``, as the operator asks it); returns the moves
        made."""
        assert placer is not None and forecasts is not None
        nonlocal exits
        coming = forecasts.admit(cfg.move_horizon_h * 3600)
        moved = 0
        for job in sorted(running, key=lambda j: j.arrival):
            if job.node is None:
                continue
            name = online.node_names[job.node]
            snapshot = _snapshot([], summaries, occupied, now, bias)
            request = _request(job)
            check = check_move(
                snapshot,
                request,
                name,
                coming[name],
                job.placed_at,
                now,
                sched_config,
                cfg.move_min_stay_s,
            )
            if check.destination is None or not check.move:
                soon = None if exit_rule is None else forecasts.admit(exit_rule.exit_horizon_s)
                if soon is not None and check_exit(
                    check, snapshot, request, name, soon[name], job.planned_exit, sched_config
                ):
                    # The planned exit: back to the queue, progress kept, by the move's path
                    # (the operator's carry_out_eviction with move).
                    job.placements[-1]["exited"] = True
                    assert exit_rule is not None
                    end_stay(job, now, (LeaveType.PLANNED_EXIT, exit_rule.exit_reason))
                    job.phase = move_phases(job.phase)[0]
                    job.planned_exit = False
                    job.exited = True
                    running.remove(job)
                    pending.append(job)
                    exits += 1
                continue
            _, node_name, gpus, factors, raw, placed = _placed(job, check.destination)
            end_stay(job, now, (LeaveType.MOVE, check.reason))
            job.phase = move_phases(job.phase)[0]
            restart = max(1, round(cfg.move_restart_s / step))
            start_stay(job, node_name, gpus, factors, raw, placed, now, s_abs, restart)
            # Placed again by the placement rule over the normal horizon.
            job.planned_exit = False
            moved += 1
        return moved

    for k in range(n_steps):
        now = k * step
        s_abs = t0 + k
        if placer is None:
            break
        while nxt < len(queue) and queue[nxt].arrival <= now:
            pending.append(queue[nxt])
            nxt += 1
        if k % refresh == 0:
            start = max(0, s_abs - win_steps)
            if forecast_mode != "trailing":
                fb = None if shared is None else shared.get(s_abs)
                if fb is None:
                    profiles = _fold_hours(online, profiles, s_abs, eta, sla_window_s)
                    fb = _forecast_base(cfg, online, profiles, s_abs, now, eta)
                    if shared is not None:
                        shared[s_abs] = fb
                forecasts = fb.forecasts(forecast_mode, rule)
                if policy == "oracle":
                    forecasts = Foresight(**vars(forecasts), online=online, step=s_abs, eta=eta)
                means = forecasts.means
                summaries = forecasts.admit(cfg.forecast_horizon_h * 3600)
            elif s_abs > start:
                summaries = {
                    online.node_names[n]: node_summary(online, n, start, s_abs, eta)
                    for n in range(len(online.node_names))
                }
                means = summaries
        if (
            moving
            and k % move_every == 0
            and k > 0
            and forecasts is not None
            and forecasts.means
            and running
        ):
            moves += move_before_peak(now, s_abs)
        if k % sched_every == 0 and pending and summaries:
            ready = [j for j in pending if may_attempt(j.not_before, now)]
            groups: list[tuple[list[SimJob], dict[str, NodeSummary]]] = [(ready, summaries)]
            if (
                ready
                and forecasts is not None
                and forecast_mode == "worst-hours"
                and cfg.judge_expected_run
            ):
                # Each job is judged over its expected remaining run at its SLA, in buckets
                # of horizons (longest first: the hardest to place).
                by_horizon: dict[float, list[SimJob]] = {}
                for j in ready:
                    by_horizon.setdefault(_horizon_bucket(j, cfg), []).append(j)
                groups = [
                    (by_horizon[h], forecasts.admit(h)) for h in sorted(by_horizon, reverse=True)
                ]
            short = len(groups)
            if ready and forecasts is not None and exit_rule is not None:
                # The planned exit's second pass: large jobs the passes above left unplaced,
                # judged over the shorter horizon.
                normal_s = cfg.forecast_horizon_h * 3600
                large = [j for j in ready if exit_rule.second_pass(j.gpus, normal_s)]
                groups.append((large, forecasts.admit(exit_rule.admission_horizon_s)))
            for gi, (group, admit) in enumerate(groups):
                group = [j for j in group if j in pending]
                for job, node_name, gpus, factors, raw, placed in placer(
                    group, admit, occupied, now
                ):
                    restart = 0
                    if job.exited:
                        restart = max(1, round(cfg.move_restart_s / step))
                        job.exited = False
                    start_stay(job, node_name, gpus, factors, raw, placed, now, s_abs, restart)
                    job.planned_exit = gi >= short
                    job.placements[-1]["planned_exit"] = job.planned_exit
                    pending.remove(job)
                    running.append(job)
        # Progress of running jobs in this step.
        still: list[SimJob] = []
        held_idle: list[float] = []
        credited: list[tuple[float, int]] = []
        for job in running:
            assert job.truth is not None
            frac = float(job.truth[s_abs - job.truth_step0])
            job.done_tokens += frac * job.profile.standalone_tokens_per_second * step
            job.stay_observed.append(frac)
            # The idle fraction of each held GPU over this step (its offline-enabled share).
            held_idle.extend(eta.enabled(online.busy[job.rows, s_abs]))
            credited.append((frac, job.gpus))
            if job.done_tokens >= job.work_tokens:
                job.phase = advance(job.phase, Phase.SUCCEEDED)
                job.finished_at = now + step
                end_stay(job, now + step)
                continue
            still.append(job)
        running = still
        offline_used[k] = harvested_utilization(held_idle, online.n_gpus) or 0.0
        offline_equiv[k] = offline_throughput(credited)
        # SLA monitor at the end of each window: the shared lifecycle's tick and eviction.
        if (k + 1) % mon_every == 0:
            met_now: list[bool] = []
            still = []
            t_end = now + step
            for job in running:
                assert job.history is not None
                window = job.stay_observed[-mon_every:]
                if not window:
                    still.append(job)
                    continue
                observed = float(np.mean(window))
                job.series.append((t_end, observed))
                tick = sla_tick(job.history, (t_end, observed), t_end, mon)
                job.history = tick.history
                if tick.met is not None:
                    job.sla_met = tick.met
                met_now.extend(tick.judged)
                job.windows_total += len(tick.judged)
                job.windows_met += sum(tick.judged)
                if job.status_placement is not None:
                    feed(bias, job.status_placement, NODE_LEVEL, observed)
                decision = tick.decision
                if decision.evict:
                    evictions += 1
                    name = online.node_names[job.node or 0]
                    eviction = lifecycle_evict(
                        job.phase, name, job.evictions, job.max_evictions, job.excluded, t_end, mon
                    )
                    plan = eviction.plan
                    assert job.predicted is not None
                    # The report's times are epoch seconds, like the operator's.
                    epoch_plan = replace(
                        plan,
                        next_attempt_after=None
                        if plan.next_attempt_after is None
                        else _epoch_s(plan.next_attempt_after),
                    )
                    node_i = job.node or 0
                    uuids = tuple(
                        gpu_uuid(name, r - node_i * online.gpus_per_node) for r in job.rows
                    )
                    reports.append(
                        build_eviction_report(
                            job.history,
                            decision,
                            epoch_plan,
                            job.predicted,
                            _epoch_s(t_end),
                            mon,
                            gpu_uuids=uuids,
                        )
                    )
                    job.evictions = plan.eviction_count
                    job.excluded = plan.excluded_nodes
                    job.not_before = plan.next_attempt_after
                    end_stay(job, t_end)
                    job.phase = eviction.phase
                    if not plan.failed:
                        pending.append(job)
                    continue
                still.append(job)
            running = still
            attained = sla_attainment(met_now)
            if attained is not None:
                sla_ok[k] = attained
            show(t_end, s_abs + 1)
        if progress is not None and k % 60 == 0:
            progress(min(60, n_steps - k))
    if placer is not None and n_steps % mon_every:
        show(n_steps * step, t0 + n_steps)
    for job in running:
        end_stay(job, n_steps * step)
    out = _cluster_metrics(
        cfg, online, jobs, policy, offline_used, offline_equiv, sla_ok, reports, preds, evictions
    )
    # A planned exit counts as a move (a restart, not an SLA eviction).
    out["moves"] = moves + exits
    out["planned_exits"] = exits
    out["_dashboard"] = shown
    # The dashboard scores a job's other nodes with the table and rule this run admitted by.
    out["_bias"] = bias
    out["_risk_target"] = rule.risk_target
    return out


def planned_exit_rule(cfg: ClusterScenario, policy: PolicyName) -> PlannedExitRule | None:
    """The planned exit a policy places by (docs/scheduler.md, "Planned exits"): the
    scenario's rule when ``planned_exit`` is on; none under ``no-planned-exit`` (and, by
    the caller, none without moves, which the exit needs)."""
    if policy == "no-planned-exit" or not cfg.planned_exit:
        return None
    return cfg.planned_exit_rule()


def admission_rule(cfg: ClusterScenario, policy: PolicyName) -> AdmissionRisk:
    """The operator's risk rule (``AdmissionRisk``) a policy admits by: the scenario's
    ``risk_target`` (none for ``paper`` and ``no-risk``) over its ``forecast_horizon_h``."""
    risk = None if policy in ("paper", "no-risk") else cfg.risk_target
    return AdmissionRisk(risk, cfg.forecast_horizon_h * 3600)


class _Profiles:
    """Each node's time-of-day profile, the first step not folded into it yet, and the
    load spread learned from past SLA windows (forecast / observed busy share)."""

    def __init__(self, online: OnlineCluster) -> None:
        self.by_node = [DiurnalProfile(name) for name in online.node_names]
        self.next_step = 0
        self.spread = LoadSpread()


def _fold_hours(
    online: OnlineCluster, profiles: _Profiles, s_abs: int, eta: GateEfficiency, window_s: float
) -> _Profiles:
    """Fold every whole clock hour that ended by step ``s_abs`` into the nodes' profiles
    (history included): what an agent's hourly summaries would have accumulated. Before an
    hour is folded, each of its SLA windows (``window_s``) is compared with what the
    profile forecast for that hour: the spread the worst-hours forecast covers."""
    per_hour = max(1, round(3600 / online.step_s))
    # Hours are clock hours of simulated time (EPOCH is midnight UTC), so a step's hour is
    # (step - t0) // per_hour, and a boundary is where that changes.
    first = profiles.next_step
    start = first
    while True:
        hour_index = math.floor((start - online.t0_step) / per_hour)
        end = online.t0_step + (hour_index + 1) * per_hour
        if end > s_abs:
            break
        hour = hour_index % HOURS
        weekend = is_weekend(EPOCH + timedelta(hours=hour_index))
        win = max(1, round(window_s / online.step_s))
        for n in range(len(online.node_names)):
            expected = hour_busy(profiles.by_node[n], hour, weekend)
            if expected is not None:
                for w0 in range(start, end - win + 1, win):
                    observed = online.busy[online.rows(n), w0 : w0 + win].mean(axis=1)
                    profiles.spread.add(online.node_names[n], busy_ratios(expected, observed))
            summary = node_summary(online, n, start, end, eta)
            profiles.by_node[n] = profiles.by_node[n].fold(hour, summary, weekend)
        start = end
    profiles.next_step = start
    return profiles


@dataclass
class Forecasts:
    """Each node's forecast at one refresh: the mean over ``forecast_horizon_h`` and, for
    admission, what each horizon is judged by (cached per horizon until the next refresh)."""

    mode: str
    at: datetime
    profiles: list[DiurnalProfile]
    recent: list[NodeSummary]
    rule: AdmissionRisk
    spread: LoadSpread
    means: dict[str, NodeSummary]
    cache: dict[float, dict[str, NodeSummary]] = field(default_factory=dict)

    def admit(self, horizon_s: float) -> dict[str, NodeSummary]:
        """Per node, the summary admission judges a run of ``horizon_s`` by: under
        ``worst-hours`` the operator's (``AdmissionRisk.node_summary``: each GPU's busiest
        hour of it with the load spread at the risk target), else the mean."""
        if self.mode != "worst-hours" or not self.means:
            return self.means
        if horizon_s not in self.cache:
            self.cache[horizon_s] = {
                name: self.rule.node_summary(
                    self.recent[n], self.profiles[n], self.at, self.spread, horizon_s, mean
                )
                for n, (name, mean) in enumerate(self.means.items())
            }
        return self.cache[horizon_s]


@dataclass
class Foresight(Forecasts):
    """The ``oracle`` policy's forecasts: what admission is judged by comes from the run's
    own future load, each GPU at its worst hour of the horizon (:func:`worst_hour_ahead`),
    with no load spread. Not a policy anyone can run: a bound on what a better forecast
    of the hours ahead could buy (``python -m bench sla``). Its means (the prediction the
    error is measured on) stay the time-of-day forecast's."""

    online: OnlineCluster = field(kw_only=True)
    step: int = field(kw_only=True)
    """The first step of the horizon (the forecast's refresh)."""
    eta: GateEfficiency = field(kw_only=True)

    def admit(self, horizon_s: float) -> dict[str, NodeSummary]:
        if not self.means:
            return self.means
        if horizon_s not in self.cache:
            self.cache[horizon_s] = {
                name: worst_hour_ahead(self.online, n, self.step, horizon_s, self.eta)
                for n, name in enumerate(self.means)
            }
        return self.cache[horizon_s]


def worst_hour_ahead(
    online: OnlineCluster, node: int, start: int, horizon_s: float, eta: GateEfficiency
) -> NodeSummary:
    """The node's summary over [start, start + horizon) of the run's own load, each GPU's
    busy and offline-enabled shares taken from its worst hour in it (the lowest enabled
    share of the hour-long windows starting every 15 min), the pair overlap of the whole
    horizon: what :func:`gleaner.perfmodel.diurnal.worst_hours` bounds, known exactly."""
    end = min(online.busy.shape[1], start + max(1, round(horizon_s / online.step_s)))
    whole = node_summary(online, node, start, end, eta)
    busy = online.busy[online.rows(node), start:end]
    enabled = eta.enabled(busy)
    hour = max(1, round(3600 / online.step_s))
    if busy.shape[1] <= hour:
        worst_busy, worst_enabled = busy.mean(axis=1), enabled.mean(axis=1)
    else:
        stride = max(1, hour // 4)
        starts = np.arange(0, busy.shape[1] - hour + 1, stride)
        csum_b = np.concatenate([np.zeros((busy.shape[0], 1)), busy.cumsum(axis=1)], axis=1)
        csum_e = np.concatenate([np.zeros((busy.shape[0], 1)), enabled.cumsum(axis=1)], axis=1)
        hour_busy = (csum_b[:, starts + hour] - csum_b[:, starts]) / hour
        hour_enabled = (csum_e[:, starts + hour] - csum_e[:, starts]) / hour
        worst = hour_enabled.argmin(axis=1)
        rows = np.arange(busy.shape[0])
        worst_busy, worst_enabled = hour_busy[rows, worst], hour_enabled[rows, worst]
    return with_gpu_shares(whole, worst_busy, worst_enabled)


@dataclass(frozen=True)
class ForecastBase:
    """What every policy's forecast at one refresh starts from (no policy changes it)."""

    at: datetime
    profiles: list[DiurnalProfile]
    recent: list[NodeSummary]
    means: dict[str, NodeSummary]
    spread: LoadSpread
    """The load spread learned by then (a copy: learning goes on)."""

    def forecasts(self, mode: str, rule: AdmissionRisk) -> Forecasts:
        """The forecasts of a policy admitting under ``mode`` by ``rule`` (its risk target
        sets the load spread; None: no spread)."""
        return Forecasts(mode, self.at, self.profiles, self.recent, rule, self.spread, self.means)


def _forecast_base(
    cfg: ClusterScenario,
    online: OnlineCluster,
    profiles: _Profiles,
    s_abs: int,
    now: float,
    eta: GateEfficiency,
) -> ForecastBase:
    """Per node, the time-of-day forecast for the next ``forecast_horizon_h`` hours blended
    with the last ``recent_h`` hours (``gleaner.perfmodel.diurnal.forecast``), and the past
    windows' busy ratios whose spread ``worst-hours`` admission scales each GPU's load by."""
    recent_steps = max(1, round(cfg.recent_h * 3600 / online.step_s))
    start = max(0, s_abs - recent_steps)
    at = EPOCH + timedelta(seconds=now)
    if s_abs <= start:
        return ForecastBase(at, [], [], {}, LoadSpread())
    horizon = cfg.forecast_horizon_h * 3600
    recent = [node_summary(online, n, start, s_abs, eta) for n in range(len(online.node_names))]
    means = {
        name: forecast(profiles.by_node[n], recent[n], at, horizon)
        for n, name in enumerate(online.node_names)
    }
    return ForecastBase(at, list(profiles.by_node), recent, means, copy.deepcopy(profiles.spread))


def _horizon_bucket(job: SimJob, cfg: ClusterScenario) -> float:
    """The horizon (seconds) a job is judged over: its remaining work at its SLA, rounded
    up to 2, 4, 8 or 16 hours, at most ``forecast_horizon_h``."""
    rate = job.profile.standalone_tokens_per_second * max(job.sla, 0.05)
    remaining_h = max(0.0, job.work_tokens - job.done_tokens) / rate / 3600
    cap = cfg.forecast_horizon_h
    for h in HORIZON_BUCKETS_H:
        if remaining_h <= h:
            return min(h, cap) * 3600
    return cap * 3600


HORIZON_BUCKETS_H = (2.0, 4.0, 8.0, 16.0)


def _epoch_s(t: float) -> float:
    return EPOCH.timestamp() + t


def _windows_by_gpus(jobs: list[SimJob]) -> dict[int, dict[str, int]]:
    """Per job size (GPUs), the SLA windows judged and met: the attainment a user with
    jobs of that size sees, which the pooled figure can hide."""
    out: dict[int, dict[str, int]] = {}
    for j in jobs:
        row = out.setdefault(j.gpus, {"windows": 0, "met": 0})
        row["windows"] += j.windows_total
        row["met"] += j.windows_met
    return dict(sorted(out.items()))


def _cluster_metrics(
    cfg: ClusterScenario,
    online: OnlineCluster,
    jobs: list[SimJob],
    policy: str,
    offline_used: FloatArray,
    offline_equiv: FloatArray,
    sla_ok: FloatArray,
    reports: list[EvictionReport],
    preds: list[dict[str, float]],
    evictions: int,
) -> dict[str, Any]:
    t0 = online.t0_step
    n = online.n_gpus
    busy = online.busy[:, t0:]
    online_util = float(busy.mean())
    harvested = float(offline_used.mean())
    windows_total = sum(j.windows_total for j in jobs)
    windows_met = sum(j.windows_met for j in jobs)
    # Every job-window of the run, judged once by the SLA monitor's rule.
    attainment = sla_attainment([True] * windows_met + [False] * (windows_total - windows_met))
    if policy == "first-fit":
        preds = []  # first-fit predicts nothing: no model error to report
    errors = [abs(p["observed"] - p["predicted"]) / max(p["predicted"], 1e-9) for p in preds]
    abs_err = [abs(p["observed"] - p["predicted"]) for p in preds]
    multi = [e for e, p in zip(abs_err, preds, strict=True) if p["gpus"] > 1]
    phases: dict[str, int] = {}
    for j in jobs:
        phases[j.phase.value] = phases.get(j.phase.value, 0) + 1
    step_h = cfg.step_s / 3600.0
    return {
        "policy": policy,
        "gpus": n,
        "online_utilization": online_util,
        "harvested_utilization": harvested,
        "utilization_gain": harvested,
        "utilization_with_offline": online_util + harvested,
        "gpus_saved": float(offline_equiv.mean()),
        "offline_gpu_hours_equivalent": float(offline_equiv.sum() * step_h),
        "sla_attainment": attainment,
        "jobs_meeting_sla": sum(
            1 for j in jobs if j.windows_total and j.windows_met >= 0.9 * j.windows_total
        )
        / max(1, sum(1 for j in jobs if j.windows_total)),
        "sla_windows": windows_total,
        "sla_windows_by_gpus": _windows_by_gpus(jobs),
        "evictions": evictions,
        "jobs": len(jobs),
        "phases": phases,
        "prediction_error": {
            "placements": len(preds),
            "mean_abs": float(np.mean(abs_err)) if abs_err else 0.0,
            "median_abs": float(np.median(abs_err)) if abs_err else 0.0,
            "mean_rel": float(np.mean(errors)) if errors else 0.0,
            "p90_abs": float(np.percentile(abs_err, 90)) if abs_err else 0.0,
            "multi_gpu_mean_abs": float(np.mean(multi)) if multi else 0.0,
        },
        "series": {
            "t_h": (np.arange(busy.shape[1]) * step_h).tolist(),
            "online_busy": busy.mean(axis=0).tolist(),
            "offline_used": offline_used.tolist(),
            "gpus_saved": offline_equiv.tolist(),
            "sla_attainment": [None if math.isnan(x) else float(x) for x in sla_ok],
        },
        "_reports": reports,
    }


def run_cluster(
    cfg: ClusterScenario,
    seed: int,
    gate_efficiency: float,
    progress: Callable[[int], None] | None = None,
    online: OnlineCluster | None = None,
    reference_busy: float = REFERENCE_BUSY,
) -> dict[str, Any]:
    """Simulate every placement policy of ``cfg`` on one online trace and job queue.

    ``online`` replays a given trace (``online_from_trace``) instead of generating one.
    ``gate_efficiency`` is η measured at ``reference_busy`` (the node level's run); with
    ``cfg.gate_by_load`` the ground truth's η follows each GPU's load from there.
    """
    rng = np.random.default_rng(seed + 7919)
    if online is None:
        online = generate_online(cfg, rng)
    gate = GateEfficiency(
        cfg.gate_efficiency or gate_efficiency, reference_busy, by_load=cfg.gate_by_load
    )
    eta = gate.at_reference
    template = make_jobs(cfg, rng)
    results: dict[str, Any] = {}
    final_jobs: dict[str, list[SimJob]] = {}
    shared: dict[int, ForecastBase] = {}
    for policy in cfg.policies:
        jobs = [_fresh(j) for j in template]
        results[policy] = run_policy(cfg, online, jobs, policy, gate, progress, shared)
        final_jobs[policy] = jobs
    return {
        "gate_efficiency": eta,
        "gate": gate,
        "online": online,
        "policies": results,
        "jobs": final_jobs,
    }


def _fresh(j: SimJob) -> SimJob:
    return SimJob(
        key=j.key,
        gpus=j.gpus,
        sla=j.sla,
        profile=j.profile,
        work_tokens=j.work_tokens,
        arrival=j.arrival,
        max_evictions=j.max_evictions,
        sla_window_s=j.sla_window_s,
    )


def total_steps(cfg: ClusterScenario) -> int:
    """Progress units of :func:`run_cluster` (steps × policies with a placer)."""
    steps = round(cfg.duration_h * 3600 / cfg.step_s)
    return steps * sum(1 for p in cfg.policies if p != "no-harvest")


__all__ = [
    "ForecastBase",
    "Forecasts",
    "Foresight",
    "SimJob",
    "admission_rule",
    "current_observed",
    "dashboard_point",
    "make_jobs",
    "run_cluster",
    "run_policy",
    "trailing_idle",
    "worst_hour_ahead",
]
