"""Why an OfflineJob is where it is, in words: the explanation behind ``kubectl gleaner why``.

Contract. :func:`explain_job` is pure: an OfflineJob as the API server returns it (a mapping)
in, a list of :class:`Line` out (a label and a sentence), built only from the job's spec and
status (the operator writes everything it decided there: docs/api.md). In order: the job
and its phase with what that phase means; for a job waiting for a placement the
scheduler's reasons (``status.message``) and the next attempt; for an Invalid job the field
that failed; for a placed job where it runs and the model's prediction factor by factor
against the SLA, and, when that placement is a planned exit, what will happen; the last
observed window; the SLA evictions and moves so far, each record with its reason (a planned
exit's labelled ``exited``), and the nodes the job is kept off; then every condition.
:func:`explanation_json` is the same content as a JSON-ready mapping. A status that does not
parse is a ValueError with one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from gleaner.api import LeaveType, OfflineJobStatus, Phase
from gleaner.scheduler.lifecycle import leave_type_of

PHASE_MEANING: Mapping[Phase, str] = {
    Phase.PENDING: "valid and waiting for the next scheduling pass",
    Phase.INVALID: "its spec or its profile failed validation; fix them and it is queued again",
    Phase.UNSCHEDULABLE: "no node can meet its SLA now; it is retried as the nodes' traces change",
    Phase.SCHEDULED: "a placement was chosen and its Pod created on that node",
    Phase.RUNNING: "its Pod runs; the SLA monitor compares its throughput with its SLA",
    Phase.EVICTED: "its Pod was stopped (SLA missed persistently, or the Pod was deleted); "
    "it is placed again after a backoff, away from that node (after a move before a "
    "forecast peak or a planned exit: at once, wherever a node admits it)",
    Phase.SUCCEEDED: "its Pod completed",
    Phase.FAILED: "its Pod failed, or it reached maxEvictions",
}


PLACED = frozenset({Phase.SCHEDULED, Phase.RUNNING})
"""Phases in which ``status.placement`` is where the job is now."""
_LEFT = {
    LeaveType.SLA_EVICTION: "evicted",
    LeaveType.MOVE: "moved",
    LeaveType.PLANNED_EXIT: "exited",
}
"""The line's label for each way a job left a placement."""


def planned_exit_text(node: str) -> str:
    """What a planned exit placement means for the job, in one sentence."""
    return (
        "placed for the quiet hours before a forecast peak: it goes back to the queue, "
        f"progress kept, when {node} no longer admits it over the next hour and no other "
        "node does"
    )


@dataclass(frozen=True)
class Line:
    """One line of the explanation."""

    label: str
    text: str


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%SZ")


def _status(job: Mapping[str, Any]) -> OfflineJobStatus:
    try:
        return OfflineJobStatus.model_validate(job.get("status") or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        raise ValueError(f"status.{where}: {err['msg']}") from exc


def explain_job(job: Mapping[str, Any]) -> list[Line]:
    """The explanation of one OfflineJob (see the module docstring)."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = _status(job)
    sla = spec.get("throughputSLA")
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    lines = [
        Line("job", f"{name} ({spec.get('gpus', 1)} GPU(s), throughputSLA {sla})"),
        Line("phase", f"{status.phase.value}: {PHASE_MEANING[status.phase]}"),
    ]
    if status.message:
        lines.append(Line("message", status.message))
    if status.phase is Phase.INVALID:
        valid = next((c for c in status.conditions if c.type == "Valid"), None)
        if valid is not None and valid.message and valid.message != status.message:
            lines.append(Line("invalid", valid.message))
    if status.next_attempt_after is not None and not status.phase.terminal:
        lines.append(Line("next attempt", f"not before {_time(status.next_attempt_after)}"))
    placement = status.placement
    if placement is not None:
        gpus = ",".join(str(g) for g in placement.gpu_indices)
        lines.append(
            Line("placed on", f"{placement.node} GPU(s) {gpus} at {_time(placement.decided_at)}")
        )
        if placement.planned_exit and status.phase in PLACED:
            lines.append(Line("planned exit", planned_exit_text(placement.node)))
        verdict = ">=" if sla is None or placement.throughput_fraction >= float(sla) else "<"
        lines.append(
            Line(
                "predicted",
                f"{placement.throughput_fraction:.2f} = compute {placement.compute:.2f} x "
                f"memory {placement.memory:.2f} x multi-GPU {placement.multi_gpu:.2f} "
                f"{verdict} SLA {sla}",
            )
        )
    if status.observed is not None:
        obs = status.observed
        below = sla is not None and obs.throughput_fraction < float(sla)
        lines.append(
            Line(
                "observed",
                f"{obs.throughput_fraction:.2f} over the last {obs.window_seconds:g}s window "
                f"({'below' if below else 'meets'} SLA {sla}; updated {_time(obs.updated_at)})",
            )
        )
    if status.eviction_count:
        limit = spec.get("maxEvictions")
        of = f" of maxEvictions {limit}" if limit is not None else ""
        lines.append(Line("evictions", f"{status.eviction_count}{of}"))
    if status.move_count:
        lines.append(
            Line(
                "moves",
                f"{status.move_count} (off a node before a forecast peak, planned exits "
                "included; not SLA evictions)",
            )
        )
    if status.eviction_count or status.move_count:
        for record in status.evictions:
            lines.append(
                Line(
                    _LEFT[leave_type_of(record)],
                    f"{_time(record.time)} from {record.node}: {record.reason} "
                    f"(predicted {record.predicted_throughput_fraction:.2f}, observed "
                    f"{record.observed_throughput_fraction:.2f})",
                )
            )
    if status.excluded_nodes:
        lines.append(Line("kept off", ", ".join(status.excluded_nodes)))
    for condition in status.conditions:
        detail = f": {condition.message}" if condition.message else ""
        lines.append(
            Line(
                "condition",
                f"{condition.type}={condition.status.value} ({condition.reason}){detail}",
            )
        )
    return lines


def explanation_json(job: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`explain_job` as a JSON-ready mapping: ``job``, ``phase`` and ``lines``."""
    meta = job.get("metadata") or {}
    status = _status(job)
    return {
        "job": f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        "phase": status.phase.value,
        "lines": [{"label": line.label, "text": line.text} for line in explain_job(job)],
    }
