"""The move rule's two questions (gleaner.scheduler.move.check_move) on a small snapshot."""

from __future__ import annotations

from gleaner.perfmodel import NodeSummary
from gleaner.scheduler import JobRequest, SchedulingSnapshot
from gleaner.scheduler.move import check_move
from gleaner.testing.scheduling import simple_profile, synthetic_node

JOB = JobRequest("ns/job", simple_profile(), 1, 0.5)
HOUR = 3600.0


def _snapshot(quiet_busy: float = 0.1, quiet_taken: bool = False) -> SchedulingSnapshot:
    nodes = {
        "peak": synthetic_node("peak", [0.2]),
        "quiet": synthetic_node("quiet", [quiet_busy]),
    }
    occupied = {"peak": {0: JOB.key}, **({"quiet": {0: "ns/other"}} if quiet_taken else {})}
    return SchedulingSnapshot(jobs=[], nodes=nodes, occupied=occupied)


def _coming(busy: float) -> NodeSummary:
    return synthetic_node("peak", [busy])


def test_a_job_moves_off_a_node_forecast_to_peak_to_one_that_admits_it() -> None:
    check = check_move(_snapshot(), JOB, "peak", _coming(0.95), 0.0, 5 * HOUR)
    assert check.move
    assert check.admitted_here is False
    assert check.destination is not None and check.destination.node == "quiet"
    assert "quiet" in check.reason


def test_its_own_gpu_counts_free_so_a_quiet_node_keeps_it() -> None:
    # The node's only GPU is the job's own: were it counted taken, the node would not admit.
    check = check_move(_snapshot(), JOB, "peak", _coming(0.2), 0.0, 5 * HOUR)
    assert not check.move
    assert check.admitted_here is True
    assert check.destination is None


def test_it_stays_when_no_other_node_admits_it() -> None:
    for snapshot in (_snapshot(quiet_busy=0.95), _snapshot(quiet_taken=True)):
        check = check_move(snapshot, JOB, "peak", _coming(0.95), 0.0, 5 * HOUR)
        assert not check.move
        assert check.admitted_here is False and check.destination is None


def test_it_stays_before_the_minimum_stay() -> None:
    early = check_move(_snapshot(), JOB, "peak", _coming(0.95), 0.0, 1.5 * HOUR)
    assert not early.move and early.admitted_here is None
    later = check_move(_snapshot(), JOB, "peak", _coming(0.95), 0.0, 1.5 * HOUR, None, HOUR)
    assert later.move
