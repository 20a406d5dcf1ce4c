"""A pass that starts while an earlier pass's placements are still being written.

The earlier pass hands its placements to ``ctx.binding`` before it returns; the next pass
lists jobs whose status may not show them yet. Its occupancy must count them, or it would
give the same GPUs to the jobs that arrived meanwhile.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gleaner.api import OfflineJob, OfflineJobStatus, Phase, Placement
from gleaner.operator.builders import build_offline_pod
from gleaner.operator.placement import occupied_gpus, plan_placements
from gleaner.operator.traces import summaries_from_nodetraces
from gleaner.testing.fixtures import make_placement, make_queued_job
from gleaner.testing.kube import nodetrace_manifest, offlinejob_manifest

NOW = datetime.now(UTC)


def test_held_placements_count_as_taken_even_before_their_status_shows_them() -> None:
    # "early" was placed on GPUs 0 and 1 by the earlier pass; the lists still show it
    # Pending (its write is in flight), and it has no Pod yet.
    statuses = {("ns", "early"): OfflineJobStatus(phase=Phase.PENDING)}
    held: dict[tuple[str, str], Placement | None] = {
        ("ns", "early"): make_placement("a", [0, 1], decided_at=NOW),
        ("ns", "hopeless"): None,  # an Unschedulable reason being written: holds nothing
    }
    # And "older", bound long ago on GPU 3, has its Pod in the lists.
    older = OfflineJob.model_validate(offlinejob_manifest("older", namespace="ns"))
    pods = [build_offline_pod(older, make_placement("a", [3], decided_at=NOW), 0)]
    occupied = occupied_gpus(pods, statuses, held)
    assert occupied == {"a": {0: "ns/early", 1: "ns/early", 3: "ns/older"}}
    assert occupied_gpus(pods, statuses) == {"a": {3: "ns/older"}}  # what the lists alone say

    nodes = summaries_from_nodetraces([nodetrace_manifest("a", gpus=4, offline_enabled=0.9)])
    late = [make_queued_job("late1", sla=0.5), make_queued_job("late2", sla=0.5)]
    plan = plan_placements(late, nodes, occupied, NOW)
    assert [p.gpu_indices for _, p in plan.placements] == [[2]]
    assert len(plan.unschedulable) == 1


def test_held_and_recorded_placements_agree() -> None:
    # Once written, the same placement is in the status too: counted once, same owner.
    placement = make_placement("a", [1], decided_at=NOW)
    statuses = {
        ("ns", "early"): OfflineJobStatus(
            phase=Phase.SCHEDULED, placement=placement, pods=["early-0"]
        )
    }
    held: dict[tuple[str, str], Placement | None] = {("ns", "early"): placement}
    once = {"a": {1: "ns/early"}}
    assert occupied_gpus([], statuses, held) == occupied_gpus([], statuses) == once
