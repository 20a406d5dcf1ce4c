"""The planned exit (gleaner.scheduler.lifecycle.PlannedExitRule, should_exit and
gleaner.scheduler.move.check_exit): which jobs get the shorter admission pass, and when a
placement made by it leaves its node for the queue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.perfmodel import NodeSummary
from gleaner.perfmodel.admission import ADMISSION_HORIZON_H
from gleaner.scheduler import JobRequest, SchedulingSnapshot
from gleaner.scheduler.lifecycle import (
    DEFAULT_PLANNED_EXIT_MIN_GPUS,
    PlannedExitRule,
    should_exit,
)
from gleaner.scheduler.move import check_exit, check_move
from gleaner.testing.scheduling import simple_profile, synthetic_node

JOB = JobRequest("ns/job", simple_profile(), 1, 0.5)
HOUR = 3600.0
NORMAL_S = ADMISSION_HORIZON_H * HOUR


def _snapshot(quiet_busy: float) -> SchedulingSnapshot:
    nodes = {"peak": synthetic_node("peak", [0.2]), "quiet": synthetic_node("quiet", [quiet_busy])}
    return SchedulingSnapshot(jobs=[], nodes=nodes, occupied={"peak": {0: JOB.key}})


def _summary(busy: float) -> NodeSummary:
    return synthetic_node("peak", [busy])


def test_only_large_jobs_get_the_shorter_pass() -> None:
    rule = PlannedExitRule()
    assert rule.min_gpus == DEFAULT_PLANNED_EXIT_MIN_GPUS == 4
    assert rule.second_pass(4, NORMAL_S) and rule.second_pass(8, NORMAL_S)
    assert not rule.second_pass(2, NORMAL_S) and not rule.second_pass(1, NORMAL_S)
    # A "shorter" horizon no shorter than the normal one is no second pass.
    assert not rule.second_pass(4, rule.admission_horizon_s)


def test_the_rule_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        PlannedExitRule(min_gpus=0)
    with pytest.raises(ValueError):
        PlannedExitRule(admission_horizon_h=0.0)
    with pytest.raises(ValueError):
        PlannedExitRule(admission_horizon_h=1.0, exit_horizon_h=2.0)


def test_a_planned_exit_job_leaves_when_nothing_admits_it_over_the_next_hour() -> None:
    snapshot = _snapshot(quiet_busy=0.95)  # no other node admits it
    check = check_move(snapshot, JOB, "peak", _summary(0.95), 0.0, 5 * HOUR)
    assert not check.move and check.admitted_here is False and check.destination is None
    assert check_exit(check, snapshot, JOB, "peak", _summary(0.95), True)
    # Its node still admits it over the next hour: it stays.
    assert not check_exit(check, snapshot, JOB, "peak", _summary(0.2), True)
    # Placed by the normal rule: it stays (the SLA monitor watches it as before).
    assert not check_exit(check, snapshot, JOB, "peak", _summary(0.95), False)


def test_a_job_another_node_admits_moves_there_instead_of_leaving() -> None:
    snapshot = _snapshot(quiet_busy=0.1)
    check = check_move(snapshot, JOB, "peak", _summary(0.95), 0.0, 5 * HOUR)
    assert check.move and check.destination is not None
    assert not check_exit(check, snapshot, JOB, "peak", _summary(0.95), True)


def test_a_job_placed_too_recently_does_not_leave() -> None:
    snapshot = _snapshot(quiet_busy=0.95)
    check = check_move(snapshot, JOB, "peak", _summary(0.95), 0.0, 1.0 * HOUR)
    assert check.admitted_here is None
    assert not check_exit(check, snapshot, JOB, "peak", _summary(0.95), True)


opt_bool = st.one_of(st.none(), st.booleans())


@given(opt_bool, st.booleans(), opt_bool)
def test_a_normal_placement_never_exits(
    here: bool | None, elsewhere: bool, soon: bool | None
) -> None:
    assert not should_exit(False, here, elsewhere, soon)


@given(st.booleans(), opt_bool, st.booleans())
def test_a_job_its_node_still_admits_stays(
    planned: bool, here: bool | None, elsewhere: bool
) -> None:
    assert not should_exit(planned, here, elsewhere, True)
    assert not should_exit(planned, True, elsewhere, False)
