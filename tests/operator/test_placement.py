"""The adapter to gleaner.scheduler: queue + NodeTraces + occupancy -> Placements / reasons."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gleaner.api.nodetrace import gpu_uuid
from gleaner.operator.placement import (
    BURST,
    EXPLAINED,
    explained_placements,
    plan_placements,
)
from gleaner.operator.traces import (
    UNKNOWN_UUIDS_REASON,
    summaries_from_nodetraces,
    unbindable_nodes,
    with_inventory,
)
from gleaner.perfmodel import GpuSpec, NodeSummary
from gleaner.scheduler.lifecycle import PlannedExitRule
from gleaner.testing.fixtures import make_queued_job
from gleaner.testing.kube import nodetrace_manifest

NOW = datetime.now(UTC)


def test_places_on_free_gpus_with_uuids_and_prediction() -> None:
    nodes = summaries_from_nodetraces([nodetrace_manifest("a", gpus=2, offline_enabled=0.8)])
    plan = plan_placements(
        [make_queued_job("j1"), make_queued_job("j2")], nodes, {"a": {0: "x/other"}}, NOW
    )
    assert len(plan.placements) == 1
    queued, placement = plan.placements[0]
    assert placement.node == "a" and placement.gpu_indices == [1]
    assert placement.gpu_uuids == [gpu_uuid("a", 1)]
    assert placement.compute == 0.8 and placement.decided_at == NOW
    assert [q.key for q, _ in plan.unschedulable] == [
        "default/j1" if queued.key == "default/j2" else "default/j2"
    ]


def test_unschedulable_jobs_get_the_schedulers_explanation() -> None:
    nodes = summaries_from_nodetraces([nodetrace_manifest("a", gpus=2, offline_enabled=0.3)])
    plan = plan_placements([make_queued_job("j", sla=0.9)], nodes, {}, NOW)
    assert plan.placements == []
    ((queued, message),) = plan.unschedulable
    assert queued.key == "default/j"
    assert message.startswith("0/1 nodes are available")


def test_broken_nodetraces_are_skipped() -> None:
    good = nodetrace_manifest("a", gpus=1)
    bad = {"metadata": {"name": "b"}, "status": {"perGPU": [{"index": "x"}]}}
    assert set(summaries_from_nodetraces([good, bad])) == {"a"}


def test_prometheus_summaries_take_the_gpu_inventory_from_nodetraces() -> None:
    traced = summaries_from_nodetraces([nodetrace_manifest("a", gpus=2, offline_enabled=0.2)])
    base = traced["a"]
    # What agent metrics give: the load, GPU indices, no UUIDs or products.
    bare = replace(base, gpus=(GpuSpec(index=0), GpuSpec(index=1, product="own")))
    other = replace(base, node="b", gpus=(GpuSpec(index=0), GpuSpec(index=1, uuid="GPU-b1")))
    merged = with_inventory({"a": bare, "b": other}, traced)
    assert [g.uuid for g in merged["a"].gpus] == [gpu_uuid("a", 0), gpu_uuid("a", 1)]
    assert [g.product for g in merged["a"].gpus] == ["NVIDIA H100", "own"]
    assert merged["a"].online_busy_seconds is bare.online_busy_seconds  # the load is kept
    assert merged["b"] is other
    assert unbindable_nodes(merged) == {"b": UNKNOWN_UUIDS_REASON}
    assert isinstance(merged["a"], NodeSummary)


def test_runner_ups_for_the_front_of_a_small_pass_and_none_in_a_burst() -> None:
    nodes = summaries_from_nodetraces(
        [nodetrace_manifest(n, gpus=8, offline_enabled=0.8) for n in ("a", "b", "c")]
    )
    queue = [make_queued_job(f"j{i}") for i in range(6)]
    plan = plan_placements(queue, nodes, {}, NOW, explained=explained_placements(len(queue)))
    assert len(plan.placements) == 6
    assert list(plan.runner_ups) == [q.key for q, _ in plan.placements[:EXPLAINED]]
    assert all(len(lines) == 2 for lines in plan.runner_ups.values())  # the two other nodes
    burst = plan_placements(queue, nodes, {}, NOW, explained=explained_placements(BURST + 1))
    assert len(burst.placements) == 6 and burst.runner_ups == {}
    assert explained_placements(BURST) == EXPLAINED


def test_the_planned_exit_pass_places_large_jobs_over_the_shorter_horizon() -> None:
    # Over the admission horizon the node is at its peak; over the shorter one it is quiet.
    peak = summaries_from_nodetraces([nodetrace_manifest("a", gpus=4, offline_enabled=0.1)])
    quiet = summaries_from_nodetraces([nodetrace_manifest("a", gpus=4, offline_enabled=0.9)])
    big, small = make_queued_job("big", gpus=4, sla=0.5), make_queued_job("small", sla=0.5)
    rule = PlannedExitRule()
    off = plan_placements([big, small], peak, {}, NOW)
    assert off.placements == [] and len(off.unschedulable) == 2
    plan = plan_placements([big, small], peak, {}, NOW, planned_exit=rule, short_nodes=quiet)
    ((queued, placement),) = plan.placements
    assert queued.key == "default/big" and placement.planned_exit
    assert placement.gpu_indices == [0, 1, 2, 3]
    # The small job is not tried over the shorter horizon: it waits, with its reasons.
    assert [q.key for q, _ in plan.unschedulable] == ["default/small"]
    # A job the pass names no candidate (a profiling run) gets only the first try.
    none = plan_placements(
        [big], peak, {}, NOW, planned_exit=rule, short_nodes=quiet, exit_candidates=set()
    )
    assert none.placements == [] and len(none.unschedulable) == 1


def test_a_job_the_normal_pass_places_carries_no_planned_exit() -> None:
    quiet = summaries_from_nodetraces([nodetrace_manifest("a", gpus=8, offline_enabled=0.9)])
    jobs = [make_queued_job("first", gpus=4), make_queued_job("second", gpus=4)]
    plan = plan_placements(jobs, quiet, {}, NOW, planned_exit=PlannedExitRule(), short_nodes=quiet)
    assert len(plan.placements) == 2
    assert not any(p.planned_exit for _, p in plan.placements)
    # The shorter pass sees the first pass's placements as taken.
    one = plan_placements(
        jobs,
        quiet,
        {"a": dict.fromkeys(range(4), "x/held")},
        NOW,
        planned_exit=PlannedExitRule(),
        short_nodes=quiet,
    )
    assert len(one.placements) == 1 and len(one.unschedulable) == 1
