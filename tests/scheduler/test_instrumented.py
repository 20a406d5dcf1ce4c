"""The Instrumented filter: nothing is placed on a GPU that runs an uninstrumented process."""

from __future__ import annotations

import numpy as np

from gleaner.scheduler import ClusterState, JobRequest, SchedulerConfig
from gleaner.scheduler.cluster import SchedulingSnapshot
from gleaner.scheduler.plugins.instrumented import Instrumented
from gleaner.scheduler.schedule import Scheduler, decide
from gleaner.testing.scheduling import simple_profile, synthetic_node

PROFILE = simple_profile()
CONFIG = SchedulerConfig()


def _nodes() -> dict[str, object]:
    return {
        "a": synthetic_node("a", [0.2, 0.2], []),
        "b": synthetic_node("b", [0.2], []),
    }


def test_uninstrumented_gpus_are_pruned_and_sets_holding_them_rejected() -> None:
    cluster = ClusterState(_nodes(), uninstrumented={"a": {0: "pod ns/web"}})  # type: ignore[arg-type]
    sched = Scheduler(cluster, CONFIG)
    ctx = sched.context(JobRequest("ns/j", PROFILE, 1, 0.1))
    plugin = Instrumented(CONFIG)
    mask = plugin.slot_mask(ctx)
    assert mask[0].tolist() == [False, True] and bool(mask[1, 0])
    table = sched.candidates(ctx, np.ones(2, dtype=bool), ctx.allowed & sched.view.free)
    ok = plugin.check(ctx, table)
    where = [
        (int(n), tuple(int(p) for p in s)) for n, s in zip(table.node, table.slots, strict=True)
    ]
    assert dict(zip(where, ok.tolist(), strict=True)) == {
        (0, (0,)): False,
        (0, (1,)): True,
        (1, (0,)): True,
    }
    assert plugin.explain(ctx, table.take([where.index((0, (0,)))])) == (
        "GPU 0 runs an uninstrumented process (pod ns/web)"
    )


def test_the_scheduler_places_nothing_there_and_says_why() -> None:
    nodes = {"a": synthetic_node("a", [0.2, 0.2], [])}
    job = JobRequest("ns/j", PROFILE, 1, 0.1)
    placed = decide(SchedulingSnapshot([job], nodes, uninstrumented={"a": {0: "pod ns/web"}}))
    assert [p.gpus for p in placed.placements] == [(1,)]
    both = {"a": {0: "pod ns/web", 1: "pid 42"}}
    result = decide(SchedulingSnapshot([job], nodes, uninstrumented=both))
    assert result.placements == []
    (why,) = result.unschedulable
    assert any("runs an uninstrumented process" in r for r in why.reasons), why.reasons
    # Without the report (the node opted out, or a simulated node) nothing changes.
    assert [p.gpus for p in decide(SchedulingSnapshot([job], nodes)).placements] == [(0,)]
