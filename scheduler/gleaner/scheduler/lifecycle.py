"""The OfflineJob lifecycle, one sequence for the operator and the simulator (pure).

Contract. A job's phase is :class:`gleaner.api.Phase` and moves only along
:data:`TRANSITIONS` (:func:`advance` refuses anything else, so a stale writer cannot drag a
Succeeded job back to Running). The steps both drivers take, with time as an argument
(seconds on any clock the caller chooses; nothing here reads one):

- **wait**: a queued job (:data:`QUEUED_PHASES`) may be placed only once its backoff has
  passed (:func:`may_attempt`);
- **place**: Pending/Unschedulable/Evicted → Scheduled → Running (the operator sees the
  Pod start; the simulator starts it at once);
- **watch**: each monitor sample of a Running job goes through :func:`sla_tick`: the sample
  is recorded once (a sample seen twice is ignored); every SLA window it closes
  (:func:`gleaner.scheduler.monitor.sla_windows`; without a longer SLA window, the sample
  itself) is judged met or missed (:func:`gleaner.scheduler.monitor.window_missed`) and the
  monitor decides keep or evict (:func:`gleaner.scheduler.monitor.decide_sla`: grace, k of n);
- **evict**: :func:`evict` plans the requeue (excluded node, exponential backoff) or the
  give-up after ``maxEvictions`` (:func:`gleaner.scheduler.monitor.plan_after_eviction`)
  and moves the phase to Evicted (queued again) or Failed;
- **move**: :func:`should_move` decides a proactive migration of a Running job before a
  forecast peak: its node no longer admits it by the admission rule over the coming
  horizon while another node does (the caller asks the scheduler both questions), and it
  has run on its node for at least a minimum stay (no ping-pong). :func:`move_phases` is
  the phase path of such a move (Evicted, then Scheduled at once); it is not an SLA
  eviction, so it does not count toward ``maxEvictions``;
- **planned exit**: a large job that no node admits over the admission horizon may be
  placed over a shorter one (:class:`PlannedExitRule`); such a placement leaves its node
  for the queue, progress kept, when :func:`should_exit` says so (its node no longer
  admits it over the coming hour and no other node does). It takes the move's path (not
  an SLA eviction);
- **finish**: Running → Succeeded or Failed.

docs/operator.md and docs/simulator.md describe the same sequence from each side.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gleaner.api import EvictionRecord, LeaveType, Phase
from gleaner.scheduler.monitor import (
    EvictionPlan,
    SLADecision,
    SLAHistory,
    SLAMonitorConfig,
    aggregates,
    decide_sla,
    plan_after_eviction,
    sla_windows,
    window_missed,
)

P = Phase
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    P.PENDING: frozenset({P.PENDING, P.INVALID, P.SCHEDULED, P.UNSCHEDULABLE}),
    P.INVALID: frozenset({P.INVALID, P.PENDING}),
    P.UNSCHEDULABLE: frozenset({P.UNSCHEDULABLE, P.INVALID, P.PENDING, P.SCHEDULED}),
    P.SCHEDULED: frozenset({P.SCHEDULED, P.RUNNING, P.SUCCEEDED, P.FAILED, P.EVICTED}),
    P.RUNNING: frozenset({P.RUNNING, P.SUCCEEDED, P.FAILED, P.EVICTED}),
    P.EVICTED: frozenset({P.EVICTED, P.INVALID, P.PENDING, P.SCHEDULED, P.UNSCHEDULABLE, P.FAILED}),
    P.SUCCEEDED: frozenset({P.SUCCEEDED}),
    P.FAILED: frozenset({P.FAILED}),
}
"""Allowed moves: from-phase -> to-phases (self-loops allowed: idempotent reconciles)."""

QUEUED_PHASES = frozenset({P.PENDING, P.UNSCHEDULABLE, P.EVICTED})
"""Phases whose jobs wait for a placement."""
BOUND_PHASES = frozenset({P.SCHEDULED, P.RUNNING})
"""Phases whose jobs hold GPUs (their placement is occupied)."""

SAME_WINDOW_SECONDS = 1e-3
"""Two windows whose ends are closer than this are the same window (seen twice)."""


class TransitionError(ValueError):
    """A phase change the machine does not allow."""


def can_transition(old: Phase, new: Phase) -> bool:
    return new in TRANSITIONS[old]


def advance(old: Phase, new: Phase) -> Phase:
    """``new`` if the machine allows ``old`` -> ``new``; raises :class:`TransitionError`."""
    if not can_transition(old, new):
        raise TransitionError(f"phase {old.value} cannot move to {new.value}")
    return new


def may_attempt(next_attempt_after: float | None, now: float) -> bool:
    """Whether a queued job's backoff has passed at ``now`` (no backoff: at once)."""
    return next_attempt_after is None or next_attempt_after <= now


def has_window(history: SLAHistory, end: float) -> bool:
    """Whether a window ending at ``end`` is already recorded (the same window seen twice)."""
    return any(abs(w.end - end) < SAME_WINDOW_SECONDS for w in history.windows)


