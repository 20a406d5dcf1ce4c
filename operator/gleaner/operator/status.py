"""The OfflineJob phase machine and the status it writes (pure).

Contract: every status change the operator makes goes through one function here, which
takes the current ``OfflineJobStatus`` and returns the new one; ``status_patch`` turns the
pair into a JSON merge patch (keys that disappear are sent as ``null``). Phases move only
along ``TRANSITIONS`` of the shared lifecycle (``gleaner.scheduler.lifecycle``, which the
simulator drives too; re-exported here), and ``transition`` refuses anything else, so a
stale writer cannot drag a Succeeded job back to Running. Conditions follow Kubernetes
conventions (``set_condition`` keeps the transition time when the status did not change,
so reconciling is idempotent):

- ``Valid``: the spec (and its profile ConfigMap) passed validation;
- ``Scheduled``: a placement was found (False with the scheduler's reasons otherwise);
- ``Ready``: the job's Pod is running;
- ``SLAMet``: the last observed window met the SLA.

Every condition carries ``observedGeneration``: the generation ``valid``/``invalid`` last
judged (the status's own), so a reader can tell a condition about an older spec.

::

    (new) ─▶ Pending ─▶ Scheduled ─▶ Running ─▶ Succeeded
      │        │  ▲         │  │        │  └──▶ Failed
      ▼        ▼  │         │  ▼        ▼
    Invalid  Unschedulable  │ Failed  Evicted ─▶ (Scheduled | Unschedulable | Failed)
                            └──▶ Evicted
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gleaner.api import (
    Condition,
    ConditionStatus,
    ConditionType,
    EvictionRecord,
    LeaveType,
    Observed,
    OfflineJobStatus,
    Phase,
    Placement,
    set_condition,
)
from gleaner.api.offlinejob import MAX_EVICTION_RECORDS
from gleaner.batch.tracking import finished
from gleaner.scheduler.explain import placed_message
from gleaner.scheduler.lifecycle import (
    BOUND_PHASES,
    QUEUED_PHASES,
    TRANSITIONS,
    TransitionError,
    advance,
    can_transition,
    eviction_phase,
)

__all__ = [
    "BOUND_PHASES",
    "QUEUED_PHASES",
    "TRANSITIONS",
    "TransitionError",
    "can_transition",
    "evicted",
    "from_pod_phase",
    "invalid",
    "observed",
    "pod_lost",
    "recorded",
    "scheduled",
    "status_patch",
    "transition",
    "unschedulable",
    "valid",
]

P = Phase


def transition(status: OfflineJobStatus, new: Phase, message: str) -> OfflineJobStatus:
    """A copy of ``status`` in phase ``new``; raises ``TransitionError`` if not allowed."""
    return status.model_copy(update={"phase": advance(status.phase, new), "message": message})


def _cond(
    status: OfflineJobStatus,
    type_: ConditionType,
    ok: bool,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> list[Condition]:
    # A condition is judged on the spec the operator last validated: without an explicit
    # generation (Valid's), it carries the status's observedGeneration, so that Scheduled,
    # Ready and SLAMet say which spec they describe too.
    if generation is None:
        generation = status.observed_generation
    return set_condition(
        list(status.conditions),
        Condition(
            type=type_.value,
            status=ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
            reason=reason,
            message=message,
            last_transition_time=now,
            observed_generation=generation,
        ),
    )


def invalid(
    status: OfflineJobStatus, message: str, now: datetime, generation: int | None
) -> OfflineJobStatus:
    """The spec is invalid: phase Invalid, ``Valid=False`` naming the field."""
    new = transition(status, P.INVALID, message)
    return new.model_copy(
        update={
            "observed_generation": generation,
            "conditions": _cond(
                new, ConditionType.VALID, False, "InvalidSpec", message, now, generation
            ),
        }
    )


def valid(status: OfflineJobStatus, now: datetime, generation: int | None) -> OfflineJobStatus:
    """The spec is valid; a new or previously invalid job becomes Pending (queued)."""
    new = status
    if status.phase in (P.INVALID, P.PENDING):
        new = transition(status, P.PENDING, "waiting for a placement")
    return new.model_copy(
        update={
            "observed_generation": generation,
            "conditions": _cond(
                new, ConditionType.VALID, True, "SpecValid", "spec is valid", now, generation
            ),
        }
    )


def scheduled(
    status: OfflineJobStatus, placement: Placement, pod: str, now: datetime, detail: str = ""
) -> OfflineJobStatus:
    """A placement was chosen and the job's Pod (name ``pod``) is being bound; ``detail``
    (the scheduler's short why: factors, bias, next best node) extends the Scheduled
    condition's message."""
    message = placed_message(placement.node, placement.gpu_indices, placement.throughput_fraction)
    new = transition(status, P.SCHEDULED, message)
    why = f"{message} ({detail})" if detail else message
    pods = [p for p in new.pods if p != pod] + [pod]
    return new.model_copy(
        update={
            "placement": placement,
            "pods": pods,
            "next_attempt_after": None,
            "observed": None,
            "conditions": _cond(new, ConditionType.SCHEDULED, True, "Placed", why, now),
        }
    )


def unschedulable(
    status: OfflineJobStatus,
    reasons: Sequence[str],
    now: datetime,
    next_attempt_after: datetime | None,
) -> OfflineJobStatus:
    """No node can meet the SLA now: phase Unschedulable with the scheduler's reasons."""
    message = "; ".join(reasons) if reasons else "no feasible placement"
    new = transition(status, P.UNSCHEDULABLE, message)
    return new.model_copy(
        update={
            "placement": None,
            "next_attempt_after": next_attempt_after,
            "conditions": _cond(new, ConditionType.SCHEDULED, False, "Unschedulable", message, now),
        }
    )


def from_pod_phase(
    status: OfflineJobStatus, pod_name: str, pod_phase: str, now: datetime, detail: str = ""
) -> OfflineJobStatus | None:
    """The job's status after its current Pod reports ``pod_phase``; None: nothing changes.

    Only the Pod of the current placement counts (an old attempt's Pod never moves the job).
    A Succeeded Pod also completes a batch job's count (``gleaner.batch.tracking.finished``:
    its last requests were answered after the runner's last progress tick).
    """
    if status.phase not in BOUND_PHASES or not status.pods or status.pods[-1] != pod_name:
        return None
    match pod_phase:
        case "Running":
            if status.phase is P.RUNNING:
                return None
            new = transition(status, P.RUNNING, f"pod {pod_name} is running")
            conds = _cond(new, ConditionType.READY, True, "PodRunning", new.message, now)
        case "Succeeded":
            new = finished(transition(status, P.SUCCEEDED, f"pod {pod_name} succeeded"))
            conds = _cond(new, ConditionType.READY, False, "PodSucceeded", new.message, now)
        case "Failed":
            message = f"pod {pod_name} failed" + (f": {detail}" if detail else "")
            new = transition(status, P.FAILED, message)
            conds = _cond(new, ConditionType.READY, False, "PodFailed", message, now)
        case _:
            return None
    return new.model_copy(update={"conditions": conds})


def recorded(
    status: OfflineJobStatus,
    placement: Placement,
    pod: str,
    attempt: int,
    pod_phase: str,
    now: datetime,
    detail: str = "",
    pod_detail: str = "",
) -> OfflineJobStatus | None:
    """A queued job's placement, recorded once its Pod ``pod`` (made for ``attempt``)
    exists: ``scheduled``, and in the same status the Pod's phase when it already runs or
    ended (``from_pod_phase``, with ``pod_detail`` for a failure). None when the job is not
    queued any more (recorded already, or moved on) or the Pod is not its current
    attempt's."""
    if status.phase not in QUEUED_PHASES or status.attempt != attempt:
        return None
    new = scheduled(status, placement, pod, now, detail)
    return from_pod_phase(new, pod, pod_phase, now, pod_detail) or new


def pod_lost(status: OfflineJobStatus, pod_name: str, now: datetime) -> OfflineJobStatus | None:
    """The current Pod vanished while the job was bound (deleted by someone): requeue."""
    if status.phase not in BOUND_PHASES or not status.pods or status.pods[-1] != pod_name:
        return None
    message = f"pod {pod_name} was deleted; waiting for a new placement"
    new = transition(status, P.EVICTED, message)
    return new.model_copy(
        update={
            "placement": None,
            "conditions": _cond(new, ConditionType.READY, False, "PodDeleted", message, now),
        }
    )


def observed(
    status: OfflineJobStatus, obs: Observed, sla: float, met: bool | None, now: datetime
) -> OfflineJobStatus:
    """Record one observed window and the ``SLAMet`` condition (``met`` None: no SLA window
    closed with this sample, so the condition keeps the verdict of the last one)."""
    if met is None:
        return status.model_copy(update={"observed": obs})
    message = f"observed {obs.throughput_fraction:.2f} of standalone throughput (SLA {sla:.2f})"
    return status.model_copy(
        update={
            "observed": obs,
            "conditions": _cond(
                status,
                ConditionType.SLA_MET,
                met,
                "SLAMet" if met else "SLAMissed",
                message,
                now,
            ),
        }
    )


MOVED_REASON = "MovedBeforePeak"
"""The reason (condition, Event) of a move off a node before a forecast peak."""
PLANNED_EXIT_REASON = "PlannedExit"
"""The reason (condition, Event) of a planned exit: a job placed for the hours before a
forecast peak leaves its node for the queue (no other node admits it)."""


def move_reason(planned_exit: bool) -> str:
    """The ``Ready`` condition's and the Event's reason of a move (``planned_exit``: the job
    left by its planned exit, with no destination)."""
    return PLANNED_EXIT_REASON if planned_exit else MOVED_REASON


def leave_type(moved: bool, planned_exit: bool) -> LeaveType:
    """The ``type`` of the record a job's leaving writes: an SLA eviction, a move before a
    forecast peak, or (``planned_exit`` too) a planned exit."""
    if not moved:
        return LeaveType.SLA_EVICTION
    return LeaveType.PLANNED_EXIT if planned_exit else LeaveType.MOVE


def evicted(
    status: OfflineJobStatus,
    record: EvictionRecord,
    *,
    eviction_count: int,
    excluded_nodes: Sequence[str],
    failed: bool,
    next_attempt_after: datetime | None,
    message: str,
    now: datetime,
    moved: bool = False,
    planned_exit: bool = False,
) -> OfflineJobStatus:
    """An SLA eviction: recorded (bounded list), then Evicted (requeued) or Failed. With
    ``moved``, a move before a forecast peak: Ready false with reason ``MovedBeforePeak``
    (``PlannedExit`` with ``planned_exit``: the job left by its planned exit), ``SLAMet``
    left as it was (no window missed)."""
    new = transition(status, eviction_phase(failed), message)
    records = [*new.evictions, record][-MAX_EVICTION_RECORDS:]
    ready_reason = move_reason(planned_exit) if moved else "SLAEvicted"
    conds = _cond(new, ConditionType.READY, False, ready_reason, record.reason, now)
    new = new.model_copy(update={"conditions": conds})
    if not moved:
        conds = _cond(new, ConditionType.SLA_MET, False, "SLAViolation", record.reason, now)
    return new.model_copy(
        update={
            "evictions": records,
            "eviction_count": eviction_count,
            "move_count": new.move_count + 1 if moved else new.move_count,
            "excluded_nodes": list(excluded_nodes),
            "next_attempt_after": next_attempt_after,
            "placement": None,
            "conditions": conds,
        }
    )


def status_patch(old: OfflineJobStatus, new: OfflineJobStatus) -> dict[str, Any]:
    """JSON merge patch ``{"status": ...}`` from ``old`` to ``new`` (removed keys -> null)."""
    old_json = old.to_k8s()
    new_json: dict[str, Any] = new.to_k8s()
    body: dict[str, Any] = dict(new_json)
    for key in old_json:
        if key not in new_json:
            body[key] = None
    return {"status": body}
