"""The scheduling loop's own clock: when queued jobs come due without a kick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gleaner.api import Condition, ConditionStatus, ConditionType, OfflineJobStatus, Phase
from gleaner.operator.handlers.scheduling import _next_due, _wait_seconds

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _status(phase: Phase, after: timedelta | None, valid: bool = True) -> OfflineJobStatus:
    cond = Condition(
        type=ConditionType.VALID.value,
        status=ConditionStatus.TRUE if valid else ConditionStatus.FALSE,
        reason="SpecValid" if valid else "InvalidSpec",
        message="",
        last_transition_time=NOW,
    )
    return OfflineJobStatus(
        phase=phase,
        conditions=[cond],
        next_attempt_after=None if after is None else NOW + after,
    )


def test_next_due_is_the_earliest_future_backoff_of_a_valid_queued_job() -> None:
    statuses = {
        ("ns", "later"): _status(Phase.UNSCHEDULABLE, timedelta(seconds=30)),
        ("ns", "soon"): _status(Phase.EVICTED, timedelta(seconds=5)),
        ("ns", "due"): _status(Phase.UNSCHEDULABLE, timedelta(seconds=-1)),  # placed this pass
        ("ns", "bound"): _status(Phase.RUNNING, timedelta(seconds=1)),
        ("ns", "invalid"): _status(Phase.UNSCHEDULABLE, timedelta(seconds=2), valid=False),
        ("ns", "fresh"): _status(Phase.PENDING, None),
    }
    assert _next_due(statuses, NOW) == NOW + timedelta(seconds=5)
    del statuses[("ns", "soon")], statuses[("ns", "later")]
    assert _next_due(statuses, NOW) is None


def test_wait_is_bounded_by_the_heartbeat_and_never_negative() -> None:
    assert _wait_seconds(None, NOW, 5.0) == 5.0
    assert _wait_seconds(NOW + timedelta(seconds=2), NOW, 5.0) == 2.0
    assert _wait_seconds(NOW + timedelta(minutes=2), NOW, 5.0) == 5.0
    assert _wait_seconds(NOW - timedelta(seconds=3), NOW, 5.0) == 0.0
