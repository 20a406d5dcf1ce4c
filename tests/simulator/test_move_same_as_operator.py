"""The simulator and the operator take the same move decision for the same inputs.

Both ask ``gleaner.scheduler.move.check_move``; what each passes of a job is its own: the
simulator's ``SimJob`` through its scheduler request, the operator's OfflineJob through
``JobRequest.from_offlinejob`` after validation (as its move pass does). For the same job
and the same cluster, they must move it (or keep it) alike, to the same node and GPUs."""

from __future__ import annotations

import pytest

from gleaner.operator.validation import ValidJob, validate_job
from gleaner.perfmodel import JobProfile, NodeSummary
from gleaner.scheduler import JobRequest, SchedulingSnapshot
from gleaner.scheduler.move import MoveCheck, check_move
from gleaner.simulator.cluster import SimJob, _request
from gleaner.testing.kube import offlinejob_manifest
from gleaner.testing.scheduling import synthetic_node

HOUR = 3600.0


def _operator_request(sla: float) -> JobRequest:
    verdict = validate_job(offlinejob_manifest("job", namespace="ns", sla=sla), None)
    assert isinstance(verdict, ValidJob)
    return JobRequest.from_offlinejob(verdict.job, JobProfile.from_api(verdict.profile))


def _simulator_request(operator: JobRequest) -> JobRequest:
    job = SimJob(
        key="ns/job",
        gpus=1,
        sla=operator.sla,
        profile=operator.profile,
        work_tokens=1e6,
        arrival=0.0,
        max_evictions=3,
    )
    return _request(job)


def _cluster(quiet_busy: float) -> SchedulingSnapshot:
    nodes = {
        "here": synthetic_node("here", [0.2, 0.2]),
        "there": synthetic_node("there", [quiet_busy, quiet_busy]),
    }
    return SchedulingSnapshot(jobs=[], nodes=nodes, occupied={"here": {0: "ns/job"}})


def _key(check: MoveCheck) -> tuple[object, ...]:
    where = check.destination
    return (
        check.move,
        check.admitted_here,
        None if where is None else (where.node, tuple(where.gpus)),
        check.reason,
    )


@pytest.mark.parametrize(
    ("coming_busy", "quiet_busy", "placed_h", "moves"),
    [
        (0.95, 0.1, 0.0, True),  # a peak here, a quiet node there: both move it
        (0.2, 0.1, 0.0, False),  # no peak: both keep it
        (0.95, 0.95, 0.0, False),  # a peak everywhere: nowhere to go
        (0.95, 0.1, 2.5, False),  # placed too recently
    ],
)
def test_same_move_decision(
    coming_busy: float, quiet_busy: float, placed_h: float, moves: bool
) -> None:
    operator = _operator_request(0.5)
    simulator = _simulator_request(operator)
    snapshot = _cluster(quiet_busy)
    coming: NodeSummary = synthetic_node("here", [coming_busy, coming_busy])
    checks = [
        check_move(snapshot, request, "here", coming, placed_h * HOUR, 4 * HOUR)
        for request in (operator, simulator)
    ]
    assert _key(checks[0]) == _key(checks[1])
    assert checks[0].move is moves
