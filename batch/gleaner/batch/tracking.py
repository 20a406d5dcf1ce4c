"""A batch job's progress and deadline, as the operator writes them into status (pure).

Contract (docs/batch.md, "Progress and deadlines in the cluster"). :func:`track` takes what
the runner reports (``GET /progress``: the counts of its checkpoint) and the job as it
stands, and returns the new ``status``:

- ``status.batch``: requests done/total (``summary`` for the ``Requests`` printer column),
  refused, tokens, and the projected finish at the job's observed throughput (the predicted
  one before the SLA monitor has observed any);
- with ``spec.batch.deadline``: ``deadlineSLA`` from :func:`gleaner.batch.deadline.deadline_sla`
  (floor: ``spec.throughputSLA``; never lowered while the job lives, so it rises as the
  deadline nears), ``requiredFraction``, and the ``DeadlineMet`` condition: True while the
  remaining tokens fit in the remaining standalone capacity, False (``DeadlineUnreachable``)
  once they do not.

:func:`finished` completes the count when the Pod succeeds (the runner exits 0 only when
every request has an answer).

No I/O, no clock: ``now`` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gleaner.api import (
    BatchProgress,
    Condition,
    ConditionStatus,
    ConditionType,
    OfflineJob,
    OfflineJobStatus,
    set_condition,
)
from gleaner.batch.deadline import deadline_sla, estimate_remaining_tokens, raise_only

REASON_REACHABLE = "DeadlineReachable"
REASON_UNREACHABLE = "DeadlineUnreachable"


@dataclass(frozen=True)
class RunnerReport:
    """The runner's counts (its checkpoint's ``progress``)."""

    total: int
    succeeded: int
    failed: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def from_json(cls, doc: object) -> RunnerReport:
        """From ``GET /progress``; ValueError when it is not the runner's shape."""
        if not isinstance(doc, dict):
            raise ValueError("progress must be a JSON object")
        try:
            values = {k: int(doc[k]) for k in ("total", "succeeded", "failed")}
            tokens = {k: int(doc.get(k, 0)) for k in ("prompt_tokens", "completion_tokens")}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"progress lacks a count: {e}") from None
        if min(*values.values(), *tokens.values()) < 0:
            raise ValueError("progress counts must not be negative")
        return cls(**values, **tokens)


def _throughput(status: OfflineJobStatus) -> float | None:
    """Tokens/s the job runs at now: observed, else predicted, else unknown."""
    if status.observed is not None and status.observed.tokens_per_second:
        return status.observed.tokens_per_second
    if status.placement is not None and status.placement.predicted_tokens_per_second:
        return status.placement.predicted_tokens_per_second
    return None


def track(
    job: OfflineJob,
    report: RunnerReport,
    standalone_tokens_per_second: float,
    now: datetime,
) -> OfflineJobStatus:
    """The job's status with this progress report applied (see the module docstring)."""
    batch = job.spec.batch
    status = job.status
    if batch is None:
        return status
    previous = status.batch or BatchProgress()
    remaining = estimate_remaining_tokens(
        total_requests=report.total,
        done_requests=report.done,
        done_tokens=report.tokens,
        prior_tokens_per_request=batch.expected_tokens_per_request,
    )
    rate = _throughput(status)
    projected = now + timedelta(seconds=remaining / rate) if rate and report.total > 0 else None
    progress = BatchProgress(
        requests_total=report.total,
        requests_done=report.done,
        requests_failed=report.failed,
        tokens=report.tokens,
        summary=f"{report.done}/{report.total}",
        projected_finish=projected,
        updated_at=now,
        deadline_sla=previous.deadline_sla,
        required_fraction=previous.required_fraction,
    )
    conditions = list(status.conditions)
    if batch.deadline is not None and report.done < report.total:
        verdict = deadline_sla(
            remaining,
            (batch.deadline - now).total_seconds(),
            standalone_tokens_per_second,
            floor=job.spec.throughput_sla,
        )
        progress = progress.model_copy(
            update={
                "deadline_sla": raise_only(previous.deadline_sla, verdict.sla),
                "required_fraction": verdict.required_fraction
                if verdict.required_fraction != float("inf")
                else None,
            }
        )
        conditions = set_condition(
            conditions,
            Condition(
                type=ConditionType.DEADLINE_MET.value,
                status=ConditionStatus.TRUE if verdict.feasible else ConditionStatus.FALSE,
                reason=REASON_REACHABLE if verdict.feasible else REASON_UNREACHABLE,
                message=verdict.message,
                last_transition_time=now,
            ),
        )
    return status.model_copy(update={"batch": progress, "conditions": conditions})


def finished(status: OfflineJobStatus) -> OfflineJobStatus:
    """The status of a batch job whose Pod succeeded: the runner exits 0 only once every
    request has an answer, so done = total even when the last tick saw less."""
    if status.batch is None:
        return status
    total = status.batch.requests_total
    batch = status.batch.model_copy(
        update={"requests_done": total, "summary": f"{total}/{total}", "projected_finish": None}
    )
    return status.model_copy(update={"batch": batch})
