"""The cluster section of a scenario: what ``run_cluster`` simulates, as validated models.

Contract. :class:`ClusterScenario` (and its parts: the online service mix
:class:`ServiceKind`, the load shape :class:`LoadConfig`, the offline queue
:class:`JobsConfig`, the SLA monitor :class:`MonitorConfig`) refuses unknown keys and
gives every field a default, so ``cluster: {}`` in a scenario file is valid. Which
placement policies run is ``policies`` (``ALL_POLICIES`` by default). docs/simulator.md
describes the fields and the model behind them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gleaner.api import DEFAULT_SLA_WINDOW
from gleaner.api.units import parse_duration
from gleaner.perfmodel.admission import ADMISSION_HORIZON_H, DEFAULT_RISK_TARGET
from gleaner.scheduler.config import DEFAULT_SLA_MARGIN
from gleaner.scheduler.lifecycle import (
    DEFAULT_MIN_STAY_SECONDS,
    DEFAULT_MOVE_HORIZON_H,
    DEFAULT_PLANNED_EXIT_ADMISSION_H,
    DEFAULT_PLANNED_EXIT_HORIZON_H,
    DEFAULT_PLANNED_EXIT_MIN_GPUS,
    PlannedExitRule,
)
from gleaner.scheduler.monitor import SLAMonitorConfig
from gleaner.simulator.workload import OUTPUT_TOKENS_MEAN, PROMPT_TOKENS_MEAN

PolicyName = Literal[
    "no-harvest",
    "gleaner",
    "first-fit",
    "no-multi-filter",
    "paper",
    "no-diurnal",
    "no-risk",
    "no-worst-hours",
    "no-move",
    "no-planned-exit",
    "oracle",
]
ALL_POLICIES: tuple[PolicyName, ...] = ("no-harvest", "gleaner", "first-fit", "no-multi-filter")
"""The policies a scenario runs by default. ``paper`` (the paper's model: the trailing
window, the mean rule, the 0.95 pair filter), ``no-diurnal`` (the trailing window instead
of the time-of-day forecast), ``no-worst-hours`` (the mean time-of-day forecast over the
horizon instead of each GPU's worst hour of the job's expected run) and ``no-risk`` (no
load spread: the worst hours as forecast) are the ablations ``python -m bench sla`` runs
beside ``gleaner``, and ``no-planned-exit`` (no shorter admission pass for large jobs,
no planned exit). ``oracle`` is ``gleaner`` admitting by the run's own future load (each
GPU at its worst hour of the horizon, no spread): a bound, not a policy one can run."""


class ServiceKind(BaseModel):
    """One kind of online service in the mix."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(ge=1, le=8)
    share: float = Field(gt=0, description="Relative share of GPUs running this kind.")
    alignment: tuple[float, float] = Field(
        default=(1.0, 1.0), description="Range of ρ (1: tensor parallel, busy together)."
    )


class LoadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    peak_requests_per_s: tuple[float, float] = Field(
        default=(0.145, 0.75),
        description="Range of each service's request rate at its daily peak, requests/s per "
        "engine (0.145-0.75: 24-76% busy for llama-3.1-8b-h100 at the default lengths).",
    )
    prompt_tokens: float = Field(
        default=PROMPT_TOKENS_MEAN, gt=0, description="Mean prompt tokens of a request."
    )
    output_tokens: float = Field(
        default=OUTPUT_TOKENS_MEAN, gt=0, description="Mean output tokens of a request."
    )
    prompt_scale: tuple[float, float] = Field(
        default=(1.0, 1.0),
        description="Range of each service's mean prompt length as a multiple of "
        "prompt_tokens (drawn per service: chat and long-context services).",
    )
    max_seqs: int = Field(default=256, ge=1, description="Most requests an engine batches.")
    diurnal_amplitude: float = Field(default=0.7, ge=0, le=1)
    phase_spread_h: float = Field(default=6.0, ge=0, description="Services' peaks spread, h.")
    noise_sigma: float = Field(default=0.15, ge=0)
    noise_corr_steps: float = Field(default=30.0, gt=0, description="AR(1) correlation, steps.")
    gpu_noise_sigma: float = Field(
        default=0.25,
        ge=0,
        description="Per-GPU rate noise when ρ < 1 (each GPU its own engine behind the "
        "service's load balancer).",
    )
    bursts_per_day: float = Field(default=4.0, ge=0)
    burst_factor: tuple[float, float] = (1.5, 3.0)
    burst_minutes: tuple[float, float] = (5.0, 45.0)
    resident_scale: tuple[float, float] = Field(
        default=(1.0, 2.22),
        description="Each service's resident memory (weights, activations, CUDA graphs) as a "
        "multiple of the engine model's (model: 18 GiB for llama-3.1-8b-h100).",
    )


class JobsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_100_gpus: float = Field(default=60.0, gt=0, description="Jobs submitted per 100 GPUs.")
    arrival_window: tuple[float, float] = Field(
        default=(0.0, 0.7), description="Jobs arrive uniformly in this share of the run."
    )
    gpus: dict[int, float] = Field(default_factory=lambda: {1: 0.6, 2: 0.25, 4: 0.15})
    sla: tuple[float, float] = (0.15, 0.55)
    standalone_hours: tuple[float, float] = Field(
        default=(1.0, 6.0), description="Work per job in hours on dedicated GPUs."
    )
    max_evictions: int = Field(default=3, ge=0)
    sla_window_s: float | None = Field(
        default=parse_duration(DEFAULT_SLA_WINDOW),
        gt=0,
        description="Each job's SLA window (spec.slaWindow), seconds; null: one monitor window.",
    )


class MonitorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(default=600.0, gt=0)
    history_windows: int = Field(default=5, ge=1)
    violation_windows: int = Field(default=3, ge=1)
    grace_s: float = Field(default=900.0, ge=0)
    tolerance: float = Field(default=0.02, ge=0)
    backoff_base_s: float = Field(default=300.0, ge=0)
    backoff_max_s: float = Field(default=3600.0, ge=0)

    def sla_monitor(self) -> SLAMonitorConfig:
        """The SLA monitor's rule these settings make (the operator's flags' counterpart)."""
        return SLAMonitorConfig(
            window_seconds=self.window_s,
            history_windows=self.history_windows,
            violation_windows=self.violation_windows,
            grace_seconds=self.grace_s,
            tolerance=self.tolerance,
            backoff_base_seconds=self.backoff_base_s,
            backoff_max_seconds=self.backoff_max_s,
        )