@dataclass(frozen=True)
class SLATick:
    """What one SLA tick of a Running job found."""

    history: SLAHistory
    """The placement's history, with the new window when one was recorded."""
    recorded: bool
    """True: the tick brought a window not seen before (it is in ``history``)."""
    met: bool | None
    """The latest SLA window this tick closed met the SLA (None: it closed none)."""
    decision: SLADecision
    """Keep or evict, on the history including the new window."""
    judged: tuple[bool, ...] = ()
    """One verdict per SLA window this tick closed, oldest first (what metrics count)."""


def sla_tick(
    history: SLAHistory,
    window: tuple[float, float] | None,
    now: float,
    config: SLAMonitorConfig,
) -> SLATick:
    """Record the sample ``window`` = (end, throughput fraction) once, judge the SLA windows
    it closes, and decide at ``now``.

    Without a longer SLA window the sample is the window and is judged at once (grace
    samples too, as the operator's ``SLAMet``). A missing sample (no observation this tick)
    or one already recorded still gets a decision: the grace period may have ended, and
    the k-of-n rule looks at the history.
    """
    recorded = False
    judged: tuple[bool, ...] = ()
    if window is not None and not has_window(history, window[0]):
        end, fraction = window
        if aggregates(history, config):
            before = {w.end for w in sla_windows(history, config)}
            history = history.observe(end, fraction)
            closed = [w for w in sla_windows(history, config) if w.end not in before]
            judged = tuple(
                not window_missed(w.throughput_fraction, history.sla, config) for w in closed
            )
        else:
            history = history.observe(end, fraction)
            judged = (not window_missed(fraction, history.sla, config),)
        recorded = True
    met = judged[-1] if judged else None
    return SLATick(history, recorded, met, decide_sla(history, now, config), judged)


def eviction_phase(failed: bool) -> Phase:
    """Where an SLA eviction leaves a job: Failed when it gave up, else Evicted (queued)."""
    return P.FAILED if failed else P.EVICTED


@dataclass(frozen=True)
class Eviction:
    """An SLA eviction: the requeue or give-up plan and the job's next phase."""

    plan: EvictionPlan
    phase: Phase


def evict(
    phase: Phase,
    node: str,
    previous_evictions: int,
    max_evictions: int,
    excluded_nodes: Iterable[str],
    now: float,
    config: SLAMonitorConfig,
    move: bool = False,
) -> Eviction:
    """Evict a bound job from ``node`` at ``now``: requeue with backoff, or give up. With
    ``move`` (a proactive move before a forecast peak, :func:`should_move`): requeued at
    once away from ``node``, not counted toward ``max_evictions``."""
    if move:
        # The node is not excluded: the placement rule keeps the job off it while its
        # forecast does not admit the job, and lets it back once it does again.
        plan = EvictionPlan(
            previous_evictions,
            failed=False,
            next_attempt_after=None,
            excluded_nodes=tuple(excluded_nodes),
            message=f"back in the queue at once, with no backoff: placed again where the "
            f"placement rule admits it, not on {node} while its forecast does not (a move "
            "does not count toward maxEvictions)",
        )
    else:
        plan = plan_after_eviction(
            node, previous_evictions, max_evictions, excluded_nodes, now, config
        )
    return Eviction(plan, advance(phase, eviction_phase(plan.failed)))


DEFAULT_MIN_STAY_SECONDS = 14400.0
"""How long a job runs on its node before a proactive move or a planned exit is considered
(four hours: with the planned exit, a shorter stay moves jobs more often than it saves
GPUs; docs/benchmarks.md, "The throughput SLA")."""
DEFAULT_MOVE_HORIZON_H = 5.0
"""The coming hours a running job's own node is judged over before a move (the admission
rule over that horizon; a new node is chosen by the placement rule). Five hours: with the
7 h admission horizon, a job placed at a quiet hour is moved before the peak it would not
meet (docs/benchmarks.md, "The throughput SLA")."""


def should_move(
    placed_at: float,
    now: float,
    admitted_here: bool,
    admitted_elsewhere: bool,
    min_stay_seconds: float = DEFAULT_MIN_STAY_SECONDS,
) -> bool:
    """Whether to move a Running job off its node before a forecast peak: its node no longer
    admits it (``admitted_here`` false: the admission rule over the coming horizon, the job's
    own GPUs counted free), another node does (``admitted_elsewhere``), and it has stayed
    at least ``min_stay_seconds`` since ``placed_at``."""
    if min_stay_seconds < 0:
        raise ValueError("min_stay_seconds must be >= 0")
    stayed = now - placed_at >= min_stay_seconds
    return stayed and not admitted_here and admitted_elsewhere


