"""The phase machine and the status it writes (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gleaner.api import (
    ConditionType,
    EvictionRecord,
    LeaveType,
    Observed,
    OfflineJobStatus,
    Phase,
    find_condition,
)
from gleaner.api.offlinejob import MAX_EVICTION_RECORDS
from gleaner.operator import status as st
from gleaner.testing.fixtures import make_placement

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PLACEMENT = make_placement("n1", [0], uuids=["GPU-0"], decided_at=NOW)


def _cond(status: OfflineJobStatus, type_: ConditionType) -> tuple[str, str, str]:
    cond = find_condition(status.conditions, type_.value)
    assert cond is not None
    return cond.status.value, cond.reason, cond.message


def test_every_phase_has_transitions_and_terminal_phases_are_sinks() -> None:
    assert set(st.TRANSITIONS) == set(Phase)
    for phase in (Phase.SUCCEEDED, Phase.FAILED):
        assert st.TRANSITIONS[phase] == {phase}
    assert not st.can_transition(Phase.SUCCEEDED, Phase.RUNNING)
    assert st.can_transition(Phase.EVICTED, Phase.SCHEDULED)


def test_transition_refuses_illegal_moves() -> None:
    with pytest.raises(st.TransitionError, match="Succeeded cannot move to Running"):
        st.transition(OfflineJobStatus(phase=Phase.SUCCEEDED), Phase.RUNNING, "x")


def test_invalid_then_valid() -> None:
    bad = st.invalid(OfflineJobStatus(), "spec.gpus: too many", NOW, 1)
    assert bad.phase is Phase.INVALID
    assert _cond(bad, ConditionType.VALID) == ("False", "InvalidSpec", "spec.gpus: too many")
    good = st.valid(bad, NOW + timedelta(seconds=5), 2)
    assert good.phase is Phase.PENDING
    assert good.observed_generation == 2
    assert _cond(good, ConditionType.VALID)[0] == "True"


def test_valid_is_idempotent_and_keeps_transition_time() -> None:
    first = st.valid(OfflineJobStatus(), NOW, 1)
    second = st.valid(first, NOW + timedelta(minutes=5), 1)
    assert second == first


def test_scheduled_running_succeeded() -> None:
    s = st.valid(OfflineJobStatus(), NOW, 1)
    s = st.scheduled(s, PLACEMENT, "job-0", NOW)
    assert s.phase is Phase.SCHEDULED and s.pods == ["job-0"] and s.placement == PLACEMENT
    assert _cond(s, ConditionType.SCHEDULED)[:2] == ("True", "Placed")
    assert st.from_pod_phase(s, "other-0", "Running", NOW) is None  # not the current Pod
    assert st.from_pod_phase(s, "job-0", "Pending", NOW) is None
    s = st.from_pod_phase(s, "job-0", "Running", NOW) or pytest.fail("no change")
    assert s.phase is Phase.RUNNING
    assert st.from_pod_phase(s, "job-0", "Running", NOW) is None  # idempotent
    done = st.from_pod_phase(s, "job-0", "Succeeded", NOW) or pytest.fail("no change")
    assert done.phase is Phase.SUCCEEDED
    assert st.from_pod_phase(done, "job-0", "Failed", NOW) is None


def test_failed_pod_message_carries_the_detail() -> None:
    s = st.scheduled(st.valid(OfflineJobStatus(), NOW, 1), PLACEMENT, "job-0", NOW)
    failed = st.from_pod_phase(s, "job-0", "Failed", NOW, "container worker OOMKilled")
    assert failed is not None and failed.phase is Phase.FAILED
    assert "OOMKilled" in failed.message


def test_unschedulable_keeps_reasons_and_backoff() -> None:
    later = NOW + timedelta(seconds=30)
    s = st.unschedulable(OfflineJobStatus(), ["0/3 nodes are available: 3 slow."], NOW, later)
    assert s.phase is Phase.UNSCHEDULABLE and s.next_attempt_after == later
    assert _cond(s, ConditionType.SCHEDULED) == (
        "False",
        "Unschedulable",
        "0/3 nodes are available: 3 slow.",
    )


def test_pod_lost_requeues_a_running_job() -> None:
    s = st.scheduled(st.valid(OfflineJobStatus(), NOW, 1), PLACEMENT, "job-0", NOW)
    lost = st.pod_lost(s, "job-0", NOW)
    assert lost is not None and lost.phase is Phase.EVICTED and lost.placement is None
    assert st.pod_lost(lost, "job-0", NOW) is None


def _record(i: int) -> EvictionRecord:
    return EvictionRecord(
        time=NOW,
        node=f"n{i}",
        reason="slow",
        sla=0.5,
        predicted_throughput_fraction=0.9,
        observed_throughput_fraction=0.1,
    )


def test_evicted_bounds_the_records_and_fails_when_told() -> None:
    s = st.scheduled(st.valid(OfflineJobStatus(), NOW, 1), PLACEMENT, "job-0", NOW)
    s = s.model_copy(update={"evictions": [_record(i) for i in range(MAX_EVICTION_RECORDS)]})
    e = st.evicted(
        s,
        _record(99),
        eviction_count=21,
        excluded_nodes=["n1"],
        failed=False,
        next_attempt_after=NOW,
        message="requeued",
        now=NOW,
    )
    assert e.phase is Phase.EVICTED and len(e.evictions) == MAX_EVICTION_RECORDS
    assert e.evictions[-1].node == "n99" and e.evictions[0].node == "n1"
    assert e.eviction_count == 21 and e.excluded_nodes == ["n1"] and e.placement is None
    assert _cond(e, ConditionType.SLA_MET)[:2] == ("False", "SLAViolation")
    f = st.evicted(
        s,
        _record(1),
        eviction_count=3,
        excluded_nodes=["n1"],
        failed=True,
        next_attempt_after=None,
        message="gave up",
        now=NOW,
    )
    assert f.phase is Phase.FAILED


@pytest.mark.parametrize(
    ("planned_exit", "reason"), [(False, "MovedBeforePeak"), (True, "PlannedExit")]
)
def test_a_move_and_a_planned_exit_have_their_own_ready_reason(
    planned_exit: bool, reason: str
) -> None:
    s = st.scheduled(st.valid(OfflineJobStatus(), NOW, 1), PLACEMENT, "job-0", NOW)
    s = st.observed(s, Observed(throughput_fraction=0.9, window_seconds=60), 0.5, True, NOW)
    m = st.evicted(
        s,
        _record(1),
        eviction_count=0,
        excluded_nodes=[],
        failed=False,
        next_attempt_after=None,
        message="placed again at once",
        now=NOW,
        moved=True,
        planned_exit=planned_exit,
    )
    assert st.move_reason(planned_exit) == reason
    assert _cond(m, ConditionType.READY)[:2] == ("False", reason)
    assert _cond(m, ConditionType.SLA_MET)[:2] == ("True", "SLAMet")  # no window missed
    assert m.move_count == 1 and m.eviction_count == 0 and m.phase is Phase.EVICTED


def test_each_way_of_leaving_writes_its_own_record_type() -> None:
    assert st.leave_type(moved=False, planned_exit=False) is LeaveType.SLA_EVICTION
    assert st.leave_type(moved=True, planned_exit=False) is LeaveType.MOVE
    assert st.leave_type(moved=True, planned_exit=True) is LeaveType.PLANNED_EXIT
    # The type survives the round trip through the API server's JSON.
    record = _record(1).model_copy(update={"type": LeaveType.MOVE})
    status = OfflineJobStatus(evictions=[record]).to_k8s()
    assert status["evictions"][0]["type"] == "Move"
    assert OfflineJobStatus.model_validate(status).evictions[0].type is LeaveType.MOVE


def test_observed_sets_slamet() -> None:
    obs = Observed(throughput_fraction=0.3, window_seconds=60)
    s = st.observed(OfflineJobStatus(phase=Phase.RUNNING), obs, 0.5, False, NOW)
    assert s.observed == obs
    assert _cond(s, ConditionType.SLA_MET)[:2] == ("False", "SLAMissed")


def test_status_patch_nulls_removed_keys() -> None:
    s = st.scheduled(st.valid(OfflineJobStatus(), NOW, 1), PLACEMENT, "job-0", NOW)
    lost = st.pod_lost(s, "job-0", NOW)
    assert lost is not None
    patch = st.status_patch(s, lost)
    assert patch["status"]["placement"] is None
    assert patch["status"]["phase"] == "Evicted"


def test_every_condition_carries_the_observed_generation() -> None:
    s = st.valid(OfflineJobStatus(), NOW, 3)
    s = st.scheduled(s, PLACEMENT, "job-0", NOW)
    s = st.from_pod_phase(s, "job-0", "Running", NOW) or pytest.fail("no change")
    obs = Observed(throughput_fraction=0.8, window_seconds=60, updated_at=NOW)
    s = st.observed(s, obs, 0.5, True, NOW)
    generations = {c.type: c.observed_generation for c in s.conditions}
    assert generations == {"Valid": 3, "Scheduled": 3, "Ready": 3, "SLAMet": 3}
    # A new spec revalidated: the next conditions describe generation 4.
    s = st.valid(s, NOW, 4)
    s = st.observed(s, obs, 0.5, False, NOW)
    sla = find_condition(s.conditions, "SLAMet")
    assert sla is not None and sla.observed_generation == 4
    dumped = s.model_dump(by_alias=True, exclude_none=True)["conditions"]
    assert dumped[1]["type"] == "Scheduled" and dumped[1]["observedGeneration"] == 3