class ClusterScenario(BaseModel):
    """Cluster-level part of a scenario file (see docs/simulator.md)."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(default=32, ge=1)
    gpus_per_node: int = Field(default=8, ge=1, le=16)
    duration_h: float = Field(default=24.0, gt=0)
    step_s: float = Field(default=60.0, gt=0)
    history_h: float = Field(default=24.0, ge=0, description="Trace before the first job.")
    window_h: float = Field(default=6.0, gt=0, description="NodeSummary window (trailing).")
    summary_refresh_s: float = Field(default=3600.0, gt=0)
    forecast: Literal["trailing", "diurnal", "worst-hours"] = Field(
        default="worst-hours",
        description="What the scheduler admits by: the trailing window_h summary, the "
        "time-of-day forecast (gleaner.perfmodel.diurnal) over forecast_horizon_h, or each "
        "GPU's busiest hour of that forecast with its load scaled by the spread of past "
        "windows at risk_target (worst_hours).",
    )
    forecast_horizon_h: float = Field(
        default=ADMISSION_HORIZON_H,
        gt=0,
        description="The hours ahead a placement is judged over; with judge_expected_run, the "
        "longest.",
    )
    judge_expected_run: bool = Field(
        default=False,
        description="worst-hours: judge each job over its expected remaining run at its SLA "
        "(2, 4, 8, 16 h or forecast_horizon_h), not the whole forecast_horizon_h.",
    )
    risk_target: float | None = Field(
        default=DEFAULT_RISK_TARGET,
        gt=0,
        lt=1,
        description="Risk-aware admission: the probability a window must meet the SLA with "
        "(the load spread of the worst-hours forecast); null: the mean rule.",
    )
    move_before_peak: bool = Field(
        default=True,
        description="worst-hours: every move_check_s, move a running job whose node no longer "
        "admits it over the coming move_horizon_h to a node that admits it by the placement "
        "rule.",
    )
    move_horizon_h: float = Field(
        default=DEFAULT_MOVE_HORIZON_H,
        gt=0,
        description="The hours ahead a running job's own node is judged over before a move.",
    )
    move_min_stay_s: float = Field(
        default=DEFAULT_MIN_STAY_SECONDS,
        ge=0,
        description="How long a job runs on its node before a move is considered, seconds.",
    )
    move_check_s: float = Field(
        default=3600.0,
        gt=0,
        description="How often running jobs are checked for a move, seconds (hourly: when "
        "the forecast is refreshed).",
    )
    move_restart_s: float = Field(
        default=300.0, ge=0, description="What a move costs: seconds the job makes nothing."
    )
    planned_exit: bool = Field(
        default=True,
        description="With moves: a job of planned_exit_min_gpus or more that no node admits "
        "over forecast_horizon_h may be placed where it is admitted over "
        "planned_exit_admission_h; such a placement leaves its node for the queue (progress "
        "kept, counted as a move, the move's restart when placed again) when its node no "
        "longer admits it over the next planned_exit_horizon_h and no other node admits it.",
    )
    planned_exit_min_gpus: int = Field(
        default=DEFAULT_PLANNED_EXIT_MIN_GPUS,
        ge=1,
        description="The smallest job the planned exit's shorter admission pass tries.",
    )
    planned_exit_admission_h: float = Field(
        default=DEFAULT_PLANNED_EXIT_ADMISSION_H,
        gt=0,
        description="The hours the shorter admission pass judges a large job over.",
    )
    planned_exit_horizon_h: float = Field(
        default=DEFAULT_PLANNED_EXIT_HORIZON_H,
        gt=0,
        description="The coming hours a planned-exit job's node must still admit it, else it "
        "leaves (when no other node admits it).",
    )
    sla_margin: float = Field(
        default=DEFAULT_SLA_MARGIN,
        ge=0,
        lt=1,
        description="The scheduler's SLAFit margin (SchedulerConfig.sla_margin) for every "
        "policy but paper: a GPU set predicted less than this above the job's SLA is placed "
        "only where no set has the margin; 0: best fit only.",
    )
    recent_h: float = Field(
        default=1.0, gt=0, description="The recent level blended into the diurnal forecast."
    )
    schedule_interval_s: float = Field(default=300.0, gt=0)
    gpu_memory_gib: float = Field(default=80.0, gt=0)
    usable_gib: float = Field(default=76.0, gt=0)
    gate_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="Enabled share of idle time (None: node level's)."
    )
    gate_by_load: bool = Field(
        default=True,
        description="Ground truth: η falls with each GPU's online load as in node-level runs "
        "(false: the same η at every load).",
    )
    model: str = "llama-3.1-8b-h100"
    services: list[ServiceKind] = Field(
        default_factory=lambda: [
            ServiceKind(gpus=1, share=0.45),
            ServiceKind(gpus=2, share=0.15),
            ServiceKind(gpus=4, share=0.15),
            ServiceKind(gpus=2, share=0.10, alignment=(0.2, 0.8)),
            ServiceKind(gpus=4, share=0.15, alignment=(0.2, 0.8)),
        ]
    )
    load: LoadConfig = Field(default_factory=LoadConfig)
    jobs: JobsConfig = Field(default_factory=JobsConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    policies: list[PolicyName] = Field(default_factory=lambda: list(ALL_POLICIES))

    @model_validator(mode="after")
    def _planned_exit_horizons(self) -> ClusterScenario:
        self.planned_exit_rule()  # refuses an exit horizon longer than its admission's
        return self

    def planned_exit_rule(self) -> PlannedExitRule:
        """The planned exit these settings make (used where it is on)."""
        try:
            return PlannedExitRule(
                min_gpus=self.planned_exit_min_gpus,
                admission_horizon_h=self.planned_exit_admission_h,
                exit_horizon_h=self.planned_exit_horizon_h,
            )
        except ValueError as exc:
            raise ValueError(f"planned exit: {exc}") from exc