DEFAULT_PLANNED_EXIT_MIN_GPUS = 4
"""The smallest job a planned exit applies to: jobs of this many GPUs or more that no node
admits over the admission horizon may be placed over the shorter
:data:`DEFAULT_PLANNED_EXIT_ADMISSION_H` (the few aligned sets of four GPUs sit idle
through the day otherwise; docs/scheduler.md, "Planned exits")."""
DEFAULT_PLANNED_EXIT_ADMISSION_H = 3.0
"""The hours a large job is judged over when no node admits it over the admission
horizon (the same risk rule over a shorter run)."""
DEFAULT_PLANNED_EXIT_HORIZON_H = 1.0
"""The coming hours a planned-exit job's own node is judged over before it leaves: when
its node no longer admits it over these hours and no other node admits it, it goes back
to the queue with its progress kept."""

PLANNED_EXIT_REASON_PREFIX = "planned exit"
"""How the reason of a planned exit begins (:attr:`PlannedExitRule.exit_reason`); records
written before ``evictions[].type`` existed are told apart by it (:func:`leave_type_of`)."""


def leave_type_of(record: EvictionRecord) -> LeaveType:
    """How the job left the placement of ``record``: its ``type``; a record written before
    that field existed reads as an SLA eviction, unless its reason says planned exit."""
    if record.type is LeaveType.SLA_EVICTION and record.reason.startswith(
        PLANNED_EXIT_REASON_PREFIX
    ):
        return LeaveType.PLANNED_EXIT
    return record.type


@dataclass(frozen=True)
class PlannedExitRule:
    """Which jobs get a second, shorter admission pass, and when such a placement ends.

    A job of at least ``min_gpus`` GPUs that no node admits over the admission horizon
    may be placed where it is admitted over ``admission_horizon_h``; that placement
    carries a *planned exit* (:func:`should_exit`). A job placed by the normal rule never
    has one.
    """

    min_gpus: int = DEFAULT_PLANNED_EXIT_MIN_GPUS
    admission_horizon_h: float = DEFAULT_PLANNED_EXIT_ADMISSION_H
    exit_horizon_h: float = DEFAULT_PLANNED_EXIT_HORIZON_H

    def __post_init__(self) -> None:
        if self.min_gpus < 1:
            raise ValueError("min_gpus must be >= 1")
        if not self.admission_horizon_h > 0 or not self.exit_horizon_h > 0:
            raise ValueError("the planned exit's horizons must be > 0 hours")
        if self.exit_horizon_h > self.admission_horizon_h:
            raise ValueError("exit_horizon_h must not exceed admission_horizon_h")

    @property
    def admission_horizon_s(self) -> float:
        return self.admission_horizon_h * 3600.0

    @property
    def exit_horizon_s(self) -> float:
        return self.exit_horizon_h * 3600.0

    @property
    def exit_reason(self) -> str:
        """Why a job leaves by its planned exit, in words (the ``evictions`` record's reason;
        it begins with :data:`PLANNED_EXIT_REASON_PREFIX`)."""
        return (
            f"{PLANNED_EXIT_REASON_PREFIX}: its node no longer admits it over the next "
            f"{self.exit_horizon_h:g} h and no other node admits it; it waits in the "
            "queue until a node does"
        )

    def second_pass(self, gpus: int, admission_horizon_s: float) -> bool:
        """Whether a job of ``gpus`` GPUs that the normal pass (over
        ``admission_horizon_s``) left unplaced is tried again over the shorter horizon: it is
        large enough, and the shorter horizon is shorter."""
        return gpus >= self.min_gpus and self.admission_horizon_s < admission_horizon_s


def should_exit(
    planned_exit: bool,
    admitted_here: bool | None,
    admitted_elsewhere: bool,
    admitted_here_soon: bool | None,
) -> bool:
    """Whether a Running job leaves its node for the queue (progress kept, counted as a
    move): its placement carries a planned exit, the move check found that its node no
    longer admits it over the move horizon (``admitted_here`` false; None: not asked, too
    early) and that no other node does (``admitted_elsewhere`` false; when one does, the
    job moves there instead), and its node no longer admits it over the exit horizon
    either (``admitted_here_soon`` false; None: not asked)."""
    return (
        planned_exit
        and admitted_here is False
        and not admitted_elsewhere
        and admitted_here_soon is False
    )


def move_phases(phase: Phase) -> tuple[Phase, Phase]:
    """The phases a proactive move passes through from a bound ``phase``: Evicted (off the
    old node), then Scheduled (on the new one)."""
    off = advance(phase, P.EVICTED)
    return off, advance(off, P.SCHEDULED)


__all__ = [
    "BOUND_PHASES",
    "DEFAULT_MIN_STAY_SECONDS",
    "DEFAULT_MOVE_HORIZON_H",
    "DEFAULT_PLANNED_EXIT_ADMISSION_H",
    "DEFAULT_PLANNED_EXIT_HORIZON_H",
    "DEFAULT_PLANNED_EXIT_MIN_GPUS",
    "QUEUED_PHASES",
    "SAME_WINDOW_SECONDS",
    "TRANSITIONS",
    "Eviction",
    "PlannedExitRule",
    "SLATick",
    "TransitionError",
    "advance",
    "can_transition",
    "evict",
    "eviction_phase",
    "has_window",
    "may_attempt",
    "move_phases",
    "should_exit",
    "should_move",
    "sla_tick",
]
