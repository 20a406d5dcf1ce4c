"""The cycle's shortcuts decide exactly as the long way: the first round of a stable sort
without sorting the rest, one node's candidates from its rows of the table, the memory
bound per table, the memory factor alone, and runner-ups that explain only the nodes
that can be named."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gleaner.perfmodel.model import subset_factors, subset_memory
from gleaner.scheduler import (
    BiasTable,
    SchedulerConfig,
    SchedulingSnapshot,
    decide,
    explain_nodes,
)
from gleaner.scheduler.explain import runner_up_reasons
from gleaner.scheduler.schedule import Scheduler, _first_of_order
from gleaner.testing.scheduling import synthetic_cluster, synthetic_jobs


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from([0.0, -0.0, 1.0, 50.0, float("nan")]), st.floats(-100, 0)),
        max_size=40,
    ),
    st.integers(1, 8),
)
def test_the_first_round_is_the_stable_sorts_first_entries(values: list[float], count: int) -> None:
    keys = np.asarray(values, dtype=np.float64)
    expected = np.argsort(keys, kind="stable")[:count]
    assert _first_of_order(keys, count).tolist() == expected.tolist()


def _scheduler(seed: int, occupied_share: int = 3) -> tuple[Scheduler, SchedulingSnapshot]:
    nodes = synthetic_cluster(30, 8, seed=seed)
    names = sorted(nodes)
    occupied = {name: {0: "a/b", 5: "a/c"} for name in names[::occupied_share]}
    bias = BiasTable()
    for name in names[::4]:
        for _ in range(5):
            bias.observe(name, "", observed=0.5, predicted=0.7)
    snapshot = SchedulingSnapshot(
        synthetic_jobs(40, seed=seed), nodes, occupied=occupied, bias=bias
    )
    return Scheduler(snapshot.state(), SchedulerConfig()), snapshot


def test_one_nodes_candidates_are_the_cycles_candidates_on_that_node() -> None:
    scheduler, snapshot = _scheduler(3)
    view = scheduler.view
    for job in snapshot.jobs[:12]:
        ctx = scheduler.context(job)
        slot_ok = ctx.allowed & view.free
        for row in range(view.n_nodes):
            only = np.zeros(view.n_nodes, dtype=bool)
            only[row] = True
            a = scheduler.candidates(ctx, only, slot_ok)
            b = scheduler.node_candidates(ctx, row, slot_ok)
            for name in ("row", "node", "mask", "slots", "compute", "memory", "multi", "bias"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_the_memory_bound_and_the_memory_factor_alone_are_the_long_ways() -> None:
    scheduler, snapshot = _scheduler(5)
    view = scheduler.view
    for job in snapshot.jobs[:8]:
        memory = view.memory(job.profile)
        table = view.table(job.gpus)
        bound = memory[table.node[:, None], table.slots].min(axis=1)
        assert np.array_equal(view.memory_bound(job.profile, job.gpus), bound)
        for row in range(0, view.n_nodes, 7):
            rows = slice(table.node_start[row], table.node_start[row + 1])
            slots = table.slots[rows]
            if len(slots):
                _, expected, _ = subset_factors(job.profile, view.summaries[row], slots)
                assert np.array_equal(
                    subset_memory(job.profile, view.summaries[row], slots), expected
                )


def test_runner_ups_name_the_nodes_that_judging_every_node_names() -> None:
    judged: list[tuple[int, int]] = []
    for seed in range(6):
        scheduler, snapshot = _scheduler(seed, occupied_share=2)
        result = decide(snapshot)
        assert result.placements
        for placed in result.placements[:6]:
            job = next(j for j in snapshot.jobs if j.key == placed.job)
            assert placed.explanation is not None
            every = explain_nodes(snapshot, job, skip=[placed.node])
            for limit in (1, 3, 5, 100):
                fewer = scheduler.runner_ups(scheduler.context(job), placed.explanation, limit)
                judged.append((len(fewer), len(every)))
                assert runner_up_reasons(placed.explanation, fewer, limit) == runner_up_reasons(
                    placed.explanation, every, limit
                )
    # With a small limit most nodes are never judged; with one above the nodes, all are.
    assert any(fewer < every for fewer, every in judged)
    assert all(fewer <= every for fewer, every in judged)
